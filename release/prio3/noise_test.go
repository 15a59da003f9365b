package prio3

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudflare/circl/vdaf/prio3/arith/fp128"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/release"
)

// craftNoisy is craft with the share's claimed noise ε.
func craftNoisy(t testing.TB, key onion.PublicKey, role byte, day p3.Day, count uint64, vec []int64, eps float64) []byte {
	t.Helper()
	v := make(fp128.Vec, len(vec))
	for i, x := range vec {
		v[i] = p3.FieldOf(x)
	}
	a := &p3.AggShare{Role: role, Campaign: tCampaign, Day: day, Count: count, Epsilon: eps}
	if err := p3.SealAggShare(key, a, p3.EncodeVec(v)); err != nil {
		t.Fatal(err)
	}
	b, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNoiseSlack: the implausibility slack under noise is
// ⌈2·(S/ε)·ln(2L·10⁹)⌉ + 2 (S: one person's daily L1 bound), computed
// here by hand for four campaigns.
func TestNoiseSlack(t *testing.T) {
	for _, c := range []struct {
		m    p3.Config
		eps  float64
		want int64
	}{
		// 2·20·ln(2·10¹³) = 1225.07 (the defaults: S = 20)
		{p3.Config{Kind: p3.KindSumVec, Length: 10000, Bits: 4, L1: 20}, 1, 1228},
		// 2·15·ln(2·10¹³) = 918.80
		{p3.Config{Kind: p3.KindSumVec, Length: 10000, Bits: 4, L1: 15}, 1, 921},
		// S = w = 5: 2·10·ln(2·10¹¹) = 520.43
		{p3.Config{Kind: p3.KindPresence, Length: 100, MaxWeight: 5}, 0.5, 523},
		// no L1: S = L·15 = 60: 2·60·ln(8·10⁹) = 2736.3
		{p3.Config{Kind: p3.KindSumVec, Length: 4, Bits: 4}, 1, 2739},
		{p3.Config{Kind: p3.KindSumVec, Length: 4, Bits: 4, L1: 15}, 0, 0},
	} {
		if got := NoiseSlack(c.m, c.eps); got != c.want {
			t.Errorf("%+v ε %v: slack %d, want %d", c.m, c.eps, got, c.want)
		}
	}
}

// TestStateNoise: with State.Epsilon = 1 (L = 4, S = 15: slack 687) a
// pair 687 outside 0..Count·15 on either side is released, 688 outside is
// dropped implausible; a share whose ε is not the State's is dropped
// epsilon_mismatch unopened (another ε at both, an aggregator that skipped
// its noise, noisy shares at an exact State), and one whose ε was
// rewritten after sealing does not open (the ε is in the AAD).
func TestStateNoise(t *testing.T) {
	ck := genKey(t, 3)
	m := p3.Config{Kind: p3.KindSumVec, Length: 4, Bits: 4, L1: 15}
	c := p3.Collector{Campaign: tCampaign, Measurement: m, Key: ck, MinBatchSize: 1}
	rng := rand.New(rand.NewPCG(5, 6))
	s, err := NewState(c)
	if err != nil {
		t.Fatal(err)
	}
	s.Epsilon = 1
	const count = 10 // exact range 0..150
	pair := func(s *State, day p3.Day, truth []int64, epsL, epsH float64) (Batch, bool) {
		l, h := split(rng, truth)
		s.Apply(craftNoisy(t, ck.PublicKey(), 0, day, count, l, epsL))
		return s.Apply(craftNoisy(t, ck.PublicKey(), 1, day, count, h, epsH))
	}
	edge := []int64{-687, 150 + 687, 0, 5}
	if b, ok := pair(s, 20000, edge, 1, 1); !ok || !reflect.DeepEqual(b.Totals, edge) {
		t.Fatalf("a pair at the slack's edge: released %v, totals %v", ok, b.Totals)
	}
	for i, bad := range [][]int64{{-688, 0, 0, 0}, {0, 0, 150 + 688, 0}} {
		if _, ok := pair(s, p3.Day(20001+i), bad, 1, 1); ok {
			t.Fatalf("implausible totals %v released", bad)
		}
	}
	if s.Dropped[DropImplausible] != 4 {
		t.Fatalf("dropped %v, want 4 implausible", s.Dropped)
	}
	if _, ok := pair(s, 20010, []int64{1, 2, 3, 4}, 0.5, 0.5); ok {
		t.Fatal("a pair of another epsilon released")
	}
	if _, ok := pair(s, 20011, []int64{1, 2, 3, 4}, 1, 0); ok {
		t.Fatal("a pair whose helper skipped its noise released")
	}
	if s.Dropped[DropEpsilon] != 3 {
		t.Fatalf("dropped %v, want 3 epsilon_mismatch", s.Dropped)
	}
	// a leader rewriting the exact helper share's ε to the release's: the
	// AAD no longer matches
	a, err := p3.ParseAggShare(craftNoisy(t, ck.PublicKey(), 1, 20012, count, []int64{1, 2, 3, 4}, 0))
	if err != nil {
		t.Fatal(err)
	}
	a.Epsilon = 1
	forged, _ := a.MarshalBinary()
	if s.Apply(forged); s.Dropped[DropUndecryptable] != 1 {
		t.Fatalf("a share with a rewritten epsilon: dropped %v, want 1 undecryptable", s.Dropped)
	}
	exact, _ := NewState(c)
	if _, ok := pair(exact, 20000, []int64{1, 2, 3, 4}, 1, 1); ok || exact.Dropped[DropEpsilon] != 2 {
		t.Fatalf("noisy shares at an exact State: released %v, dropped %v", ok, exact.Dropped)
	}
	if b, ok := pair(exact, 20000, []int64{1, 2, 3, 4}, 0, 0); !ok || !reflect.DeepEqual(b.Totals, []int64{1, 2, 3, 4}) {
		t.Fatalf("exact pair at an exact State: %v %v", ok, b.Totals)
	}
}

// TestDaySpend: a noisy day spends ε per person-day (not L·ε or w·ε),
// δ = 0, under the day's PDD ledger key, the mechanism, the sensitivity S
// and the noise scale S/ε named.
func TestDaySpend(t *testing.T) {
	day := p3.Day(20000).Start()
	r := release.PDDRound{Campaign: "flu", Day: day, Epsilon: 0.5, MaxCount: 15}
	s := DaySpend("ds", r, p3.Config{Kind: p3.KindSumVec, Length: 300, Bits: 4, L1: 20}, 0, 0)
	if s.Epsilon != 0.5 || s.Delta != 0 || s.Dataset != "ds" || s.Key() != release.PDDLedgerKey("flu", day) ||
		!strings.Contains(s.Params, "mechanism=laplace-two-aggregators") || !strings.Contains(s.Params, "unit=person-day") ||
		!strings.Contains(s.Params, "sensitivity_l1=20 scale=40") {
		t.Fatalf("sumvec spend %+v", s)
	}
	r.MaxCount = 1
	s = DaySpend("ds", r, p3.Config{Kind: p3.KindPresence, Length: 300, MaxWeight: 7}, 0, 0)
	if s.Epsilon != 0.5 || !strings.Contains(s.Params, "sensitivity_l1=7 scale=14") || !strings.Contains(s.Params, "kind=presence") {
		t.Fatalf("presence spend %+v", s)
	}
	// the day's status at ε_c = 0.05, δ = 10⁻⁶: ε + ε_c, δ, T = ⌈ln(5·10⁵)/0.05⌉ = 263
	s = DaySpend("ds", r, p3.Config{Kind: p3.KindPresence, Length: 300, MaxWeight: 7}, 0.05, 1e-6)
	if s.Epsilon != 0.55 || s.Delta != 1e-6 || !strings.Contains(s.Params, "status=noisy-threshold status_epsilon=0.05 status_delta=1e-06 status_threshold=263") {
		t.Fatalf("spend with the status %+v", s)
	}
}

// laplaceCheck: xs look like sums of draws integer Laplace draws of scale
// b — mean within 6 standard errors of 0, variance within 30 % of
// draws·(2b² + 1/12); at N = 6,000 the variance's standard error is
// 2.4 % for two draws (√(3.5/N)·σ²: the sum of two Laplace has μ₄ =
// 4.5σ⁴), so a false failure needs over 12 standard errors (< 10⁻⁶),
// while one draw where two are wanted is 50 % off.
func laplaceCheck(t *testing.T, xs []int64, draws int, b float64) {
	t.Helper()
	n := float64(len(xs))
	var s, s2 float64
	for _, x := range xs {
		s += float64(x)
	}
	mean := s / n
	for _, x := range xs {
		s2 += (float64(x) - mean) * (float64(x) - mean)
	}
	v := s2 / (n - 1)
	want := float64(draws) * (2*b*b + 1.0/12)
	t.Logf("released − exact: N %d, mean %.3f, variance %.1f, want %.1f", len(xs), mean, v, want)
	if math.Abs(mean) > 6*math.Sqrt(want/n) || math.Abs(v-want) > 0.3*want {
		t.Fatalf("released − exact: mean %.3f (want 0 ± %.3f), variance %.1f (want %.1f ± 30 %%)", mean, 6*math.Sqrt(want/n), v, want)
	}
}

// TestStageNoiseIntoClickHouse: 3 days of L = 2,000 keywords, each
// aggregated by the real leader and helper state machines with ε = 1
// (L1 bound S = 15); the stage (--epsilon 1) writes keyword_daily whose
// counts minus the clients' bounded sums (computed here) have mean ≈ 0 and
// the variance of two draws (2·2·15²), some negative, no zero rows;
// pdd_rounds says epsilon 1 and max_count 15 and leaves the report count
// out (active = grouped = decrypted = 0); each day's ledger row (ε = 1 per
// person-day, laplace-two-aggregators) is written once, although the first
// write of a day failed after the ledger row (the redo writes the stored
// draw and spends nothing more) and a second run writes nothing; a day
// whose aggregators ran with another ε is never released. A stage with a
// budget below ε refuses every day and writes nothing.
func TestStageNoiseIntoClickHouse(t *testing.T) {
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
	const campaign, length, eps = "kw-noisy", 2000, 1.0
	rng := rand.New(rand.NewPCG(40, 5))
	list := testList(t, length)
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4, L1: 15}
	ck := genKey(t, 7)
	days := []p3.Day{20000, 20001, 20002}
	exact := map[p3.Day][]int64{}
	var msgs []kafkago.Message
	msg := func(day p3.Day, v []byte) kafkago.Message {
		return kafkago.Message{Key: []byte(campaign + "/" + day.String()), Value: v}
	}
	for _, d := range days {
		cs := randomClients(rng, 3, length)
		exact[d] = bounded(m, cs)
		sh := aggregateNoisy(t, campaign, m, ck.PublicKey(), 1, d, cs, eps, eps)
		msgs = append(msgs, msg(d, sh[0]), msg(d, sh[1]))
	}
	other := aggregateNoisy(t, campaign, m, ck.PublicKey(), 1, 20003, randomClients(rng, 3, length), 2, 2)
	msgs = append(msgs, msg(20003, other[0]), msg(20003, other[1]))
	kw := kafka.NewWriter(broker.Addr, protocol.Prio3SharesTopic)
	if err := kw.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	kw.Close()

	w := openTestWriter(t)
	var failed atomic.Bool
	w.Hook = func(step string) error {
		if step == "before-pdd-rounds-row" && failed.CompareAndSwap(false, true) {
			return errors.New("injected failure after the ledger row and the counts")
		}
		return nil
	}
	newStage := func(w *release.Writer) *Stage {
		return &Stage{Brokers: []string{broker.Addr}, Writer: w, List: list, Epsilon: eps, Dataset: "ds",
			Collector: p3.Collector{Campaign: campaign, Measurement: m, Key: ck, MinBatchSize: 1}}
	}
	st := newStage(w)
	runStage(t, st, len(days), func() bool { return st.Dropped.Load() >= 2 })
	if !failed.Load() || st.Days.Load() != int64(len(days)) || st.DroppedBy()[DropEpsilon] != 2 {
		t.Fatalf("hook failed %v, days %d, dropped %v", failed.Load(), st.Days.Load(), st.DroppedBy())
	}
	// the campaign's mode, ε, S and minimum batch, for the report
	if cs, err := w.ReadPDDCampaigns(ctx, campaign); err != nil || len(cs) != 1 ||
		cs[0] != (release.PDDCampaign{Campaign: campaign, Mode: release.PDDModePrio3, Epsilon: eps, Sensitivity: uint32(m.Sensitivity()), K: 1,
			Params: fmt.Sprintf("kind=sumvec bits=%d l1=%d keywords=%d", m.Bits, m.L1, m.Length)}) {
		t.Fatalf("pdd_campaigns %+v, %v", cs, err)
	}

	rows, err := w.ReadKeywordDaily(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	released := map[p3.Day]map[string]int64{}
	negative := 0
	for _, r := range rows {
		d := p3.DayOf(r.Day)
		if released[d] == nil {
			released[d] = map[string]int64{}
		}
		if r.Count == 0 || r.Confidence != 1 {
			t.Fatalf("row %+v: a zero count or confidence ≠ 1", r)
		}
		if r.Count < 0 {
			negative++
		}
		released[d][r.Keyword] = r.Count
	}
	if len(released) != len(days) || negative == 0 {
		t.Fatalf("released days %d (want %d, not day 20003), negative counts %d", len(released), len(days), negative)
	}
	var diffs []int64
	for _, d := range days {
		for i, word := range list.Words {
			diffs = append(diffs, released[d][word]-exact[d][i])
		}
	}
	laplaceCheck(t, diffs, 2, 15/eps)

	ledger := func() {
		t.Helper()
		for _, d := range days {
			l, err := w.Ledger(ctx, "ds", d.String())
			if err != nil {
				t.Fatal(err)
			}
			if len(l) != 1 || l[0].Epsilon != eps || l[0].Delta != 0 || !strings.Contains(l[0].Params, "mechanism=laplace-two-aggregators") {
				t.Fatalf("day %s ledger %+v, want one row of epsilon %v (per person-day)", d, l, eps)
			}
		}
	}
	ledger()
	rounds, err := w.ReadPDDRounds(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rounds {
		// the report count (3) is left out under noise
		if r.Epsilon != eps || r.MaxCount != 15 || r.Confidence != 1 || r.Active != 0 || r.Grouped != 0 || r.Decrypted != 0 {
			t.Fatalf("pdd_rounds %+v", r)
		}
	}
	if len(rounds) != len(days) {
		t.Fatalf("%d pdd_rounds rows", len(rounds))
	}

	again := newStage(w)
	runStage(t, again, len(days), func() bool { return again.Dropped.Load() >= 2 })
	after, err := w.ReadKeywordDaily(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	if again.Days.Load() != 0 || again.Skipped.Load() != int64(len(days)) || !reflect.DeepEqual(after, rows) {
		t.Fatalf("rerun: days %d, skipped %d, keyword_daily changed %v", again.Days.Load(), again.Skipped.Load(), !reflect.DeepEqual(after, rows))
	}
	ledger()

	// over the budget: every day refused, nothing written
	w2 := openTestWriter(t)
	poor := newStage(w2)
	poor.Budget = release.Budget{Epsilon: eps / 2}
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	errc := make(chan error, 1)
	go func() { errc <- poor.Run(rctx) }()
	for poor.Refused.Load() < int64(len(days)) && rctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	rcancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if n, _ := w2.ReadKeywordDaily(ctx, campaign); poor.Refused.Load() != int64(len(days)) || len(n) != 0 {
		t.Fatalf("over budget: refused %d of %d days, %d rows written", poor.Refused.Load(), len(days), len(n))
	}
}

// bounded is the exact totals of clients cs under m: each vector bounded
// by m.Clip (per-entry clip, then the L1 bound), summed.
func bounded(m p3.Config, cs [][]uint64) []int64 {
	sum := make([]int64, m.Length)
	for _, c := range cs {
		b, _ := m.Clip(c)
		for j, x := range b {
			sum[j] += int64(x)
		}
	}
	return sum
}
