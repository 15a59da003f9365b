package pdd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/clickhouse/chtest"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
	"github.com/crowdlog/crowdlog/release"
)

func TestMain(m *testing.M) { chtest.Main(m) }

// openTestWriter returns a Writer on a fresh database of the shared server.
// A missing binary skips, unless CI=true, where it fails.
func openTestWriter(t *testing.T) *release.Writer {
	t.Helper()
	srv := chtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := release.Open(ctx, srv.TCPAddr, fmt.Sprintf("t_%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// flaky fails the first Fail calls of each method, then passes through.
type flaky struct {
	Sink
	fail          int32
	writes, reads atomic.Int32
}

func (f *flaky) WritePDDRound(ctx context.Context, r release.PDDRound, at time.Time) error {
	if f.writes.Add(1) <= f.fail {
		return errors.New("injected ClickHouse outage")
	}
	return f.Sink.WritePDDRound(ctx, r, at)
}

func (f *flaky) IsPDDReleased(ctx context.Context, campaign string, day time.Time) (bool, error) {
	if f.reads.Add(1) <= f.fail {
		return false, errors.New("injected ClickHouse outage")
	}
	return f.Sink.IsPDDReleased(ctx, campaign, day)
}

// synthCampaign returns the outcomes of rounds of a campaign (each
// re-emitted once, as after an aggregator crash) and the keyword_daily rows
// the rounds must produce, computed from the clients.
func synthCampaign(t *testing.T, rng *rand.Rand, list *keywords.List, campaign string, rounds []int32) ([]kafkago.Message, []release.KeywordDaily) {
	var msgs []kafkago.Message
	var want []release.KeywordDaily
	for _, round := range rounds {
		gs := synthRound(rng, list.Len(), []blind.Status{blind.StatusComplete, blind.StatusRecovered, blind.StatusLost, blind.StatusComplete})
		var grouped, decrypted uint32
		truth := make([]int64, list.Len())
		for _, g := range gs {
			grouped += uint32(len(g.members))
			if g.status == blind.StatusLost {
				continue
			}
			for _, c := range g.members {
				if c.submitted {
					decrypted++
					for i, v := range c.counts {
						truth[i] += int64(v)
					}
				}
			}
		}
		active := grouped + 3
		for _, g := range gs {
			b := outcome(t, list, campaign, round, g, uint32(len(gs)), active, grouped)
			m := kafkago.Message{Key: []byte(fmt.Sprintf("%s/%d/%d", campaign, round, g.id)), Value: b}
			msgs = append(msgs, m, m)
		}
		for i, c := range truth {
			if c != 0 {
				want = append(want, release.KeywordDaily{Campaign: campaign, Day: keywords.Day(round).Time(),
					Keyword: list.Words[i], Count: c, Confidence: float64(decrypted) / float64(active)})
			}
		}
	}
	sort.Slice(want, func(i, j int) bool {
		if !want[i].Day.Equal(want[j].Day) {
			return want[i].Day.Before(want[j].Day)
		}
		return want[i].Keyword < want[j].Keyword
	})
	return msgs, want
}

// runStage runs st until n rounds were reported and settled (when not nil)
// holds, then stops it. settled lets a test wait for messages that follow
// the last round in the topic (duplicates, mismatches) to be consumed too;
// both waits are bounded by one minute.
func runStage(t *testing.T, st *Stage, n int, settled func() bool) []Released {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var got []Released
	enough := make(chan struct{})
	st.OnRound = func(r Released) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r)
		if len(got) == n {
			close(enough)
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- st.Run(ctx) }()
	select {
	case <-enough:
	case err := <-errc:
		t.Fatalf("stage stopped: %v", err)
	case <-ctx.Done():
		t.Fatalf("only %d of %d rounds released", len(got), n)
	}
	for settled != nil && !settled() {
		select {
		case err := <-errc:
			t.Fatalf("stage stopped: %v", err)
		case <-ctx.Done():
			t.Fatal("rounds released but the stage did not settle within a minute")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("stage: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return got
}

func TestStageReleasesExactCountsAndRestarts(t *testing.T) {
	w := openTestWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	broker, err := kafka.Start(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	if err := kafka.EnsureTopics(ctx, broker.Addr, 3, protocol.GroupSumsTopic); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	list := testList(t, 60)
	msgs, want := synthCampaign(t, rng, list, "flu", []int32{13210, 13211})
	other, _ := synthCampaign(t, rng, testList(t, 61), "other-list", []int32{13210}) // dropped: list mismatch
	msgs = append(msgs, other...)
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	kw := kafka.NewWriter(broker.Addr, protocol.GroupSumsTopic)
	if err := kw.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	kw.Close()

	sink := &flaky{Sink: w, fail: 1}
	st := &Stage{Brokers: []string{broker.Addr}, Writer: sink, List: list}
	accepted := 2 * 4 // two rounds of four groups
	got := runStage(t, st, 2, func() bool { return st.Dropped.Load() >= int64(len(msgs)-accepted) })
	for _, r := range got {
		if !r.Written || r.Row.Epsilon != 0 {
			t.Fatalf("round %s: written %v epsilon %v", r.Row.Day, r.Written, r.Row.Epsilon)
		}
	}
	if sink.writes.Load() != 3 || st.Rounds.Load() != 2 || st.Dropped.Load() != int64(len(msgs)-accepted) {
		t.Fatalf("writes %d (want 3, one failed), rounds %d, dropped %d (want %d duplicates and mismatches)",
			sink.writes.Load(), st.Rounds.Load(), st.Dropped.Load(), len(msgs)-accepted)
	}
	// every message read: each partition the stage read is caught up (the
	// crowdlog_pdd_release_consumer_lag gauge)
	lag := st.ConsumerLag()
	if len(lag) == 0 {
		t.Fatal("no consumer lag after the stage read every message")
	}
	for p, n := range lag {
		if p < 0 || p >= 3 || n != 0 {
			t.Fatalf("consumer lag %v: partition %d behind by %d after every message was read", lag, p, n)
		}
	}
	daily, err := w.ReadKeywordDaily(ctx, "flu")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(daily, want) {
		t.Fatalf("keyword_daily has %d rows, want %d equal rows\n got %v\nwant %v", len(daily), len(want), daily, want)
	}
	var buf bytes.Buffer
	if err := Export(ctx, w, "flu", nil, false, &buf); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"); len(lines) != len(want)+1 ||
		lines[0] != release.PDDExportHeader ||
		lines[1] != fmt.Sprintf("flu\t%s\t%s\t%d\t%v\t0\treleased\t", want[0].Day.Format("2006-01-02"), want[0].Keyword, want[0].Count, want[0].Confidence) {
		t.Fatalf("export: %d lines, first %q", len(lines), lines[:2])
	}

	// A restarted stage finds both days written and writes nothing.
	st2 := &Stage{Brokers: []string{broker.Addr}, Writer: w, List: list}
	for _, r := range runStage(t, st2, 2, nil) {
		if r.Written || r.Row.Counts != nil {
			t.Fatalf("restart rewrote %s", r.Row.Day)
		}
	}
	if st2.Skipped.Load() != 2 || st2.Rounds.Load() != 0 {
		t.Fatalf("restart: skipped %d written %d", st2.Skipped.Load(), st2.Rounds.Load())
	}
	// the campaign's mode for the report: exact, the default clip
	if cs, err := w.ReadPDDCampaigns(ctx, "flu"); err != nil || len(cs) != 1 || cs[0] != (release.PDDCampaign{Campaign: "flu",
		Mode: release.PDDModeGroups, Sensitivity: DefaultMaxCount, Params: fmt.Sprintf("max_count=%d keywords=%d", DefaultMaxCount, list.Len())}) {
		t.Fatalf("pdd_campaigns %+v, %v", cs, err)
	}
	if again, _ := w.ReadKeywordDaily(ctx, "flu"); !reflect.DeepEqual(again, want) {
		t.Fatal("keyword_daily changed after the restart")
	}
	// exact days spend nothing: no ledger row, as for threshold FT releases
	if spent, err := w.DatasetLedger(ctx, DefaultDataset); err != nil || len(spent) != 0 {
		t.Fatalf("exact days left ledger rows %+v, %v", spent, err)
	}

	// With noise, into a fresh database: every keyword of the list is noised
	// and the day records ε and the clip.
	wn := openTestWriter(t)
	st3 := &Stage{Brokers: []string{broker.Addr}, Writer: wn, List: list, Epsilon: 1, MaxCount: 2}
	for _, r := range runStage(t, st3, 2, nil) {
		if !r.Written || r.Row.Epsilon != 1 || r.Row.MaxCount != 2 {
			t.Fatalf("noisy round %+v", r.Row)
		}
	}
	rounds, err := wn.ReadPDDRounds(ctx, "flu")
	if err != nil || len(rounds) != 2 || rounds[0].Epsilon != 1 || rounds[0].MaxCount != 2 {
		t.Fatalf("noisy pdd_rounds %+v, %v", rounds, err)
	}
	if cs, err := wn.ReadPDDCampaigns(ctx, "flu"); err != nil || len(cs) != 1 || cs[0].Epsilon != 1 || cs[0].Sensitivity != 2 || cs[0].Mode != release.PDDModeGroups {
		t.Fatalf("noisy pdd_campaigns %+v, %v", cs, err)
	}
	noisy, _ := wn.ReadKeywordDaily(ctx, "flu")
	// Lap(2) rounded is 0 with probability 1 − e^{−1/4} ≈ 0.22, so about
	// 78% of the 2·60 (day, keyword) pairs have a row.
	if len(noisy) < 60 || len(noisy) > 118 {
		t.Fatalf("%d noisy rows for 120 (day, keyword) pairs", len(noisy))
	}
}

func TestStageConfig(t *testing.T) {
	for name, st := range map[string]*Stage{
		"no brokers":   {Writer: &flaky{}},
		"no writer":    {Brokers: []string{"x"}},
		"neg epsilon":  {Brokers: []string{"x"}, Writer: &flaky{}, Epsilon: -1},
		"neg maxcount": {Brokers: []string{"x"}, Writer: &flaky{}, MaxCount: -3},
		// noise needs a Writer with a privacy ledger (flaky hides it)
		"noisy without ledger": {Brokers: []string{"x"}, Writer: &flaky{}, Epsilon: 1},
	} {
		if err := st.Run(context.Background()); err == nil {
			t.Errorf("%s: Run accepted the configuration", name)
		}
	}
}

// startCampaign starts a Kafka broker, creates group-sums and writes the
// outcomes of campaign "flu" over rounds (list of 60 keywords) into it.
func startCampaign(t *testing.T, ctx context.Context, seed uint64, rounds []int32) (string, *keywords.List) {
	t.Helper()
	broker, err := kafka.Start(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Close() })
	if err := kafka.EnsureTopics(ctx, broker.Addr, 3, protocol.GroupSumsTopic); err != nil {
		t.Fatal(err)
	}
	list := testList(t, 60)
	msgs, _ := synthCampaign(t, rand.New(rand.NewPCG(seed, 1)), list, "flu", rounds)
	kw := kafka.NewWriter(broker.Addr, protocol.GroupSumsTopic)
	defer kw.Close()
	if err := kw.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	return broker.Addr, list
}

// dayName is the UTC date of PDD round r (the day number since the Unix
// epoch), computed without keywords.Day.
func dayName(r int32) string { return time.Unix(int64(r)*86400, 0).UTC().Format("2006-01-02") }

// wantSpend is the ledger row a noisy day of "flu" must have: a client
// may count all 60 keywords of the list, each count is ε-DP, so the day
// costs 60·ε (basic composition) and δ = 0.
func wantSpend(dataset string, round int32, eps float64) release.Spend {
	return release.Spend{Dataset: dataset, Epoch: dayName(round), App: "flu", Policy: "pdd-laplace", K: 0,
		Epsilon: 60 * eps, Delta: 0, Params: fmt.Sprintf("mechanism=laplace keywords=60 epsilon_per_keyword=%g max_count=2", eps)}
}

// checkLedger fails unless the ledger of dataset holds exactly want (in
// any order), SpentAt aside, and returns what it holds, ordered by epoch,
// app and policy.
func checkLedger(t *testing.T, ctx context.Context, w *release.Writer, dataset string, want ...release.Spend) []release.Spend {
	t.Helper()
	got, err := w.DatasetLedger(ctx, dataset)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("ledger of %s has %d rows, want %d:\n got %+v\nwant %+v", dataset, len(got), len(want), got, want)
	}
	byKey := func(s []release.Spend) {
		sort.Slice(s, func(i, j int) bool {
			a, b := s[i], s[j]
			return a.Epoch < b.Epoch || a.Epoch == b.Epoch && (a.App < b.App || a.App == b.App && a.Policy < b.Policy)
		})
	}
	want = append([]release.Spend(nil), want...)
	byKey(got)
	byKey(want)
	for i := range got {
		g := got[i]
		g.SpentAt = time.Time{}
		if g != want[i] {
			t.Fatalf("ledger row %d:\n got %+v\nwant %+v", i, g, want[i])
		}
	}
	return got
}

// TestStageNoisyDaysSpendFromLedger: every noisy day the stage writes
// spends 60·ε (δ = 0) once from the budget of (dataset, day), keyed by
// campaign, day and mechanism; a restarted stage finds the days written
// and spends nothing again.
func TestStageNoisyDaysSpendFromLedger(t *testing.T) {
	w := openTestWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rounds := []int32{13210, 13211, 13212}
	broker, list := startCampaign(t, ctx, 11, rounds)
	const eps = 0.5

	st := &Stage{Brokers: []string{broker}, Writer: w, List: list, Epsilon: eps, MaxCount: 2}
	if got := runStage(t, st, len(rounds), nil); len(got) != len(rounds) || st.Rounds.Load() != int64(len(rounds)) {
		t.Fatalf("released %d days, wrote %d", len(got), st.Rounds.Load())
	}
	var want []release.Spend
	for _, r := range rounds {
		want = append(want, wantSpend("default", r, eps))
	}
	first := checkLedger(t, ctx, w, "default", want...)
	var total float64
	for _, s := range first {
		total += s.Epsilon
	}
	if total != float64(len(rounds))*60*eps {
		t.Fatalf("total spent %v, want days × keywords × ε = %v", total, float64(len(rounds))*60*eps)
	}
	rows, err := w.ReadPDDRounds(ctx, "flu")
	if err != nil || len(rows) != len(rounds) {
		t.Fatalf("pdd_rounds %+v, %v", rows, err)
	}

	// restart: every day skipped before noise, the ledger unchanged
	st2 := &Stage{Brokers: []string{broker}, Writer: w, List: list, Epsilon: eps, MaxCount: 2}
	for _, r := range runStage(t, st2, len(rounds), nil) {
		if r.Written {
			t.Fatalf("restart rewrote %s", r.Row.Day)
		}
	}
	if st2.Skipped.Load() != int64(len(rounds)) || st2.Rounds.Load() != 0 {
		t.Fatalf("restart: skipped %d written %d", st2.Skipped.Load(), st2.Rounds.Load())
	}
	if again := checkLedger(t, ctx, w, "default", want...); !reflect.DeepEqual(again, first) {
		t.Fatalf("ledger changed on restart:\n%+v\n%+v", first, again)
	}
}

// TestStageRefusesNoisyDayOverBudget: the budget of (dataset, day) is the
// threshold mode's: a day that would exceed it (here because a threshold
// DP release named after that day spent 0.6 already) is refused with an
// error naming campaign, day and budget and written nowhere, the other
// days are released, and a restart with a larger budget releases the
// refused day and spends nothing again for the others.
func TestStageRefusesNoisyDayOverBudget(t *testing.T) {
	w := openTestWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rounds := []int32{13210, 13211}
	broker, list := startCampaign(t, ctx, 12, rounds)
	const eps = 0.5 // 30 per day
	tk := release.Key{App: "query", Epoch: dayName(rounds[0]), Policy: "dp-u", K: 2}
	pre := release.Spend{Dataset: "aol", Epoch: tk.Epoch, App: tk.App, Policy: tk.Policy, K: tk.K, Epsilon: 0.6, Params: "test"}
	if err := w.WriteSpendingRelease(ctx, tk, nil, nil, time.Time{}, pre, release.Budget{}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var refused []error
	st := &Stage{Brokers: []string{broker}, Writer: w, List: list, Epsilon: eps, MaxCount: 2,
		Dataset: "aol", Budget: release.Budget{Epsilon: 30.5},
		OnRefused: func(campaign string, day time.Time, err error) {
			mu.Lock()
			defer mu.Unlock()
			if campaign != "flu" || day.Format("2006-01-02") != dayName(rounds[0]) {
				t.Errorf("refused %s %s", campaign, day)
			}
			refused = append(refused, err)
		}}
	got := runStage(t, st, 1, func() bool { return st.Refused.Load() == 1 })
	if len(got) != 1 || got[0].Round.Round != rounds[1] || len(refused) != 1 {
		t.Fatalf("released %+v, refused %v", got, refused)
	}
	err := refused[0]
	if !errors.Is(err, release.ErrOverBudget) {
		t.Fatalf("refusal %v does not wrap ErrOverBudget", err)
	}
	for _, s := range []string{`campaign "flu"`, "day " + dayName(rounds[0]), "budget 30.5", `dataset "aol"`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("refusal %q does not say %s", err, s)
		}
	}
	t.Logf("refusal: %v", err)
	if done, _ := w.IsPDDReleased(ctx, "flu", keywords.Day(rounds[0]).Time()); done {
		t.Fatal("refused day was written")
	}
	checkLedger(t, ctx, w, "aol", pre, wantSpend("aol", rounds[1], eps))

	// restart with a budget the refused day fits in: it is released now
	st2 := &Stage{Brokers: []string{broker}, Writer: w, List: list, Epsilon: eps, MaxCount: 2,
		Dataset: "aol", Budget: release.Budget{Epsilon: 31}}
	runStage(t, st2, 2, nil)
	if st2.Rounds.Load() != 1 || st2.Skipped.Load() != 1 || st2.Refused.Load() != 0 {
		t.Fatalf("restart: wrote %d skipped %d refused %d", st2.Rounds.Load(), st2.Skipped.Load(), st2.Refused.Load())
	}
	checkLedger(t, ctx, w, "aol", pre, wantSpend("aol", rounds[0], eps), wantSpend("aol", rounds[1], eps))
}
