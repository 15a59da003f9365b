package prio3

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/release"
)

// runStageUntil runs st until cond holds (polled; at most a minute, then
// the test fails naming what it waited for) and stops it.
func runStageUntil(t *testing.T, st *Stage, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- st.Run(ctx) }()
	for !cond() {
		select {
		case err := <-errc:
			t.Fatalf("stage stopped before %s: %v", what, err)
		case <-ctx.Done():
			t.Fatalf("no %s within a minute (days %d, withheld %d, refused %d, dropped %v)", what, st.Days.Load(), st.Withheld.Load(), st.Refused.Load(), st.DroppedBy())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("stage: %v", err)
	}
}

// TestStageWithheldStatusLedger: with the leader's noisy status (ε_c =
// 0.1, δ = 10⁻⁶) and noise ε = 1, each day the leader withheld gets one
// ledger row of ε_c and δ under release.PDDStatusLedgerKey, each released
// day one row of ε + ε_c (DaySpend), counted against the days the test
// wrote to the topic (a notice re-emitted once, another campaign's
// notice); a second run spends nothing more. A budget of 0.5 per day
// refuses the released days and charges the withheld ones; a budget of
// 0.05 refuses both, writes no ledger row and records every day withheld
// for the budget.
func TestStageWithheldStatusLedger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	broker, err := kafka.Start(ctx, t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	if err := kafka.EnsureTopics(ctx, broker.Addr, 1, protocol.Prio3SharesTopic); err != nil {
		t.Fatal(err)
	}
	const campaign, length, eps, epsC, delta = "kw-status", 50, 1.0, 0.1, 1e-6
	rng := rand.New(rand.NewPCG(41, 6))
	list := testList(t, length)
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4, L1: 15}
	ck := genKey(t, 7)
	msg := func(c string, day p3.Day, v []byte) kafkago.Message {
		return kafkago.Message{Key: []byte(c + "/" + day.String()), Value: v}
	}
	var msgs []kafkago.Message
	for _, d := range []p3.Day{20000, 20001} {
		sh := aggregateNoisy(t, campaign, m, ck.PublicKey(), 1, d, randomClients(rng, 3, length), eps, eps)
		msgs = append(msgs, msg(campaign, d, sh[0]), msg(campaign, d, sh[1]))
	}
	notice := func(c string, d p3.Day) kafkago.Message {
		b, _ := (&p3.AggShare{Role: 0, Campaign: c, Day: d, Reason: p3.ReasonSmallBatch}).MarshalBinary()
		return msg(c, d, b)
	}
	msgs = append(msgs, notice(campaign, 20002), notice(campaign, 20003), notice(campaign, 20003), notice(campaign, 20004), notice("another", 20005))
	kw := kafka.NewWriter(broker.Addr, protocol.Prio3SharesTopic)
	if err := kw.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	kw.Close()

	// the ground truth, from the messages written: the campaign's days
	// with both shares (released) and its days with a leader notice
	// (withheld), each once
	kinds := map[string]map[string]bool{"released": {}, "withheld": {}}
	for _, mm := range msgs {
		c, d, _ := strings.Cut(string(mm.Key), "/") // campaign/YYYY-MM-DD
		a, err := p3.ParseAggShare(mm.Value)
		if c != campaign || err != nil {
			continue
		}
		if a.Reason == p3.ReasonSmallBatch {
			kinds["withheld"][d] = true
		} else {
			kinds["released"][d] = true
		}
	}
	wantWithheld, wantReleased := sortedKeys(kinds["withheld"]), sortedKeys(kinds["released"])
	if len(wantWithheld) != 3 || len(wantReleased) != 2 {
		t.Fatalf("test data: withheld %v, released %v", wantWithheld, wantReleased)
	}

	newStage := func(w *release.Writer, budget float64) *Stage {
		return &Stage{Brokers: []string{broker.Addr}, Writer: w, List: list, Epsilon: eps, StatusEpsilon: epsC, StatusDelta: delta,
			Dataset: "ds", Budget: release.Budget{Epsilon: budget},
			Collector: p3.Collector{Campaign: campaign, Measurement: m, Key: ck, MinBatchSize: 1}}
	}
	// rows by policy: epoch → (ε, δ, params)
	ledger := func(w *release.Writer) (status, days map[string]release.Spend) {
		t.Helper()
		rows, err := w.DatasetLedger(ctx, "ds")
		if err != nil {
			t.Fatal(err)
		}
		status, days = map[string]release.Spend{}, map[string]release.Spend{}
		for _, r := range rows {
			switch r.Policy {
			case release.PDDStatusPolicy:
				if _, dup := status[r.Epoch]; dup {
					t.Fatalf("two status rows for %s", r.Epoch)
				}
				status[r.Epoch] = r
			case release.PDDPolicy:
				days[r.Epoch] = r
			default:
				t.Fatalf("ledger row of policy %q", r.Policy)
			}
		}
		return status, days
	}
	withheldRows := func(w *release.Writer) map[string]string {
		t.Helper()
		wh, err := w.ReadPDDWithheld(ctx, campaign)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range wh {
			out[r.Day.Format(time.DateOnly)] += r.Reason
		}
		return out
	}

	w := openTestWriter(t)
	st := newStage(w, eps+epsC)
	runStageUntil(t, st, "2 days released and 3 withheld", func() bool { return st.Days.Load() >= 2 && st.Withheld.Load() >= 3 && st.Dropped.Load() >= 1 })
	check := func(run string) {
		t.Helper()
		status, days := ledger(w)
		if got := sortedKeys(status); fmt.Sprint(got) != fmt.Sprint(wantWithheld) {
			t.Fatalf("%s: status rows for %v, want one per withheld day %v", run, got, wantWithheld)
		}
		for d, r := range status {
			if r.Epsilon != epsC || r.Delta != delta || r.App != campaign || !strings.Contains(r.Params, "mechanism=noisy-threshold") ||
				!strings.Contains(r.Params, fmt.Sprintf("status_threshold=%d", p3.StatusThreshold(epsC, delta))) {
				t.Fatalf("%s: %s status row %+v, want ε %v, δ %v", run, d, r, epsC, delta)
			}
		}
		if got := sortedKeys(days); fmt.Sprint(got) != fmt.Sprint(wantReleased) {
			t.Fatalf("%s: day rows for %v, want %v", run, got, wantReleased)
		}
		for d, r := range days {
			if r.Epsilon != eps+epsC || r.Delta != delta {
				t.Fatalf("%s: %s day row %+v, want ε %v", run, d, r, eps+epsC)
			}
		}
	}
	check("first run")
	if wh := withheldRows(w); len(wh) != 3 || wh[wantWithheld[0]] != release.WithheldMinBatch {
		t.Fatalf("pdd_withheld %v, want the 3 days below_min_batch", wh)
	}
	again := newStage(w, eps+epsC)
	runStageUntil(t, again, "the rerun to read the topic", func() bool { return again.Skipped.Load() >= 2 && again.Withheld.Load() >= 3 })
	check("rerun")

	// a budget of 0.5 a day: the released days (1.1) refused, the status
	// of the withheld days (0.1) charged
	w2 := openTestWriter(t)
	half := newStage(w2, 0.5)
	runStageUntil(t, half, "2 days refused and 3 withheld", func() bool { return half.Refused.Load() >= 2 && half.Withheld.Load() >= 3 })
	if status, days := ledger(w2); len(status) != len(wantWithheld) || len(days) != 0 || half.Refused.Load() != 2 {
		t.Fatalf("budget 0.5: %d status rows (want %d), %d day rows (want 0), %d refused", len(status), len(wantWithheld), len(days), half.Refused.Load())
	}

	// a budget of 0.05: nothing charged, every day withheld for the budget
	w3 := openTestWriter(t)
	poor := newStage(w3, 0.05)
	runStageUntil(t, poor, "5 days refused", func() bool { return poor.Refused.Load() >= 5 && poor.Dropped.Load() >= 1 })
	status, days := ledger(w3)
	wh := withheldRows(w3)
	if len(status)+len(days) != 0 || poor.Withheld.Load() != 0 || len(wh) != 5 || wh[wantWithheld[1]] != release.WithheldBudget {
		t.Fatalf("budget 0.05: %d + %d ledger rows (want 0), %d withheld below the minimum (want 0), pdd_withheld %v (want 5 days for the budget)",
			len(status), len(days), poor.Withheld.Load(), wh)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
