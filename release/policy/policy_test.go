package policy

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/differential-privacy/go/v3/noise"

	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

func near(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Max(1, math.Abs(b)) }

// TestDPFormulas recomputes k_a/k_u, b, b_a, α, ε and δ by hand from
// CrowdLogging §3.2.3 (written out again here) and compares with New.
func TestDPFormulas(t *testing.T) {
	for _, c := range []struct {
		kind    Kind
		eps     float64
		d, U    int
		share   float64
		shamirK int
	}{
		{DPu, math.Ln10, 1, 1000, 0.5, 0}, {DPa, math.Ln10, 1, 1000, 0.5, 0}, {DPu, 1, 5, 5000, 0.3, 0},
		{DPa, 2, 3, 200, 0.5, 1}, {DPu, math.Ln10, 2, 1000, 0.5, 3},
	} {
		p, err := New(Params{Kind: c.kind, Epsilon: c.eps, D: c.d, Users: c.U, CountShare: c.share, ShamirK: c.shamirK})
		if err != nil {
			t.Fatal(err)
		}
		delta := 1 / float64(c.U+1)
		d := float64(c.d)
		epsSel, epsCnt := c.eps*(1-c.share), c.eps*c.share
		b, ba := d/epsSel, d/epsCnt
		// paper threshold (no Shamir pre-threshold): k_a = d(1 − ln(2δ/d)/ε), k_u = 1 − d ln(2δ/d)/ε
		var k0 float64
		if c.kind == DPa {
			k0 = d * (1 - math.Log(2*delta/d)/epsSel)
		} else {
			k0 = 1 - d*math.Log(2*delta/d)/epsSel
		}
		ks := c.shamirK
		if ks == 0 {
			ks = int(math.Max(1, math.Floor(k0-DefaultSlack*b)))
		}
		if p.ShamirK != ks || !near(p.B, b, 1e-12) || !near(p.BA, ba, 1e-12) {
			t.Fatalf("%s: shamir %d b %v b_a %v, want %d %v %v", c.kind, p.ShamirK, p.B, p.BA, ks, b, ba)
		}
		if ks <= 1 && !near(p.Threshold, k0, 1e-12) {
			t.Fatalf("%s: threshold %v want paper k0 %v", c.kind, p.Threshold, k0)
		}
		if p.Threshold < k0 {
			t.Fatalf("%s: threshold %v below the paper's %v", c.kind, p.Threshold, k0)
		}
		// achieved (ε, δ) from the paper's expressions at the threshold in use
		T := p.Threshold
		alpha := math.Max(math.Exp(1/b), 1+1/(2*math.Exp((T-1)/b)-1))
		wantEps := d*math.Log(alpha) + d/ba
		maxPerItem := 1.0
		if c.kind == DPa {
			maxPerItem = d
		}
		// per artifact of the added user, the larger of Korolova's new-artifact
		// term (eq. 9 / CrowdLogging eq. 1-2) and the Shamir crossing term
		wantDelta := d / 2 * math.Exp((maxPerItem-T)/b)
		if ks >= 2 {
			wantDelta = math.Max(wantDelta, d/2*math.Exp((float64(ks)-1+maxPerItem-T)/b))
			// the earlier sum of both terms needed a higher threshold
			old := maxPerItem + b*math.Log(d*(1+math.Exp(float64(ks-1)/b))/(2*delta))
			if !(T < old) || !near(T, k0+float64(ks-1), 1e-12) {
				t.Fatalf("%s: threshold %v, want k0 + k_s − 1 = %v < the summed form's %v", c.kind, T, k0+float64(ks-1), old)
			}
		}
		if !near(p.AchievedEpsilon, wantEps, 1e-9) || !near(p.AchievedDelta, wantDelta, 1e-9) {
			t.Fatalf("%s: achieved (%v, %v), want (%v, %v)", c.kind, p.AchievedEpsilon, p.AchievedDelta, wantEps, wantDelta)
		}
		if !near(p.AchievedDelta, delta, 1e-9) {
			t.Fatalf("%s: achieved δ %v, asked %v", c.kind, p.AchievedDelta, delta)
		}
		t.Logf("%s", p)
	}
}

// TestSetUnionFormulas recomputes dp-su's threshold and achieved (ε, δ)
// from the Laplace tails written out here: an artifact lifted from
// k_shamir − 1 to k_shamir is released with probability
// P(k_shamir + Lap(1/ε) > T) = ½·e^{−ε(T − k_shamir)}, which must be δ.
func TestSetUnionFormulas(t *testing.T) {
	for _, c := range []struct {
		eps     float64
		U, ks   int
		wantKS  int
		wantThr float64
	}{
		{math.Ln10, 1000, 0, 2, 2 + math.Log(1001.0/2)/math.Ln10},
		{1, 500, 1, 1, 1 + math.Log(501.0/2)},
		{0.5, 10000, 5, 5, 5 + 2*math.Log(10001.0/2)},
	} {
		p, err := New(Params{Kind: DPSU, Epsilon: c.eps, D: 20, Users: c.U, ShamirK: c.ks})
		if err != nil {
			t.Fatal(err)
		}
		delta := 1 / float64(c.U+1)
		if p.ShamirK != c.wantKS || !near(p.Threshold, c.wantThr, 1e-12) || !near(p.B, 1/c.eps, 1e-12) || p.BA != p.B {
			t.Fatalf("ε=%v: %s, want k_s %d T %v b %v", c.eps, p, c.wantKS, c.wantThr, 1/c.eps)
		}
		tail := 0.5 * math.Exp(-c.eps*(p.Threshold-float64(p.ShamirK)))
		if !near(tail, delta, 1e-9) || !near(p.AchievedDelta, delta, 1e-9) || !near(p.AchievedEpsilon, c.eps, 1e-12) {
			t.Fatalf("ε=%v: achieved (%v, %v), crossing tail %v, want (%v, %v)", c.eps, p.AchievedEpsilon, p.AchievedDelta, tail, c.eps, delta)
		}
		if n, distinct := p.Limit(); n != 1 || !distinct || p.Window() != 20 || p.Sealing() != star.FTu {
			t.Fatalf("dp-su limit (%d, %v) window %d sealing %v", n, distinct, p.Window(), p.Sealing())
		}
	}
}

// TestZealousTable2 checks τ' against the values printed in Götz et al.'s
// Table 2 (τ' for τ = 1, 3, 4, 5, 7, 9: 81.1 78.7 78.6 78.7 79.3 80.3),
// which our reading of Theorem 3 reproduces with λ = 4, m = 2 (ε = 1),
// U = 500,000 users and δ = 0.001.
func TestZealousTable2(t *testing.T) {
	want := map[int]float64{1: 81.1, 3: 78.7, 4: 78.6, 5: 78.7, 7: 79.3, 9: 80.3}
	for tau, w := range want {
		p, err := New(Params{Kind: Zealous, Epsilon: 1, D: 2, Users: 500000, Delta: 0.001, ShamirK: tau})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(p.Threshold-w) > 0.051 {
			t.Fatalf("τ=%d: τ' = %.3f, Table 2 says %.1f", tau, p.Threshold, w)
		}
		if !near(p.AchievedEpsilon, 1, 1e-12) || p.AchievedDelta > 0.001*(1+1e-9) {
			t.Fatalf("achieved (%v, %v)", p.AchievedEpsilon, p.AchievedDelta)
		}
	}
	// Proposition 4: the default τ = λ = 4 minimises τ'
	p, _ := New(Params{Kind: Zealous, Epsilon: 1, D: 2, Users: 500000, Delta: 0.001})
	if p.ShamirK != 4 {
		t.Fatalf("default τ %d, want λ = 4", p.ShamirK)
	}
}

// TestDefaultD: d (m) = 0 resolves to DefaultD, the pipeline file's
// default too: 20 for dp-gsu, 1 for the other DP kinds.
func TestDefaultD(t *testing.T) {
	for _, k := range Kinds() {
		if !k.IsDP() {
			continue
		}
		p, err := New(Params{Kind: k, Epsilon: 1, Users: 100})
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if k == DPGSU {
			want = DefaultGaussianSetUnionM
		}
		if p.D != want || DefaultD(k) != want {
			t.Errorf("%s: d=0 resolves to %d (DefaultD %d), want %d", k, p.D, DefaultD(k), want)
		}
	}
}

func TestValidation(t *testing.T) {
	for _, c := range []struct {
		p    Params
		want string
	}{
		{Params{Kind: DPu, Epsilon: 1, D: 1, Users: 100, Delta: 0.01}, "1/U"},
		{Params{Kind: DPu, Epsilon: 0, D: 1, Users: 100}, "epsilon"},
		{Params{Kind: DPa, Epsilon: 1, D: -1, Users: 100}, "d=-1"},
		{Params{Kind: Zealous, Epsilon: 1, D: -1, Users: 100}, "m=-1"},
		{Params{Kind: DPu, Epsilon: 1, D: 1, Users: 0}, "users"},
		{Params{Kind: Zealous, Epsilon: 1, D: 2, Users: 100, Lambda: 1}, "2m/ε"},
		{Params{Kind: DPu, Epsilon: 1, D: 1, Users: 100, CountShare: 1}, "count share"},
		{Params{Kind: FTu, K: 0}, "k=0"},
		{Params{Kind: "dp-x"}, "unknown policy"},
		{Params{Kind: DPu, Epsilon: 1, D: 1, Users: 100, ShamirK: vss.MaxK + 1}, "Shamir"},
	} {
		_, err := New(c.p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one mentioning %q", c.p, err, c.want)
		}
	}
}

// TestNoiseCentredWithScale draws many releases of a large true count and
// checks the noisy released value is centred on it with the configured
// Laplace scale b_a. Tolerances are 6 standard errors: for Lap(b), the mean
// of n draws has standard deviation b·sqrt(2/n) and |X| (exponential with
// mean b) has standard deviation b, so the mean absolute deviation has
// standard error b/sqrt(n); a 6σ miss has probability < 1e-8.
func TestNoiseCentredWithScale(t *testing.T) {
	const n = 20000
	for _, kind := range []Kind{DPa, DPu, Zealous, DPSU} {
		p, err := New(Params{Kind: kind, Epsilon: 1, D: 3, Users: 1000})
		if err != nil {
			t.Fatal(err)
		}
		const truth = 5000
		var sum, abs float64
		for i := 0; i < n; i++ {
			o, err := p.Decide(truth, truth)
			if err != nil {
				t.Fatal(err)
			}
			if !o.Released {
				t.Fatalf("%s: count %d far above threshold %.1f not released", kind, truth, p.Threshold)
			}
			if o.Impressions != uint64(math.Round(o.Value)) {
				t.Fatalf("%s: impressions %d is not round(%v)", kind, o.Impressions, o.Value)
			}
			if kind != DPa && o.Users != o.Impressions {
				t.Fatalf("%s: users %d != impressions %d", kind, o.Users, o.Impressions)
			}
			sum += o.Value - truth
			abs += math.Abs(o.Value - truth)
		}
		mean, mad := sum/n, abs/n
		if tol := 6 * p.BA * math.Sqrt(2.0/n); math.Abs(mean) > tol {
			t.Fatalf("%s: mean noise %.4f, want 0 ± %.4f", kind, mean, tol)
		}
		if tol := 6 * p.BA / math.Sqrt(n); math.Abs(mad-p.BA) > tol {
			t.Fatalf("%s: mean |noise| %.4f, want b_a = %.4f ± %.4f", kind, mad, p.BA, tol)
		}
		t.Logf("%s: b_a %.3f mean %.4f mad %.4f", kind, p.BA, mean, mad)
	}
}

// TestSelectionProbability checks the release probability of an artifact
// exactly at the Shamir threshold against P(Lap(b) > T − count) =
// ½·e^{−(T−count)/b}, and that counts below the Shamir threshold are never
// released.
func TestSelectionProbability(t *testing.T) {
	p, err := New(Params{Kind: DPu, Epsilon: math.Ln10, D: 2, Users: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ks := uint64(p.ShamirK)
	if ks < 2 {
		t.Fatalf("expected a Shamir threshold ≥ 2, got %d", ks)
	}
	const n = 40000
	var released int
	for i := 0; i < n; i++ {
		o, _ := p.Decide(ks, ks)
		if o.Released {
			released++
		}
		if below, _ := p.Decide(ks-1, ks-1); below.Released {
			t.Fatal("released a count below the Shamir threshold")
		}
	}
	want := 0.5 * math.Exp(-(p.Threshold-float64(ks))/p.B)
	got := float64(released) / n
	if tol := 6*math.Sqrt(want*(1-want)/n) + 1e-4; math.Abs(got-want) > tol {
		t.Fatalf("release rate at k_shamir %.5f, want %.5f ± %.5f", got, want, tol)
	}
	t.Logf("%s: release rate at k_shamir=%d %.5f (formula %.5f)", p, ks, got, want)
}

func TestSealingAndLimit(t *testing.T) {
	for _, c := range []struct {
		kind     Kind
		seal     star.Policy
		distinct bool
	}{{DPa, star.FTa, false}, {DPu, star.FTu, true}, {Zealous, star.FTu, true}} {
		p, err := New(Params{Kind: c.kind, Epsilon: 1, D: 4, Users: 100})
		if err != nil {
			t.Fatal(err)
		}
		n, distinct := p.Limit()
		if p.Sealing() != c.seal || n != 4 || distinct != c.distinct {
			t.Fatalf("%s: sealing %v limit %d %v", c.kind, p.Sealing(), n, distinct)
		}
	}
	if _, err := Parse("DP_u"); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("nope"); err == nil || errors.Unwrap(err) != nil && false {
		t.Fatal("Parse accepted nope")
	}
}

// hockeyStick integrates ∫ (a·φ(x − μa) − b·φ(x − μb))_+ dx by Simpson's
// rule on a fine grid (φ the standard normal density written out here): an
// independent evaluation of the Gaussian hockey-stick divergences that
// GaussianSetUnionDelta takes in closed form.
func hockeyStick(a, muA, b, muB float64) float64 {
	phi := func(x float64) float64 { return math.Exp(-x*x/2) / math.Sqrt(2*math.Pi) }
	f := func(x float64) float64 { return math.Max(0, a*phi(x-muA)-b*phi(x-muB)) }
	lo, hi := math.Min(muA, muB)-14, math.Max(muA, muB)+14
	const n = 40000
	h := (hi - lo) / n
	s := f(lo) + f(hi)
	for i := 1; i < n; i++ {
		w := 2.0
		if i%2 == 1 {
			w = 4
		}
		s += w * f(lo+float64(i)*h)
	}
	return s * h / 3
}

// tail integrates the standard normal density from z to z + 14 by Simpson's
// rule: P(N(0, 1) > z) up to e^{−98}.
func tail(z float64) float64 { return simpsonTail(z) }

func simpsonTail(z float64) float64 {
	const n = 40000
	h := 14.0 / n
	s := 0.0
	for i := 0; i <= n; i++ {
		x := z + float64(i)*h
		w := 2.0
		switch {
		case i == 0 || i == n:
			w = 1
		case i%2 == 1:
			w = 4
		}
		s += w * math.Exp(-x*x/2) / math.Sqrt(2*math.Pi)
	}
	return s * h / 3
}

// TestGaussianSetUnionCalibration checks dp-gsu's achieved δ against an
// independent computation of the whole release's hockey-stick divergence.
// Neighbouring logs D (without the user) and D' (with it): of the user's m
// artifacts, j cross the Shamir cut (k_s − 1 → k_s users: D never releases
// them, D' releases each with p = P(k_s + N(0, σ²) > T), by quadrature) and
// m − j are counted in both (their noisy counts, projected on the shift
// direction, are N(0, 1) under D and N(√(m − j)/σ, 1) under D'). With
// q = 1 − (1 − p)^j: δ_add = q + ∫((1 − q)φ(x − μ) − e^ε φ(x))_+,
// δ_remove = ∫(φ(x) − e^ε(1 − q)φ(x − μ))_+. The worst over j must be the
// achieved δ and at most the δ asked for; a threshold 0.1σ lower must
// break it (the calibration is tight), and so must the simple split
// (Gaussian at δ/2, crossing of all m artifacts at δ/2) be looser.
func TestGaussianSetUnionCalibration(t *testing.T) {
	for _, c := range []struct {
		eps   float64
		m, U  int
		ks    int
		delta float64
	}{
		{math.Ln10, 20, 1000, 0, 0}, {math.Ln10, 5, 1000, 0, 0}, {1, 10, 5000, 3, 0}, {0.5, 50, 2000, 1, 0},
		{math.Ln10, 20, 1000, 2, 1e-6},
	} {
		p, err := New(Params{Kind: DPGSU, Epsilon: c.eps, D: c.m, Users: c.U, ShamirK: c.ks, Delta: c.delta})
		if err != nil {
			t.Fatal(err)
		}
		delta := c.delta
		if delta == 0 {
			delta = 1 / float64(c.U+1)
		}
		worst := func(thr float64) (float64, int) {
			pc := tail((thr - float64(p.ShamirK)) / p.B)
			w, wj := 0.0, 0
			for j := 0; j <= c.m; j++ {
				q := 1 - math.Pow(1-pc, float64(j))
				mu := math.Sqrt(float64(c.m-j)) / p.B
				add := q + hockeyStick(1-q, mu, math.Exp(c.eps), 0)
				rem := hockeyStick(1, 0, math.Exp(c.eps)*(1-q), mu)
				if d := math.Max(add, rem); d > w {
					w, wj = d, j
				}
			}
			return w, wj
		}
		w, wj := worst(p.Threshold)
		if !near(w, p.AchievedDelta, 1e-6) || wj != p.WorstLifted || p.AchievedDelta > delta*(1+1e-9) || p.AchievedEpsilon != c.eps {
			t.Fatalf("%s: quadrature δ %v (j=%d), want achieved %v (j=%d) ≤ %v", p, w, wj, p.AchievedDelta, p.WorstLifted, delta)
		}
		if lower, _ := worst(p.Threshold - 0.1*p.B); !(lower > delta) {
			t.Fatalf("%s: T − 0.1σ still gives δ %v ≤ %v: not the smallest threshold", p, lower, delta)
		}
		// σ is what the library samples at (L0 = m, L∞ = 1, ε, δ_G)
		if s := noise.SigmaForGaussian(int64(c.m), 1, c.eps, p.NoiseDelta); s != p.B {
			t.Fatalf("%s: library σ %v", p, s)
		}
		// the simple split: Gaussian δ/2 and every artifact crossing at δ/(2m)
		split := float64(p.ShamirK) + noise.SigmaForGaussian(int64(c.m), 1, c.eps, delta/2)*inverseTail(delta/(2*float64(c.m)))
		if !(p.Threshold < split) {
			t.Fatalf("%s: threshold %v not below the δ/2 split's %v", p, p.Threshold, split)
		}
		if n, distinct := p.Limit(); n != c.m || !distinct || p.Window() != AllArtifacts || !p.Padded() || p.Sealing() != star.FTu {
			t.Fatalf("dp-gsu limit (%d, %v) window %d", n, distinct, p.Window())
		}
		t.Logf("%s; δ/2 split threshold %.3f", p, split)
	}
}

// inverseTail returns z with P(N(0, 1) > z) = p by bisection on simpsonTail.
func inverseTail(p float64) float64 {
	lo, hi := -10.0, 10.0
	for hi-lo > 1e-10 {
		mid := (lo + hi) / 2
		if simpsonTail(mid) > p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// TestGaussianSetUnionDecide draws dp-gsu decisions through the library's
// sampler and compares the release frequency and the noise's standard
// deviation with the Gaussian written out here; below the Shamir cut
// nothing is released.
func TestGaussianSetUnionDecide(t *testing.T) {
	p, err := New(Params{Kind: DPGSU, Epsilon: math.Ln10, D: 20, Users: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := p.Decide(1, 1); err != nil || o.Released {
		t.Fatalf("below the cut: %+v %v", o, err)
	}
	const n = 20000
	count := math.Floor(p.Threshold)
	var rel, sum, sq float64
	for range n {
		o, err := p.Decide(uint64(count), uint64(count))
		if err != nil {
			t.Fatal(err)
		}
		if o.Released {
			rel++
			if o.Users != uint64(math.Round(o.Value)) || o.Impressions != o.Users || !(o.Value > p.Threshold) {
				t.Fatalf("released %+v", o)
			}
		}
		z := o.Value - count
		sum += z
		sq += z * z
	}
	want := tail((p.Threshold - count) / p.B)
	if got := rel / n; math.Abs(got-want) > 4*math.Sqrt(want*(1-want)/n) {
		t.Fatalf("release frequency %v, want %v", got, want)
	}
	sd := math.Sqrt(sq/n - (sum/n)*(sum/n))
	if math.Abs(sd-p.B) > 4*p.B/math.Sqrt(2*n) || math.Abs(sum/n) > 4*p.B/math.Sqrt(n) {
		t.Fatalf("noise mean %v sd %v, want 0 and σ = %v", sum/n, sd, p.B)
	}
}
