package prio3

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/metrics"
	"github.com/crowdlog/crowdlog/infra/retry"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/pdd"
)

// Released is what Stage.OnDay receives for each paired batch.
type Released struct {
	// Batch is the batch as State unsharded it.
	Batch Batch
	// Row is the day this stage wrote; when Written is false an earlier run
	// had written the day and Row.Counts is nil (the released counts are
	// those in ClickHouse).
	Row     release.PDDRound
	Written bool
}

// Stage reads topic "prio3-shares" (protocol.Prio3SharesTopic) from the
// first offset of every partition (infra/kafka.ReadTopic), feeds State and
// writes every day it pairs to Writer (WritePDDRound). Exactly once through
// restarts: a restarted stage re-reads the topic from its start and skips
// every day whose pdd_rounds row exists (Writer.IsPDDReleased) before
// building it, and WritePDDRound itself never rewrites a complete day and
// redoes a half-written one from scratch.
//
// The day's pdd_rounds row in this mode: one group, complete, confidence
// 1 (every prepared report is in the totals: not a property of the data),
// epsilon = Epsilon (0: exact), max_count = the measurement's per-client
// maximum per keyword (2^bits − 1, or 1 for presence) that the FLP proof
// enforced. The participation columns active = grouped = decrypted are the
// batch's report count only for an exact day (Epsilon 0); a noisy day
// leaves them out (written 0): an exact count would tell a reader of two
// neighbouring releases whether one person took part, which the noise on
// the totals is there to hide. The exact count stays internal (the
// collector's plausibility check, Released.Batch).
//
// Noise (Epsilon > 0): the aggregators add it, not this stage (each its
// own integer Laplace draw of scale S/ε per keyword, S = the measurement's
// Sensitivity, one person's daily L1 bound; drawn once per batch:
// aggregator/prio3's noise.go). The stage releases a day only from two
// shares that both claim Epsilon (AggShare.Epsilon, in the HPKE AAD;
// others are dropped epsilon_mismatch), writes the noisy totals (negative
// allowed; zero ones left out, as groups mode), and spends DaySpend (ε per
// person-day) on the privacy ledger of (Dataset, day) once, written with
// the day through release.Writer.WriteDrawnPDDRound: the day's counts are
// stored as its draw before anything else and a redo writes the stored
// day. A day over Budget is refused (Refused), logged, and not written.
//
// Withheld days: a day the leader did not collect because its batch had
// fewer reports than the minimum batch size reaches the stage as the
// leader's notice (State.SmallBatch) and is recorded in pdd_withheld,
// reason release.WithheldMinBatch (Withheld), as `crowdlog pdd` records
// it. With the leader's status ε_c > 0 the status is (ε_c, δ)-DP (a
// noisy count, and every day of the span without reports withheld too:
// aggregator/prio3 status.go), and a released day's ledger row charges
// ε_c and δ; with Epsilon > 0 a withheld day's status has its own row
// (StatusSpend, key release.PDDStatusLedgerKey, budget-checked: over the
// budget the day is recorded withheld for the budget and counted
// Refused); with ε_c = 0 it is the exact count's threshold bit
// (docs/threat-model.md, "below_min_batch").
type Stage struct {
	Brokers []string
	// Topic defaults to protocol.Prio3SharesTopic.
	Topic string
	// Writer receives the days (a *release.Writer in production).
	Writer pdd.Sink
	// Collector is the campaign, its measurement (Length = List.Len()), the
	// collector's key and the minimum batch size (the aggregators' value).
	Collector p3.Collector
	// OldKeys are collector keys before a rotation: shares sealed to them
	// still open (tried after Collector.Key).
	OldKeys []*onion.KeyPair
	// List is the campaign's keyword list: total i is keyword List.Words[i].
	List *keywords.List
	// Blacklist: keywords never released, whatever their totals (clients
	// already leave them out, PDD §6.1; the release does not trust that).
	Blacklist []string
	// Epsilon is the ε both aggregators add noise with (aggregate-prio3
	// --epsilon); 0 = exact shares. With Epsilon > 0 Writer must be a
	// pdd.SpendingSink (a *release.Writer).
	Epsilon float64
	// StatusEpsilon and StatusDelta are the (ε_c, δ) of each day's status
	// at the leader (aggregate-prio3 --status-epsilon, --status-delta;
	// 0: the exact minimum batch rule): a noisy day's ledger row charges
	// them with Epsilon (DaySpend).
	StatusEpsilon, StatusDelta float64
	// Dataset names the privacy budget noisy days spend from (with the
	// day); "" means pdd.DefaultDataset.
	Dataset string
	// Budget is the per-(Dataset, day) budget; zero fields = no limit.
	Budget release.Budget
	Logger *slog.Logger
	// OnDay, when set, is called after each paired day is in ClickHouse
	// (written now or by an earlier run), from Run's goroutine.
	OnDay func(Released)

	// Days counts days written by this run, Skipped those found already
	// written, Refused noisy days refused over the privacy budget, Withheld
	// the leader's small-batch notices recorded (pdd_withheld
	// below_min_batch), Dropped the messages State dropped (by reason:
	// DroppedBy).
	Days, Skipped, Refused, Withheld, Dropped atomic.Int64

	mu      sync.Mutex
	dropped map[string]int64

	recorded atomic.Bool // the campaign's pdd_campaigns row written by this run

	tail atomic.Pointer[infrakafka.Tail]
}

// ConsumerLag returns, per partition of the topic, the messages behind the
// partition's end at its last read (empty before Run has read).
func (st *Stage) ConsumerLag() map[int]int64 { return st.tail.Load().Lag() }

// DroppedBy returns a copy of the dropped messages by reason (the Drop
// constants).
func (st *Stage) DroppedBy() map[string]int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make(map[string]int64, len(st.dropped))
	for k, v := range st.dropped {
		out[k] = v
	}
	return out
}

// Register exposes the stage's counters: crowdlog_prio3_release_days_total,
// crowdlog_prio3_release_skipped_total,
// crowdlog_prio3_release_refused_total,
// crowdlog_prio3_release_dropped_total{reason} and
// crowdlog_prio3_release_consumer_lag{partition}.
func (st *Stage) Register(reg prometheus.Registerer) {
	metrics.CounterFunc(reg, "crowdlog_prio3_release_days_total", "Prio3 days written to ClickHouse.", nil,
		func() float64 { return float64(st.Days.Load()) })
	metrics.CounterFunc(reg, "crowdlog_prio3_release_skipped_total", "Prio3 days found already written.", nil,
		func() float64 { return float64(st.Skipped.Load()) })
	metrics.CounterFunc(reg, "crowdlog_prio3_release_refused_total", "Noisy Prio3 days refused over the privacy budget.", nil,
		func() float64 { return float64(st.Refused.Load()) })
	metrics.CounterMapFunc(reg, "crowdlog_prio3_release_dropped_total", "Aggregate shares dropped by the Prio3 release, by reason.",
		"reason", DropReasons, func() map[string]float64 {
			out := map[string]float64{}
			for k, v := range st.DroppedBy() {
				out[k] = float64(v)
			}
			return out
		})
	metrics.GaugeMapFunc(reg, "crowdlog_prio3_release_consumer_lag", "Messages of the prio3-shares topic behind the partition's end at the last read, per partition.",
		"partition", func() map[string]float64 {
			out := map[string]float64{}
			for p, n := range st.ConsumerLag() {
				out[strconv.Itoa(p)] = float64(n)
			}
			return out
		})
}

func (st *Stage) config() (topic string, log *slog.Logger, skip map[int]bool, err error) {
	topic, log = st.Topic, st.Logger
	if topic == "" {
		topic = protocol.Prio3SharesTopic
	}
	if log == nil {
		log = slog.Default()
	}
	switch {
	case len(st.Brokers) == 0:
		return "", nil, nil, errors.New("prio3 release: no Kafka brokers given")
	case st.Writer == nil:
		return "", nil, nil, errors.New("prio3 release: no Writer (a *release.Writer) given")
	case st.List == nil:
		return "", nil, nil, errors.New("prio3 release: no keyword list given (--keywords, the campaign's list)")
	case st.List.Len() != st.Collector.Measurement.Length:
		return "", nil, nil, fmt.Errorf("prio3 release: measurement length %d ≠ the keyword list's %d keywords", st.Collector.Measurement.Length, st.List.Len())
	case st.Collector.Campaign == "" || len(st.Collector.Campaign) > 64:
		return "", nil, nil, fmt.Errorf("prio3 release: campaign name %q must be 1–64 bytes (--campaign)", st.Collector.Campaign)
	case p3.CheckStatus(st.StatusEpsilon, st.StatusDelta) != nil:
		return "", nil, nil, fmt.Errorf("prio3 release: %w (the leader's --status-epsilon, --status-delta)", p3.CheckStatus(st.StatusEpsilon, st.StatusDelta))
	case math.IsNaN(st.Epsilon) || math.IsInf(st.Epsilon, 0) || st.Epsilon < 0:
		return "", nil, nil, fmt.Errorf("prio3 release: epsilon %v must be finite and ≥ 0 (0 = exact shares; the aggregators' --epsilon)", st.Epsilon)
	case st.Epsilon > 0 && !isSpending(st.Writer):
		return "", nil, nil, errors.New("prio3 release: epsilon > 0 needs a Writer with a privacy ledger (a *release.Writer: pdd.SpendingSink)")
	case st.chargesStatus():
		if _, ok := st.Writer.(StatusSpendingSink); !ok {
			return "", nil, nil, errors.New("prio3 release: a status epsilon > 0 with epsilon > 0 needs a Writer that charges withheld days' status (a *release.Writer: StatusSpendingSink)")
		}
	}
	skip = map[int]bool{}
	for _, w := range st.Blacklist {
		if i := st.List.Lookup(w); i >= 0 { // normalized like the list
			skip[i] = true
		}
	}
	return topic, log, skip, nil
}

// Run serves until ctx ends (then it returns nil). It returns an error when
// the configuration is invalid, the topic cannot be read, or ctx ends while
// a write is being retried; ClickHouse errors are retried with backoff
// (200 ms doubling to 10 s), so an outage delays a day, it does not lose it.
func (st *Stage) Run(ctx context.Context) error {
	topic, log, skip, err := st.config()
	if err != nil {
		return err
	}
	state, err := NewState(st.Collector, st.OldKeys...)
	if err != nil {
		return err
	}
	state.Epsilon = st.Epsilon
	tail := infrakafka.ReadTopic(ctx, st.Brokers, topic, "prio3 release", log)
	defer tail.Stop()
	st.tail.Store(tail)
	for {
		select {
		case <-ctx.Done():
			if err := tail.Stop(); err != nil {
				return fmt.Errorf("%w (is the prio3 leader running?)", err)
			}
			return nil
		case <-tail.Done:
			return fmt.Errorf("%w (is the prio3 leader running?)", tail.Err())
		case m := <-tail.Msgs:
			before := total(state.Dropped)
			b, done := state.Apply(m)
			if n := total(state.Dropped) - before; n > 0 {
				all := st.Dropped.Add(n)
				st.mu.Lock()
				st.dropped = copyMap(state.Dropped)
				st.mu.Unlock()
				if bits.Len64(uint64(all)) != bits.Len64(uint64(all-n)) {
					// when the total passes 1, 2, 4, 8, …: a flood does not flood the log
					log.Info("prio3 release: aggregate shares dropped so far", "by_reason", state.Dropped)
				}
			}
			for _, d := range state.SmallBatch {
				if err := st.withhold(ctx, d, log); err != nil {
					return err
				}
			}
			state.SmallBatch = state.SmallBatch[:0]
			if !done {
				continue
			}
			if err := st.release(ctx, b, skip, log); err != nil {
				return err
			}
		}
	}
}

func isSpending(s pdd.Sink) bool {
	_, ok := s.(pdd.SpendingSink)
	return ok
}

// StatusSpendingSink appends the ledger row of a withheld day's status,
// refusing it over the budget (satisfied by *release.Writer: see
// release.Writer.SpendPDDStatus).
type StatusSpendingSink interface {
	SpendPDDStatus(ctx context.Context, spend release.Spend, budget release.Budget) (bool, error)
}

var _ StatusSpendingSink = (*release.Writer)(nil)

// chargesStatus reports whether a withheld day's status is charged to the
// ledger (StatusSpend): a noisy campaign (Epsilon > 0, the ledger's
// domain) whose leader decides the status from a noisy count
// (StatusEpsilon > 0).
func (st *Stage) chargesStatus() bool { return st.Epsilon > 0 && st.StatusEpsilon > 0 }

// withhold records the leader's notice that day d was withheld: with
// chargesStatus, first the status's ledger row (StatusSpend, once per
// day: a re-read notice spends nothing again), then the pdd_withheld row
// below_min_batch (Withheld). A status over the budget is not charged;
// the day is recorded withheld for the budget instead (Refused). It
// returns an error only when ctx ends while a ClickHouse call is retried.
func (st *Stage) withhold(ctx context.Context, d p3.Day, log *slog.Logger) error {
	st.RecordCampaign(ctx, log)
	detail := fmt.Sprintf("fewer reports than the minimum batch size %d: the aggregators never revealed the batch", st.Collector.MinBatchSize)
	if st.StatusEpsilon > 0 {
		detail = fmt.Sprintf("the leader's noisy count (status ε_c %g, δ %g) under the minimum batch size %d + %d, or no reports: the aggregators never revealed the batch",
			st.StatusEpsilon, st.StatusDelta, st.Collector.MinBatchSize, p3.StatusThreshold(st.StatusEpsilon, st.StatusDelta))
	}
	if st.chargesStatus() {
		dataset := st.Dataset
		if dataset == "" {
			dataset = pdd.DefaultDataset
		}
		spend := StatusSpend(dataset, st.Collector.Campaign, d.Start(), st.StatusEpsilon, st.StatusDelta, st.Collector.MinBatchSize)
		ss := st.Writer.(StatusSpendingSink) // checked by config
		err := retry.Forever(ctx, log, "prio3 release: status ledger row", 200*time.Millisecond, 10*time.Second, func() error {
			_, err := ss.SpendPDDStatus(ctx, spend, st.Budget)
			if errors.Is(err, release.ErrOverBudget) {
				return retry.Permanent(err)
			}
			return err
		})
		if errors.Is(err, release.ErrOverBudget) {
			st.Refused.Add(1)
			log.Error("prio3 release: a withheld day's status would pass the privacy budget; recorded as withheld for the budget", "campaign", st.Collector.Campaign,
				"day", d.String(), "err", err)
			pdd.RecordWithheld(ctx, st.Writer, release.PDDWithheld{Campaign: st.Collector.Campaign, Day: d.Start(), Reason: release.WithheldBudget,
				Detail: fmt.Sprintf("the day's status spend (ε_c %g) would pass the privacy budget (ε %g per day)", st.StatusEpsilon, st.Budget.Epsilon)}, log)
			return nil
		}
		if err != nil {
			return err
		}
	}
	pdd.RecordWithheld(ctx, st.Writer, release.PDDWithheld{Campaign: st.Collector.Campaign, Day: d.Start(), Reason: release.WithheldMinBatch, Detail: detail}, log)
	st.Withheld.Add(1)
	return nil
}

// StatusSpend is the privacy-ledger row of the status of the withheld
// day (campaign, day) on the budget of (dataset, day): key
// release.PDDStatusLedgerKey(campaign, day), ε = statusEps, δ =
// statusDelta per person-day. The leader's status test (aggregator/prio3
// status.go: release iff n ≥ min and n + Lap(1/ε_c) ≥ min + T) is one
// (ε_c, δ)-DP query of the report count whatever its outcome, so a
// withheld day, which releases nothing but its status, spends it too (a
// released day charges it on its DaySpend row; basic composition, Dwork
// & Roth, "The Algorithmic Foundations of Differential Privacy", 2014,
// Thm. 3.16). statusEps must be > 0.
func StatusSpend(dataset, campaign string, day time.Time, statusEps, statusDelta float64, minBatch uint64) release.Spend {
	key := release.PDDStatusLedgerKey(campaign, day)
	return release.Spend{Dataset: dataset, Epoch: key.Epoch, App: key.App, Policy: key.Policy, K: key.K,
		Epsilon: statusEps, Delta: statusDelta,
		Params: fmt.Sprintf("mechanism=noisy-threshold unit=person-day outcome=withheld status_epsilon=%g status_delta=%g status_threshold=%d min_batch=%d",
			statusEps, statusDelta, p3.StatusThreshold(statusEps, statusDelta), minBatch)}
}

// DaySpend is the privacy-ledger row of the noisy day row (row.Epsilon =
// the aggregators' ε > 0) of a campaign measured by m, on the budget of
// (dataset, row.Day): key release.PDDLedgerKey(row.Campaign, row.Day),
// ε = row.Epsilon + statusEps per person-day, δ = statusDelta (0 without
// a status ε_c: pure Laplace). The status (released, not withheld) is
// the leader's noisy count test, (ε_c, δ)-DP (aggregator/prio3 status.go),
// charged with the totals by basic composition (Dwork & Roth, Thm. 3.16);
// a withheld day, which releases nothing but its status, has a row of its
// own (StatusSpend).
// Each aggregator
// adds Laplace noise of scale S/ε to every total, S = m.Sensitivity():
// the L1 bound of one person's whole daily vector (the campaign's L1,
// which the honest client keeps, for SumVec; the max weight w, which the
// FLP proof enforces, for presence), so the day's vector of L totals is
// ε-DP with respect to one person (the Laplace mechanism, Dwork & Roth,
// "The Algorithmic Foundations of Differential Privacy", Thm. 3.6). The
// participation columns are not released under noise (Stage), so they
// spend nothing.
//
// ε is one aggregator's: either aggregator's noise alone gives it (the
// other's draw is post-processing), so the ledger holds against one
// aggregator colluding with the collector or padding a batch; the two
// draws together protect better than the ledger says, never worse. Params
// names the mechanism (laplace-two-aggregators), both aggregators' ε per
// person-day, S and the measurement.
func DaySpend(dataset string, row release.PDDRound, m p3.Config, statusEps, statusDelta float64) release.Spend {
	key := release.PDDLedgerKey(row.Campaign, row.Day)
	what := fmt.Sprintf("kind=sumvec bits=%d l1=%d keywords=%d", m.Bits, m.L1, m.Length)
	if m.Kind == p3.KindPresence {
		what = fmt.Sprintf("kind=presence max_weight=%d keywords=%d", m.MaxWeight, m.Length)
	}
	status, delta := "status=exact-threshold", 0.0
	if statusEps > 0 {
		status, delta = fmt.Sprintf("status=noisy-threshold status_epsilon=%g status_delta=%g status_threshold=%d", statusEps, statusDelta, p3.StatusThreshold(statusEps, statusDelta)), statusDelta
	}
	return release.Spend{Dataset: dataset, Epoch: key.Epoch, App: key.App, Policy: key.Policy, K: key.K,
		Epsilon: row.Epsilon + statusEps, Delta: delta,
		Params: fmt.Sprintf("mechanism=laplace-two-aggregators unit=person-day leader_epsilon=%g helper_epsilon=%g sensitivity_l1=%d scale=%g max_count=%d %s %s",
			row.Epsilon, row.Epsilon, m.Sensitivity(), float64(m.Sensitivity())/row.Epsilon, row.MaxCount, what, status)}
}

func total(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func copyMap(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// row is the day to write for batch b: keyword i's count is Totals[i]
// (zero counts and the keywords of skip left out), the pdd_rounds fields
// as Stage's doc says (epsilon the aggregators' noise ε, 0 = exact; the
// report count only when exact).
func row(b Batch, list *keywords.List, m p3.Config, skip map[int]bool, epsilon float64) release.PDDRound {
	n := uint32(min(b.Count, math.MaxUint32))
	if epsilon > 0 {
		n = 0 // left out under noise: an exact count reveals one person's participation
	}
	r := release.PDDRound{Campaign: b.Campaign, Day: b.Day.Start(), Active: n, Grouped: n, Decrypted: n,
		Groups: 1, Complete: 1, Confidence: 1, MaxCount: uint32(min(m.Max(), math.MaxUint32)), Epsilon: epsilon}
	for i, t := range b.Totals {
		if t != 0 && i < list.Len() && !skip[i] {
			r.Counts = append(r.Counts, release.KeywordCount{Keyword: list.Words[i], Count: t})
		}
	}
	return r
}

// Campaign is the pdd_campaigns row of a Prio3 campaign collected by c
// with the aggregators' ε (0 = exact shares): mode prio3, sensitivity S
// (m.Sensitivity()), k = the minimum batch size, params the measurement.
func Campaign(c p3.Collector, epsilon float64) release.PDDCampaign {
	m := c.Measurement
	params := fmt.Sprintf("kind=sumvec bits=%d l1=%d keywords=%d", m.Bits, m.L1, m.Length)
	if m.Kind == p3.KindPresence {
		params = fmt.Sprintf("kind=presence max_weight=%d keywords=%d", m.MaxWeight, m.Length)
	}
	return release.PDDCampaign{Campaign: c.Campaign, Mode: release.PDDModePrio3, Epsilon: epsilon,
		Sensitivity: uint32(min(m.Sensitivity(), math.MaxUint32)), K: c.MinBatchSize, Params: params}
}

// RecordCampaign writes the campaign's pdd_campaigns row (Campaign) once
// per Stage value, when Writer is a pdd.CampaignSink; failures are logged.
func (st *Stage) RecordCampaign(ctx context.Context, log *slog.Logger) {
	if st.recorded.Load() {
		return
	}
	if log == nil {
		log = slog.Default()
	}
	pdd.RecordCampaign(ctx, st.Writer, Campaign(st.Collector, st.Epsilon), log)
	st.recorded.Store(true)
}

// release writes one paired day unless it was written before.
func (st *Stage) release(ctx context.Context, b Batch, skip map[int]bool, log *slog.Logger) error {
	st.RecordCampaign(ctx, log)
	day := b.Day.Start()
	var written bool
	if err := retry.Forever(ctx, log, "prio3 release: ClickHouse call", 200*time.Millisecond, 10*time.Second, func() (err error) {
		written, err = st.Writer.IsPDDReleased(ctx, b.Campaign, day)
		return err
	}); err != nil {
		return err
	}
	r := row(b, st.List, st.Collector.Measurement, skip, st.Epsilon)
	if written {
		st.Skipped.Add(1)
		log.Info("prio3 release: day already released; skipping", "campaign", b.Campaign, "day", b.Day.String())
		if st.OnDay != nil {
			r.Counts = nil
			st.OnDay(Released{Batch: b, Row: r})
		}
		return nil
	}
	write := func() error { return st.Writer.WritePDDRound(ctx, r, time.Now()) }
	if st.Epsilon > 0 {
		dataset := st.Dataset
		if dataset == "" {
			dataset = pdd.DefaultDataset
		}
		spend := DaySpend(dataset, r, st.Collector.Measurement, st.StatusEpsilon, st.StatusDelta)
		ss := st.Writer.(pdd.SpendingSink) // checked by config
		write = func() error {
			drawn, err := ss.WriteDrawnPDDRound(ctx, r, time.Now(), spend, st.Budget)
			if err == nil {
				r = drawn // a redo writes the day's stored draw
			}
			if errors.Is(err, release.ErrOverBudget) {
				return retry.Permanent(err) // refused, not failed: never retried
			}
			return err
		}
	}
	err := retry.Forever(ctx, log, "prio3 release: write to ClickHouse", 200*time.Millisecond, 10*time.Second, write)
	if errors.Is(err, release.ErrOverBudget) {
		st.Refused.Add(1)
		log.Error("prio3 release: day refused, over the privacy budget; nothing released", "campaign", b.Campaign,
			"day", b.Day.String(), "err", err)
		pdd.RecordWithheld(ctx, st.Writer, release.PDDWithheld{Campaign: b.Campaign, Day: day, Reason: release.WithheldBudget,
			Detail: fmt.Sprintf("the day's spend would pass the privacy budget (ε %g per day); nothing written", st.Budget.Epsilon)}, log)
		return nil
	}
	if err != nil {
		return err
	}
	st.Days.Add(1)
	log.Info("prio3 release: day released", "campaign", b.Campaign, "day", b.Day.String(), "keywords", len(r.Counts), "epsilon", st.Epsilon)
	if st.OnDay != nil {
		st.OnDay(Released{Batch: b, Row: r, Written: true})
	}
	return nil
}
