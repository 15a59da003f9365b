package policy

import (
	"errors"
	"math"
	"strings"
	"testing"

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

func TestValidation(t *testing.T) {
	for _, c := range []struct {
		p    Params
		want string
	}{
		{Params{Kind: DPu, Epsilon: 1, D: 1, Users: 100, Delta: 0.01}, "1/U"},
		{Params{Kind: DPu, Epsilon: 0, D: 1, Users: 100}, "epsilon"},
		{Params{Kind: DPa, Epsilon: 1, D: 0, Users: 100}, "d=0"},
		{Params{Kind: Zealous, Epsilon: 1, D: 0, Users: 100}, "m=0"},
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
