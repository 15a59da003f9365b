package prio3

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/pdd"
)

// Modes of `crowdlog release-pdd --mode`.
const (
	ModeGroups = "groups" // blinded groups (release/pdd): topic group-sums
	ModePrio3  = "prio3"  // two aggregators (this package): topic prio3-shares
)

// Measurement kinds of --kind.
const (
	KindSumVec   = "sumvec"
	KindPresence = "presence"
)

// Options are the Prio3-mode settings of `crowdlog release-pdd`: the mode,
// and for --mode prio3 the campaign, the collector key and the campaign's
// measurement (the aggregators' values). The brokers, ClickHouse and the
// keyword list are release/pdd.Options'.
type Options struct {
	Mode         string   // ModeGroups (default) or ModePrio3
	Campaign     string   // the campaign name (1–64 bytes), as the aggregators'
	CollectorKey []string // onion.KeyPair files of the collector (keydir role prio3-collector): the current, then older ones during a rotation
	Kind         string   // KindSumVec or KindPresence
	Bits         int      // SumVec: counts clipped to 2^Bits − 1 (1..16)
	MaxWeight    int      // presence: most keywords per report
	L1           uint64   // SumVec: the clients' daily L1 bound S, the noise's sensitivity (0 = L·(2^Bits − 1))
	MinBatchSize uint64   // fewest reports a released day may have (the aggregators' value)
	// StatusEpsilon, StatusDelta: the leader's --status-epsilon and
	// --status-delta (p3.AutoStatusEpsilon = 0.1 × --epsilon), charged on
	// each noisy day's ledger row (Stage.StatusEpsilon).
	StatusEpsilon, StatusDelta float64
	Blacklist                  []string // keywords never released
}

// DefaultOptions returns the options without flags: groups mode; for
// prio3, SumVec with DefaultBits and the collector key of the keys
// directory "keys" (keydir role prio3-collector).
func DefaultOptions() Options {
	return Options{Mode: ModeGroups, Kind: KindSumVec, Bits: p3.DefaultBits, L1: p3.DefaultL1, CollectorKey: []string{"keys/" + keydir.Prio3CollectorKey},
		StatusEpsilon: p3.AutoStatusEpsilon, StatusDelta: p3.DefaultStatusDelta}
}

// DefaultBudgetEpsilon is the privacy budget per (dataset, day) of a
// Prio3-mode release when --budget-epsilon is 0: ε = 1 per person-day,
// the aggregators' default --epsilon, plus the leader's default status
// ε_c = 0.1 × ε (p3.StatusEpsilonShare). A day whose spend would pass it is
// refused (a second collection of a day under another ε, a larger
// --epsilon); raise --budget-epsilon to release more.
const DefaultBudgetEpsilon = 1.0 + p3.StatusEpsilonShare

// AddFlags adds --mode and the Prio3-mode flags to f, filling o.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Mode, "mode", o.Mode, "PDD mode: groups (blinded groups, topic group-sums) or prio3 (two aggregators, topic prio3-shares)")
	f.StringVar(&o.Campaign, "campaign", o.Campaign, "prio3: the campaign whose batches are released (as the aggregators')")
	f.StringSliceVar(&o.CollectorKey, "collector-key", o.CollectorKey, "prio3: the collector's HPKE key file (keys dir role prio3-collector); repeat during a rotation, the current key first")
	f.StringVar(&o.Kind, "kind", o.Kind, "prio3: measurement, sumvec (clipped counts) or presence")
	f.IntVar(&o.Bits, "bits", o.Bits, "prio3 sumvec: counts clipped to 2^bits − 1")
	f.IntVar(&o.MaxWeight, "max-weight", o.MaxWeight, "prio3 presence: most keywords one report may set")
	f.Uint64Var(&o.L1, "l1", o.L1, "prio3 sumvec: the clients' bound S on one client's daily sum of counts, the noise's sensitivity (the aggregators' --l1; 0 = L·(2^bits − 1))")
	f.Uint64Var(&o.MinBatchSize, "min-batch-size", o.MinBatchSize, "prio3: fewest reports a released day may have (the aggregators' value)")
	f.StringSliceVar(&o.Blacklist, "blacklist", o.Blacklist, "prio3: keywords never released (comma-separated; normalized like the keyword list, so any case matches)")
	f.Float64Var(&o.StatusEpsilon, "status-epsilon", o.StatusEpsilon, "prio3: the leader's --status-epsilon (ε_c of each day's released/withheld status; negative = 0.1 × --epsilon, 0 = the exact minimum batch rule): each noisy day's ledger row charges ε + ε_c")
	f.Float64Var(&o.StatusDelta, "status-delta", o.StatusDelta, "prio3: the leader's --status-delta (δ of each day's status), charged on each noisy day's ledger row with --status-epsilon > 0")
}

// Measurement returns the campaign's measurement over a list of length
// keywords. Errors wrap p3.ErrConfig.
func (o *Options) Measurement(length int) (p3.Config, error) {
	c := p3.Config{Length: length}
	switch o.Kind {
	case KindSumVec:
		c.Kind, c.Bits, c.L1 = p3.KindSumVec, o.Bits, o.L1
	case KindPresence:
		c.Kind, c.MaxWeight = p3.KindPresence, o.MaxWeight
	default:
		return c, fmt.Errorf("%w: --kind %q: give sumvec or presence", p3.ErrConfig, o.Kind)
	}
	if err := c.Check(); err != nil {
		return c, fmt.Errorf("--kind %s --bits %d --max-weight %d: %w", o.Kind, o.Bits, o.MaxWeight, err)
	}
	return c, nil
}

// Validate checks what needs no file: the mode, and in prio3 mode the
// campaign, the key path, the kind and the minimum batch size.
func (o *Options) Validate() error {
	switch o.Mode {
	case ModeGroups:
		return nil
	case ModePrio3:
	default:
		return fmt.Errorf("--mode %q: give groups or prio3", o.Mode)
	}
	switch {
	case o.Campaign == "" || len(o.Campaign) > 64:
		return fmt.Errorf("--campaign %q: prio3 mode needs the campaign name (1–64 bytes)", o.Campaign)
	case len(o.CollectorKey) == 0 || slices.Contains(o.CollectorKey, ""):
		return errors.New("prio3 mode needs --collector-key FILE (the collector's key; see `crowdlog keys`)")
	case o.MinBatchSize == 0:
		return errors.New("prio3 mode needs --min-batch-size ≥ 1 (the aggregators' value)")
	case o.Kind != KindSumVec && o.Kind != KindPresence:
		return fmt.Errorf("--kind %q: give sumvec or presence", o.Kind)
	case !(o.StatusEpsilon < 0) && p3.CheckStatus(o.StatusEpsilon, o.StatusDelta) != nil:
		return fmt.Errorf("--status-epsilon %v, --status-delta %v: %w (the leader's values)", o.StatusEpsilon, o.StatusDelta, p3.CheckStatus(o.StatusEpsilon, o.StatusDelta))
	case o.StatusEpsilon < 0 && !(o.StatusDelta > 0 && o.StatusDelta < 0.5):
		return fmt.Errorf("--status-delta %v: want 0 < δ < 0.5 (the leader's value)", o.StatusDelta)
	}
	return nil
}

// New builds the Prio3 stage: it validates o, takes base's --epsilon (the
// aggregators' noise ε, which the shares must carry), --dataset and
// --budget-*, refuses a --max-count other than the measurement's bound,
// reads base's keyword list and the collector key, and opens ClickHouse
// (base's address and database, creating the schema). A zero
// --budget-epsilon means DefaultBudgetEpsilon: a Prio3 release never runs
// without a finite budget. The caller closes the Writer after the stage's Run.
func (o *Options) New(ctx context.Context, base pdd.Options, log *slog.Logger) (*Stage, *release.Writer, error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	if o.Mode != ModePrio3 {
		return nil, nil, fmt.Errorf("--mode %s: the Prio3 stage needs --mode prio3", o.Mode)
	}
	if math.IsNaN(base.Epsilon) || math.IsInf(base.Epsilon, 0) || base.Epsilon < 0 {
		return nil, nil, fmt.Errorf("--epsilon %v: must be finite and ≥ 0 (the aggregators' --epsilon; 0 = exact shares)", base.Epsilon)
	}
	list, err := keywords.Load(base.Keywords)
	if err != nil {
		return nil, nil, err
	}
	m, err := o.Measurement(list.Len())
	if err != nil {
		return nil, nil, err
	}
	if base.MaxCount != 0 && uint64(base.MaxCount) != m.Max() {
		return nil, nil, fmt.Errorf("--max-count %d: in prio3 mode the noise's sensitivity is the measurement's per-client bound, %d (2^bits − 1, or 1 for presence); leave --max-count unset", base.MaxCount, m.Max())
	}
	keys, err := keydir.LoadKeyPairs(o.CollectorKey)
	if err != nil {
		return nil, nil, fmt.Errorf("--collector-key: %w", err)
	}
	w, err := release.Open(ctx, base.ClickHouse, base.Database)
	if err != nil {
		return nil, nil, err
	}
	budget := finiteBudget(base.Budget)
	st := &Stage{Brokers: base.Kafka, Writer: w, List: list, Blacklist: o.Blacklist, Logger: log,
		Epsilon: base.Epsilon, Dataset: base.Dataset, Budget: budget,
		StatusEpsilon: p3.StatusEpsilonOf(o.StatusEpsilon, base.Epsilon), StatusDelta: o.StatusDelta,
		Collector: p3.Collector{Campaign: o.Campaign, Measurement: m, Key: keys[0], MinBatchSize: o.MinBatchSize}, OldKeys: keys[1:]}
	return st, w, nil
}

// finiteBudget returns b with a zero ε budget ("no limit" elsewhere)
// replaced by DefaultBudgetEpsilon.
func finiteBudget(b release.Budget) release.Budget {
	if b.Epsilon == 0 {
		b.Epsilon = DefaultBudgetEpsilon
	}
	return b
}
