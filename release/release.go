// Package release holds what crowdlog finally publishes: the ClickHouse
// schema and writer for released histograms (released_items), the
// counts-only epoch-close summary (undecrypted_summary, CrowdLogging §3.3)
// and the release log (releases), plus the TSV export of `crowdlog run
// --export`.
//
// Writes are idempotent per release key (app, epoch, policy, k): a restarted
// release stage may call WriteRelease again and the tables end up with one
// copy of each row (see schema.sql for how).
package release

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Item is one released histogram row of one release key (App, Epoch,
// Policy, K).
//
// Item is the normalized artifact (CrowdLogging §3.3 normalization, docs/applications.md), Variant its
// most frequent original (secondary) form or "" — always "" under a DP
// policy, where it would be an exact function of the reports
// (docs/policies.md). For threshold policies (FT_a, FT_u)
// Impressions and Users are exact counts; for DP policies (DP_a, DP_u,
// ZEALOUS) they are the noisy released values. K is the Shamir threshold
// (ZEALOUS's τ), 0..2^32−1.
type Item struct {
	App, Epoch, Policy string
	K                  int
	Item, Variant      string
	Impressions, Users uint64
}

// Undecrypted is one counts-only line of the epoch-close summary
// (CrowdLogging §3.3: "5 undecrypted queries were each entered 194 times"):
// Tags undecrypted tags each had Reports reports from Users distinct users.
// It never names an artifact.
type Undecrypted struct {
	App, Epoch, Policy string
	K                  int
	Reports, Users     uint64
	Tags               uint64
}

// Key identifies one release: everything released for one application,
// epoch, policy and threshold k is written and recorded together.
type Key struct {
	App, Epoch, Policy string
	K                  int
}

// Key returns the release key of it.
func (it Item) Key() Key { return Key{it.App, it.Epoch, it.Policy, it.K} }

// Key returns the release key of u.
func (u Undecrypted) Key() Key { return Key{u.App, u.Epoch, u.Policy, u.K} }

// String formats k as "app/epoch/policy/k=K" for logs and errors.
func (k Key) String() string {
	return fmt.Sprintf("%s/%s/%s/k=%d", k.App, k.Epoch, k.Policy, k.K)
}

// TSVHeader is the header line WriteTSV writes (without the newline); the
// column contract of `crowdlog run --export` (README, `crowdlog run`).
const TSVHeader = "app\tepoch\tpolicy\titem\timpressions\tusers"

// SortItems orders items the way releases are shown: impressions
// descending, then item ascending (byte order), then variant, app, epoch,
// policy and k ascending so the order is total. It sorts in place.
func SortItems(items []Item) {
	sort.SliceStable(items, func(i, j int) bool {
		a, b := items[i], items[j]
		if a.Impressions != b.Impressions {
			return a.Impressions > b.Impressions
		}
		if a.Item != b.Item {
			return a.Item < b.Item
		}
		if a.Variant != b.Variant {
			return a.Variant < b.Variant
		}
		return keyLess(a.Key(), b.Key())
	})
}

// WriteTSV writes items as tab-separated values: the line TSVHeader, then
// one line per item in SortItems order (the caller's slice is not
// modified). Fields are escaped like ClickHouse's TabSeparated format:
// backslash → `\\`, tab → `\t`, newline → `\n`, carriage return → `\r`.
// Errors are those of out, wrapped.
func WriteTSV(out io.Writer, items []Item) error {
	sorted := append([]Item(nil), items...)
	SortItems(sorted)
	bw := bufio.NewWriterSize(out, 64<<10)
	bw.WriteString(TSVHeader)
	bw.WriteByte('\n')
	var num [20]byte
	for _, it := range sorted {
		bw.WriteString(escapeTSV(it.App))
		bw.WriteByte('\t')
		bw.WriteString(escapeTSV(it.Epoch))
		bw.WriteByte('\t')
		bw.WriteString(escapeTSV(it.Policy))
		bw.WriteByte('\t')
		bw.WriteString(escapeTSV(it.Item))
		bw.WriteByte('\t')
		bw.Write(strconv.AppendUint(num[:0], it.Impressions, 10))
		bw.WriteByte('\t')
		bw.Write(strconv.AppendUint(num[:0], it.Users, 10))
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("release: write TSV export (is the output file writable?): %w", err)
	}
	return nil
}

var tsvEscaper = strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\r", `\r`)

// escapeTSV escapes one TSV field (see WriteTSV).
func escapeTSV(s string) string {
	if !strings.ContainsAny(s, "\\\t\n\r") {
		return s
	}
	return tsvEscaper.Replace(s)
}
