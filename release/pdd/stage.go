package pdd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/retry"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol"

	"github.com/crowdlog/crowdlog/release"
)

// Sink receives released PDD days (satisfied by *release.Writer).
type Sink interface {
	// WritePDDRound writes one day idempotently (see release.Writer).
	WritePDDRound(ctx context.Context, r release.PDDRound, releasedAt time.Time) error
	// IsPDDReleased reports whether the day was completely written.
	IsPDDReleased(ctx context.Context, campaign string, day time.Time) (bool, error)
}

// SpendingSink writes a noisy day together with its privacy-ledger row,
// refusing it when the budget would be exceeded (satisfied by
// *release.Writer; see release.Writer.WriteDrawnPDDRound: a redo returns
// the day's stored draw, which is what was released).
type SpendingSink interface {
	WriteDrawnPDDRound(ctx context.Context, r release.PDDRound, releasedAt time.Time, spend release.Spend, budget release.Budget) (release.PDDRound, error)
}

var _ SpendingSink = (*release.Writer)(nil)

// WithheldSink records a day withheld with its reason (satisfied by
// *release.Writer: table pdd_withheld). A Stage whose Writer is one
// records the days it refuses over the budget (release.WithheldBudget).
type WithheldSink interface {
	WritePDDWithheld(ctx context.Context, r release.PDDWithheld, recordedAt time.Time) error
}

var _ WithheldSink = (*release.Writer)(nil)

// RecordWithheld writes r through sink when sink is a WithheldSink,
// retrying ClickHouse errors until ctx ends; a failure is logged, not
// returned (the day is withheld either way; only its record is missing).
func RecordWithheld(ctx context.Context, sink Sink, r release.PDDWithheld, log *slog.Logger) {
	ws, ok := sink.(WithheldSink)
	if !ok {
		return
	}
	if err := retry.Forever(ctx, log, "pdd release: record a withheld day", 200*time.Millisecond, 10*time.Second, func() error {
		return ws.WritePDDWithheld(ctx, r, time.Now())
	}); err != nil {
		log.Warn("pdd release: could not record the withheld day", "campaign", r.Campaign, "day", r.Day.Format("2006-01-02"), "reason", r.Reason, "err", err)
	}
}

// CampaignSink records how a campaign is released (satisfied by
// *release.Writer: table pdd_campaigns).
type CampaignSink interface {
	WritePDDCampaign(ctx context.Context, c release.PDDCampaign, recordedAt time.Time) error
}

var _ CampaignSink = (*release.Writer)(nil)

// RecordCampaign writes c through sink when sink is a CampaignSink,
// retrying ClickHouse errors until ctx ends; a failure is logged, not
// returned (the days are released either way; only the report's line on
// the campaign's mode is missing).
func RecordCampaign(ctx context.Context, sink Sink, c release.PDDCampaign, log *slog.Logger) {
	cs, ok := sink.(CampaignSink)
	if !ok {
		return
	}
	if err := retry.Forever(ctx, log, "pdd release: record the campaign's mode", 200*time.Millisecond, 10*time.Second, func() error {
		return cs.WritePDDCampaign(ctx, c, time.Now())
	}); err != nil {
		log.Warn("pdd release: could not record the campaign's mode", "campaign", c.Campaign, "mode", c.Mode, "err", err)
	}
}

// DefaultDataset is the privacy budget noisy days spend from when
// Stage.Dataset is empty: the threshold release stage's default too, so
// both modes share one budget unless told otherwise.
const DefaultDataset = "default"

// Released is what Stage.OnRound receives for each complete round.
type Released struct {
	// Round is the round as State computed it (exact sums).
	Round Round
	// Row is what this stage wrote (exact or noisy counts); when Written is
	// false an earlier run had written the day and Row.Counts is nil (the
	// released counts are those in ClickHouse).
	Row     release.PDDRound
	Written bool
}

// Stage reads topic "group-sums" (protocol.GroupSumsTopic) from the first
// offset of every partition (infra/kafka.ServeGroup without a group), feeds
// State and writes every round it completes to Sink. Restart safety: on
// restart it re-reads the topic; days whose pdd_rounds row exists are
// skipped before any noise is drawn (a noisy day is published once), and a
// day written halfway is rewritten from scratch by the Sink.
//
// Privacy ledger: with Epsilon > 0 every noisy day spends DaySpend (ε ×
// the list's length, δ = 0) from the budget of (Dataset, day) in
// privacy_ledger, written before the day and once per day
// (release.Writer.WriteSpendingPDDRound), as the threshold stage's DP
// releases do; a day over Budget is refused, logged, passed to OnRefused
// and not written. Exact days (Epsilon = 0) spend nothing and have no
// ledger row, as the threshold mode's exact releases.
type Stage struct {
	Brokers []string
	// Topic defaults to protocol.GroupSumsTopic.
	Topic string
	// Writer receives the days (a *release.Writer in production); with
	// Epsilon > 0 it must be a SpendingSink too.
	Writer Sink
	// List is the campaigns' monitored keyword list; nil means
	// keywords.Default(). Outcomes for another list are dropped
	// (DropListMismatch).
	List *keywords.List
	// Epsilon > 0 adds Laplace noise per (day, keyword) with sensitivity
	// MaxCount (see Noisy); 0 releases exact counts.
	Epsilon float64
	// MaxCount is the clients' per-keyword per-day clip; 0 means
	// DefaultMaxCount. With noise, group sums above Decrypted × MaxCount
	// are rejected as implausible (the group counts as lost).
	MaxCount int64
	// Dataset names the privacy budget noisy days spend from (with the
	// day); "" means DefaultDataset.
	Dataset string
	// Budget is the per-(Dataset, day) budget; zero fields = no limit.
	Budget release.Budget
	// OnRefused, when set, is called when a noisy day was refused (err
	// wraps release.ErrOverBudget and names campaign, day and budget);
	// the stage goes on serving, and a restart tries the day again.
	OnRefused func(campaign string, day time.Time, err error)
	Logger    *slog.Logger
	// OnRound, when set, is called after each complete round is in
	// ClickHouse (written now or by an earlier run), from Run's goroutine.
	OnRound func(Released)
	// GroupSize, when known (the coordinator's group size), is recorded
	// as pdd_campaigns.k; 0 records 0 (not known to the release stage).
	GroupSize int

	recorded map[string]bool // campaigns whose pdd_campaigns row this run wrote

	// Rounds counts days written by this run, Skipped those found already
	// written, Refused those refused over the budget; Dropped the messages
	// State dropped.
	Rounds, Skipped, Refused, Dropped atomic.Int64

	tail atomic.Pointer[infrakafka.Tail] // the Tail Run reads (ConsumerLag)
}

// ConsumerLag returns, per partition of the group-sums topic, the messages
// behind the partition's end at its last read (high watermark − next
// offset; 0 when caught up; a partition appears at its first message), for
// the crowdlog_pdd_release_consumer_lag gauge. Empty before Run has read.
func (st *Stage) ConsumerLag() map[int]int64 {
	return st.tail.Load().Lag()
}

func (st *Stage) config() (topic string, list *keywords.List, maxCount int64, log *slog.Logger, err error) {
	topic, list, maxCount, log = st.Topic, st.List, st.MaxCount, st.Logger
	if topic == "" {
		topic = protocol.GroupSumsTopic
	}
	if list == nil {
		list = keywords.Default()
	}
	if maxCount == 0 {
		maxCount = DefaultMaxCount
	}
	if log == nil {
		log = slog.Default()
	}
	switch {
	case len(st.Brokers) == 0:
		err = errors.New("pdd release: no Kafka brokers given")
	case st.Writer == nil:
		err = errors.New("pdd release: no Writer (a *release.Writer) given")
	case math.IsNaN(st.Epsilon) || math.IsInf(st.Epsilon, 0) || st.Epsilon < 0:
		err = fmt.Errorf("pdd release: epsilon %v must be finite and ≥ 0 (0 = exact counts)", st.Epsilon)
	case maxCount < 1 || maxCount > math.MaxUint32:
		err = fmt.Errorf("pdd release: max count %d must be in 1..2^32−1 (default %d)", maxCount, DefaultMaxCount)
	case st.Epsilon > 0 && !isSpending(st.Writer):
		err = errors.New("pdd release: epsilon > 0 needs a Writer with a privacy ledger (a *release.Writer: SpendingSink)")
	}
	return topic, list, maxCount, log, err
}

// Run serves until ctx ends (then it returns nil). It returns an error when
// the configuration is invalid, the topic cannot be read, or ctx ends while
// a write is being retried; ClickHouse errors are retried with backoff
// (200 ms doubling to 10 s), so an outage delays a day, it does not lose it.
func (st *Stage) Run(ctx context.Context) error {
	topic, list, maxCount, log, err := st.config()
	if err != nil {
		return err
	}
	// every partition read from its first offset, the values applied and
	// written on this goroutine alone
	tail := infrakafka.ReadTopic(ctx, st.Brokers, topic, "pdd release", log)
	defer tail.Stop()
	st.tail.Store(tail)
	state := NewState(list)
	if st.Epsilon > 0 {
		state.MaxCount = uint64(maxCount)
	}
	for {
		select {
		case <-ctx.Done():
			if err := tail.Stop(); err != nil { // ctx ended while the partitions were listed
				return fmt.Errorf("%w (is the aggregator running?)", err)
			}
			return nil
		case <-tail.Done:
			// before ctx ends only when the partitions cannot be listed:
			// "pdd release: topic group-sums: …" or "pdd release: dial kafka …"
			return fmt.Errorf("%w (is the aggregator running?)", tail.Err())
		case b := <-tail.Msgs:
			before := state.Accepted
			r, done := state.Apply(b)
			if state.Accepted == before {
				st.Dropped.Add(1)
				log.Debug("pdd release: outcome dropped", "dropped", state.Dropped)
			}
			if !done {
				continue
			}
			if err := st.release(ctx, r, list, maxCount, log); err != nil {
				return err
			}
			if len(state.Dropped) > 0 {
				log.Info("pdd release: messages dropped so far", "by_reason", state.Dropped)
			}
		}
	}
}

// release writes one complete round unless it was written before.
func (st *Stage) release(ctx context.Context, r Round, list *keywords.List, maxCount int64, log *slog.Logger) error {
	day := r.Day.Time()
	var written bool
	if err := retry.Forever(ctx, log, "pdd release: ClickHouse call", 200*time.Millisecond, 10*time.Second, func() (err error) {
		written, err = st.Writer.IsPDDReleased(ctx, r.Campaign, day)
		return err
	}); err != nil {
		return err
	}
	if !st.recorded[r.Campaign] {
		if st.recorded == nil {
			st.recorded = map[string]bool{}
		}
		st.recorded[r.Campaign] = true
		RecordCampaign(ctx, st.Writer, release.PDDCampaign{Campaign: r.Campaign, Mode: release.PDDModeGroups, Epsilon: st.Epsilon,
			Sensitivity: uint32(maxCount), K: uint64(max(st.GroupSize, 0)),
			Params: fmt.Sprintf("max_count=%d keywords=%d", maxCount, list.Len())}, log)
	}
	if written {
		st.Skipped.Add(1)
		log.Info("pdd release: day already released; skipping", "campaign", r.Campaign, "day", r.Day.String())
		if st.OnRound != nil {
			st.OnRound(Released{Round: r, Row: roundRow(r), Written: false})
		}
		return nil
	}
	row, err := Release(r, list, st.Epsilon, maxCount)
	if err != nil {
		// a corrupt round cannot be fixed by retrying; keep serving the others
		log.Error("pdd release: day not released", "campaign", r.Campaign, "day", r.Day.String(), "err", err)
		return nil
	}
	write := func() error { return st.Writer.WritePDDRound(ctx, row, time.Now()) }
	if st.Epsilon > 0 {
		dataset := st.Dataset
		if dataset == "" {
			dataset = DefaultDataset
		}
		spend := DaySpend(dataset, row, list.Len())
		ss := st.Writer.(SpendingSink) // checked by config
		write = func() error {
			drawn, err := ss.WriteDrawnPDDRound(ctx, row, time.Now(), spend, st.Budget)
			if err == nil {
				row = drawn // a redo releases the day's stored draw, not this attempt's noise
			}
			if errors.Is(err, release.ErrOverBudget) {
				return retry.Permanent(err) // refused, not failed: never retried
			}
			return err
		}
	}
	err = retry.Forever(ctx, log, "pdd release: write to ClickHouse", 200*time.Millisecond, 10*time.Second, write)
	if errors.Is(err, release.ErrOverBudget) {
		st.Refused.Add(1)
		log.Error("pdd release: day refused, over the privacy budget; nothing released", "campaign", r.Campaign,
			"day", r.Day.String(), "err", err)
		RecordWithheld(ctx, st.Writer, release.PDDWithheld{Campaign: r.Campaign, Day: day, Reason: release.WithheldBudget,
			Detail: budgetDetail(st.Dataset, st.Budget)}, log)
		if st.OnRefused != nil {
			st.OnRefused(r.Campaign, day, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	st.Rounds.Add(1)
	log.Info("pdd release: day released", "campaign", r.Campaign, "day", r.Day.String(), "keywords", len(row.Counts),
		"groups", r.Groups, "complete", r.Complete, "recovered", r.Recovered, "lost", r.Lost,
		"confidence", r.Confidence, "epsilon", st.Epsilon)
	if st.OnRound != nil {
		st.OnRound(Released{Round: r, Row: row, Written: true})
	}
	return nil
}

func isSpending(s Sink) bool {
	_, ok := s.(SpendingSink)
	return ok
}

// roundRow is the pdd_rounds part of r (no counts).
func roundRow(r Round) release.PDDRound {
	return release.PDDRound{Campaign: r.Campaign, Day: r.Day.Time(), Active: r.Active, Grouped: r.Grouped,
		Decrypted: r.Decrypted, Groups: r.Groups, Complete: r.Complete, Recovered: r.Recovered, Lost: r.Lost,
		Confidence: r.Confidence}
}

// budgetDetail is the detail of a day refused over budget.
func budgetDetail(dataset string, b release.Budget) string {
	if dataset == "" {
		dataset = DefaultDataset
	}
	return fmt.Sprintf("the day's spend would pass the privacy budget of dataset %s (ε %g, δ %g per day); nothing written", dataset, b.Epsilon, b.Delta)
}

// Export writes the export of campaign (release.WritePDDExport: header
// release.PDDExportHeader, one line per (released day, keyword of words)
// with zeros when zeros is true, one line per withheld day with its
// reason) from w's pdd_rounds, pdd_withheld and keyword_daily. Errors name
// the failing read or write.
func Export(ctx context.Context, w *release.Writer, campaign string, words []string, zeros bool, out io.Writer) error {
	rounds, err := w.ReadPDDRounds(ctx, campaign)
	if err != nil {
		return err
	}
	withheld, err := w.ReadPDDWithheld(ctx, campaign)
	if err != nil {
		return err
	}
	rows, err := w.ReadKeywordDaily(ctx, campaign)
	if err != nil {
		return err
	}
	return release.WritePDDExport(out, campaign, words, release.PDDDays(rounds, withheld), rows, zeros)
}
