package protocol

import (
	"encoding/json"
	"fmt"
)

// Kinds of messages on the aggregator's output topic ("decrypted").
const (
	KindItem    = "item"    // one decrypted report
	KindSummary = "summary" // counts-only summary of undecrypted tags at epoch close
	KindClosed  = "closed"  // a reports partition finished the epoch
)

// Decrypted is one message on the "decrypted" topic, JSON-encoded. The
// aggregator writes it to the same partition number as the reports
// partition it came from, so a partition's "closed" marker follows all of
// its items.
//
// KindItem: one report that opened: Tag and Report (hex ids) let the release
// stage drop duplicates from at-least-once delivery; Unit (hex) counts
// distinct users; Item is the normalized artifact, Variant its original form;
// Pipeline (hex, 64 digits) is the digest of the pipeline definition the
// report was sealed for (star.Report.Pipeline), empty when none: a release
// stage releases only items of the pipeline it was given.
// KindSummary: Summary rows (CrowdLogging §3.3: "5 undecrypted queries were
// each entered 194 times"). KindClosed: Partition of Partitions is done.
type Decrypted struct {
	Kind       string       `json:"kind"`
	App        string       `json:"app"`
	Epoch      string       `json:"epoch"`
	Policy     string       `json:"policy"`
	K          int          `json:"k"`
	Pipeline   string       `json:"pipeline,omitempty"`
	Tag        string       `json:"tag,omitempty"`
	Report     string       `json:"report,omitempty"`
	Unit       string       `json:"unit,omitempty"`
	Item       string       `json:"item,omitempty"`
	Variant    string       `json:"variant,omitempty"`
	Summary    []SummaryRow `json:"summary,omitempty"`
	Partition  int          `json:"partition,omitempty"`
	Partitions int          `json:"partitions,omitempty"`
}

// SummaryRow says Tags undecrypted tags each had Reports reports carrying
// Shares distinct shares (distinct users under FT_u).
type SummaryRow struct {
	Reports uint64 `json:"reports"`
	Shares  uint64 `json:"shares"`
	Tags    uint64 `json:"tags"`
}

// ParseDecrypted decodes one message; errors wrap ErrMalformed for bad JSON
// or an unknown kind.
func ParseDecrypted(b []byte) (*Decrypted, error) {
	if len(b) > MaxReport*2 {
		return nil, Malformed("decrypted message of %d bytes", len(b))
	}
	var d Decrypted
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch d.Kind {
	case KindItem, KindSummary, KindClosed:
	default:
		return nil, Malformed("unknown kind %q", d.Kind)
	}
	return &d, nil
}

// EpochClose is the control message an operator (or `crowdlog run`) writes to
// every partition of the reports topic, with header ControlHeader, to close
// an epoch (epoch close, docs/architecture.md). Op is ControlCloseEpoch or
// empty (closes written before EpochOpen existed); ParseControl decodes it.
type EpochClose struct {
	Op         string `json:"op,omitempty"`
	App        string `json:"app"`
	Epoch      string `json:"epoch"`
	Partitions int    `json:"partitions"`
}

// SummaryBucket is the lower bound of n's power-of-two bucket [2^i, 2^(i+1)):
// 1→1, 2–3→2, 4–7→4, …; 0→0. A coarse summary line reports this instead of
// an exact report count (the aggregator's CoarseSummary, the release's
// coarse summary mode).
func SummaryBucket(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	b := uint64(1)
	for b <= n/2 {
		b <<= 1
	}
	return b
}
