package prio3

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// noiseSetup prepares days batches of 3 clients each (L = length, SumVec
// b = 4: Δ = 15, L1 bound S = 15: the noise's scale is 15/ε) at a leader
// and a helper without noise and returns the world, the days, and per day
// the exact totals computed here from the clients' counts (each client's
// vector bounded by Config.Clip, summed).
func noiseSetup(t *testing.T, length, days int) (*world, []p3.Day, [][]int64) {
	t.Helper()
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4, L1: 15}
	w := newWorld(t, m, 1)
	rng := rand.New(rand.NewPCG(7, 40))
	var ds []p3.Day
	var exact [][]int64
	for d := range days {
		day := p3.Day(20000 + d)
		cs, _ := clients(rng, 3, length, 15)
		sum := make([]int64, length)
		for _, c := range cs {
			b, _ := m.Clip(c)
			for j, x := range b {
				sum[j] += int64(x)
			}
		}
		w.upload(t, day.Start(), w.shardAll(t, day, cs))
		ds = append(ds, day)
		exact = append(exact, sum)
	}
	return w, ds, exact
}

// restored returns a copy of w whose leader and helper are restored from
// the encoded states lb and hb with ε epsL and epsH.
func restored(t *testing.T, w *world, lb, hb []byte, epsL, epsH float64) *world {
	t.Helper()
	c := *w
	c.cfgL.Epsilon, c.cfgH.Epsilon = epsL, epsH
	var err error
	if c.l, err = RestoreLeader(c.cfgL, lb); err != nil {
		t.Fatal(err)
	}
	if c.h, err = RestoreHelper(c.cfgH, hb); err != nil {
		t.Fatal(err)
	}
	return &c
}

// shares collects day and returns the leader's and the helper's AggShare.
func (w *world) shares(t *testing.T, day p3.Day) (leader, helper []byte) {
	t.Helper()
	now := day.Start().Add(26 * time.Hour)
	outs, err := w.l.Apply(Event{Now: now, Kind: EventCollect, Day: day})
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.route(now, outs)
	if err != nil || len(got) != 2 {
		t.Fatalf("collect %s: %d shares, %v", day, len(got), err)
	}
	return got[0], got[1]
}

// opened is an AggShare's opened plaintext and its claimed ε.
func (w *world) opened(t *testing.T, b []byte) ([]byte, float64) {
	t.Helper()
	a, err := p3.ParseAggShare(b)
	if err != nil {
		t.Fatal(err)
	}
	v, err := a.Open(w.ck.Private)
	if err != nil {
		t.Fatal(err)
	}
	return v, a.Epsilon
}

// diff returns the unsharded totals of (leader, helper) minus exact.
func (w *world) diff(t *testing.T, leader, helper []byte, exact []int64) []int64 {
	t.Helper()
	sum, _, err := w.c.UnshardFields(leader, helper)
	if err != nil {
		t.Fatal(err)
	}
	tot, err := p3.Signed(sum)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(tot))
	for i := range tot {
		out[i] = tot[i] - exact[i]
	}
	return out
}

// checkLaplace checks that xs look like sums of draws independent
// integer Laplace draws of scale b: mean within 6 standard errors of 0
// (σ/√N; P(false failure) < 2·10⁻⁹ by the CLT), sample variance within 30 %
// of draws·(2b² + 1/12) (the integer mechanism rounds a continuous draw:
// + 1/12). With N = 6,000 the variance's standard error is
// √((μ₄ − σ⁴)/N) = √(5/N)·σ² = 2.9 % for one draw (Laplace: μ₄ = 6σ⁴) and
// √(3.5/N)·σ² = 2.4 % for two, so 30 % is over 10 standard errors
// (P(false failure) < 10⁻⁶ with a wide margin even for the variance's
// right skew), while one draw where two are wanted (or the reverse) is
// 50 % (100 %) off.
func checkLaplace(t *testing.T, what string, xs []int64, draws int, b float64) {
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
	t.Logf("%s: N %d, mean %.3f, variance %.1f, want %.1f (%d draws of scale %g)", what, len(xs), mean, v, want, draws, b)
	if math.Abs(mean) > 6*math.Sqrt(want/n) {
		t.Errorf("%s: mean %.3f, want 0 ± %.3f", what, mean, 6*math.Sqrt(want/n))
	}
	if math.Abs(v-want) > 0.3*want {
		t.Errorf("%s: variance %.1f, want %.1f ± 30 %%", what, v, want)
	}
}

// TestNoise: with ε = 1 at both aggregators (S = 15: scale 15), over 3
// days × L = 2,000 entries, the released totals minus the exact clipped
// sums (computed here from the clients' counts) have mean ≈ 0 and the
// variance of two draws, 2·2·15²; each aggregator's noise is present on
// its own: the leader's noisy share unsharded with the helper's exact
// share (the helper's noise turned off: the same state restored with
// ε = 0) is off the exact sums by one draw's variance, and the same for
// the helper's; the two differences add up to the total's exactly. Each
// share says its ε (AggShare.Epsilon), and without noise the totals are
// exact.
func TestNoise(t *testing.T) {
	const length, days, eps = 2000, 3, 1.0
	w, ds, exact := noiseSetup(t, length, days)
	lb, _ := w.l.MarshalBinary()
	hb, _ := w.h.MarshalBinary()
	noisy := restored(t, w, lb, hb, eps, eps)
	plain := restored(t, w, lb, hb, 0, 0)
	var both, lonly, honly []int64
	for i, day := range ds {
		nl, nh := noisy.shares(t, day)
		el, eh := plain.shares(t, day)
		if _, e := w.opened(t, nl); e != eps {
			t.Fatalf("leader share says epsilon %v", e)
		}
		if _, e := w.opened(t, nh); e != eps {
			t.Fatalf("helper share says epsilon %v", e)
		}
		if _, e := w.opened(t, el); e != 0 {
			t.Fatalf("exact share says epsilon %v", e)
		}
		for _, x := range w.diff(t, el, eh, exact[i]) {
			if x != 0 {
				t.Fatal("exact shares do not unshard to the exact sums")
			}
		}
		dl, dh, d := w.diff(t, nl, eh, exact[i]), w.diff(t, el, nh, exact[i]), w.diff(t, nl, nh, exact[i])
		for j := range d {
			if d[j] != dl[j]+dh[j] {
				t.Fatalf("day %s keyword %d: total noise %d ≠ leader's %d + helper's %d", day, j, d[j], dl[j], dh[j])
			}
		}
		both, lonly, honly = append(both, d...), append(lonly, dl...), append(honly, dh...)
	}
	checkLaplace(t, "both aggregators", both, 2, 15/eps)
	checkLaplace(t, "leader alone", lonly, 1, 15/eps)
	checkLaplace(t, "helper alone", honly, 1, 15/eps)
}

// TestNoiseDrawnOnce: a batch's noise is drawn once per aggregator: a
// second collection, a restart from the snapshot (the current state
// version) and a restart with --epsilon turned off all hand the same
// opened shares, noisy (not the exact ones); a version-1 state (the layout
// before the noise field) is still read.
func TestNoiseDrawnOnce(t *testing.T) {
	const length = 50
	w, ds, exact := noiseSetup(t, length, 1)
	day := ds[0]
	lb0, _ := w.l.MarshalBinary()
	hb0, _ := w.h.MarshalBinary()
	n := restored(t, w, lb0, hb0, 0.5, 0.5)
	l1, h1 := n.shares(t, day)
	ol, _ := w.opened(t, l1)
	oh, _ := w.opened(t, h1)
	el, eh := restored(t, w, lb0, hb0, 0, 0).shares(t, day)
	if pl, _ := w.opened(t, el); bytes.Equal(pl, ol) {
		t.Fatal("the leader's share has no noise")
	}
	if ph, _ := w.opened(t, eh); bytes.Equal(ph, oh) {
		t.Fatal("the helper's share has no noise")
	}
	same := func(what string, w2 *world) {
		t.Helper()
		l, h := w2.shares(t, day)
		gl, el := w.opened(t, l)
		gh, eh := w.opened(t, h)
		if !bytes.Equal(gl, ol) || !bytes.Equal(gh, oh) || el != 0.5 || eh != 0.5 {
			t.Fatalf("%s: a share changed (leader same %v, helper same %v, epsilon %v %v)", what, bytes.Equal(gl, ol), bytes.Equal(gh, oh), el, eh)
		}
	}
	same("second collection", n)
	lb, _ := n.l.MarshalBinary()
	hb, _ := n.h.MarshalBinary()
	same("restart", restored(t, w, lb, hb, 0.5, 0.5))
	same("restart without noise", restored(t, w, lb, hb, 0, 0))
	same("restart with another epsilon", restored(t, w, lb, hb, 2, 2))

	// version 1: no noise flag after each batch, no collected flag, the
	// helper's 32-byte digests and prep messages
	old := restored(t, w, legacyState(w.l.cfg, 'L', w.l.batches), legacyState(w.h.cfg, 'H', w.h.batches), 0, 0)
	got, err := old.collect(day)
	if err != nil {
		t.Fatal(err)
	}
	equalTotals(t, got.Totals, exact[0])
}

// TestServicesNoise: the leader and the helper services with ε = 1 write
// a noisy pair to prio3-shares (the totals are not the clients' clipped
// sums computed here, and each share says ε 1); after both stop, each
// one's snapshot holds the batch's draw, and re-sealing from the snapshot
// opens to exactly the share that went out: a restart resends the same
// noisy values.
func TestServicesNoise(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 100, Bits: 4}
	e := newSvcEnv(t, m, 2, time.Hour)
	e.w.cfgL.Epsilon, e.w.cfgH.Epsilon = 1, 1
	day := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	const n = 10
	cs, want := clients(rand.New(rand.NewPCG(9, 9)), n, m.Length, 15)
	_, hr := e.startHelper()
	l, lr := e.startLeader(16)
	e.write(e.w.shardAll(t, day, cs)...)
	waitFor(t, "every report prepared", 60*time.Second, func() bool { return l.Stats().Prepared == n })
	e.setNow(day.Start().Add(26 * time.Hour))
	waitFor(t, "the batch collected", 30*time.Second, func() bool { return l.Shares.Load() == 1 })
	got := e.shares(2)[campaign+"/"+day.String()]
	lr.stop(t, "leader")
	hr.stop(t, "helper")
	res := e.unshardDay(got)
	differ := 0
	for i := range want {
		if res.Totals[i] != want[i] {
			differ++
		}
	}
	if differ < m.Length/2 {
		t.Fatalf("only %d of %d totals differ from the exact sums: no noise?", differ, m.Length)
	}
	ls, _, _, err := loadLeader(e.lDir, e.w.cfgL)
	if err != nil {
		t.Fatal(err)
	}
	hs, _, err := loadHelper(e.hDir, e.w.cfgH)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range got {
		a, err := p3.ParseAggShare(m)
		if err != nil {
			t.Fatal(err)
		}
		sent, eps := e.w.opened(t, m)
		cfg, bt := &e.w.cfgL, ls.batches[day]
		if a.Role == 1 {
			cfg, bt = &e.w.cfgH, hs.batches[day]
		}
		if bt == nil || bt.noise == nil || eps != 1 {
			t.Fatalf("role %d: snapshot batch %v, draw kept %v, share epsilon %v", a.Role, bt != nil, bt != nil && bt.noise != nil, eps)
		}
		again, err := sealShare(cfg, a.Role, day, bt)
		if err != nil {
			t.Fatal(err)
		}
		if reopened, _ := e.w.opened(t, again); !bytes.Equal(reopened, sent) {
			t.Fatalf("role %d: the snapshot's share differs from the one sent", a.Role)
		}
	}
}

// TestNoiseConfig: an ε that is negative, NaN or infinite is a
// configuration error at both roles.
func TestNoiseConfig(t *testing.T) {
	w := newWorld(t, p3.Config{Kind: p3.KindSumVec, Length: 4, Bits: 2}, 1)
	for _, eps := range []float64{-1, math.NaN(), math.Inf(1)} {
		l, h := w.cfgL, w.cfgH
		l.Epsilon, h.Epsilon = eps, eps
		if _, err := NewLeader(l); !errors.Is(err, ErrConfig) {
			t.Errorf("leader with epsilon %v: %v", eps, err)
		}
		if _, err := NewHelper(h); !errors.Is(err, ErrConfig) {
			t.Errorf("helper with epsilon %v: %v", eps, err)
		}
	}
}

// legacyState encodes batches in the state layout of version 1 (no noise
// or collected flag; the helper's ids with a 32-byte digest and a prep
// message; the leader's state ending with 0 pending and 0 collecting days).
func legacyState(cfg Config, role byte, bs map[p3.Day]*batch) []byte {
	w := protocol.Writer{}
	w.U8(stateVersionNoNoise)
	w.U8(role)
	w.Bytes8([]byte(cfg.Campaign))
	w.U32(uint32(cfg.Measurement.Length))
	putStats(&w, &Stats{})
	w.U32(uint32(len(bs)))
	for _, d := range sortedDays(bs) {
		b := bs[d]
		w.U32(uint32(d))
		putU64(&w, b.count)
		w.Raw(b.checksum[:])
		w.Bytes32(p3.EncodeAggregate(&b.agg))
		w.U32(uint32(len(b.ids)))
		for id, c := range b.ids {
			w.Raw(id[:])
			if role == 'H' {
				w.Raw(c[:])
				w.Raw(make([]byte, 32-DigestSize))
				w.Bytes8([]byte("a prep message, no longer kept"))
			}
		}
	}
	if role == 'L' {
		w.U32(0)
		w.U32(0)
	}
	return w.B
}
