package policy

import (
	"fmt"
	"math"

	"github.com/google/differential-privacy/go/v3/noise"
)

// DefaultGaussianSetUnionM is dp-gsu's m (distinct artifacts per client per
// epoch) that a pipeline file gets when its policy.d is 0: 20, the m of
// docs/policies.md's comparison.
const DefaultGaussianSetUnionM = 20

// GaussianDelta is the exact δ(ε) of the Gaussian mechanism whose two
// output distributions are N(0, 1) and N(μ, 1) (μ = L2 sensitivity / σ ≥ 0,
// dimensionless; ε any real): the hockey-stick divergence
// Φ(μ/2 − ε/μ) − e^ε·Φ(−μ/2 − ε/μ) (Balle & Wang, ICML 2018, "Improving
// the Gaussian Mechanism for Differential Privacy", Theorem 8). μ = 0 gives
// max(0, 1 − e^ε). The value is symmetric in the two distributions.
func GaussianDelta(mu, eps float64) float64 {
	if mu <= 0 {
		return math.Max(0, -math.Expm1(eps))
	}
	d := normalCDF(mu/2-eps/mu) - math.Exp(eps)*normalCDF(-mu/2-eps/mu)
	return math.Max(d, 0)
}

// normalCDF is Φ, the standard normal CDF, accurate in both tails.
func normalCDF(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

// GaussianSetUnionCrossing is the probability, in [0, 1], that an artifact
// with exactly ks distinct users passes the dp-gsu threshold t (users):
// P(ks + N(0, σ²) > t), σ in users. It is what the added user gives to
// each of its artifacts that it lifts across the Shamir cut (from ks − 1,
// never decrypted, to ks).
func GaussianSetUnionCrossing(ks int, sigma, t float64) float64 {
	return 0.5 * math.Erfc((t-float64(ks))/(sigma*math.Sqrt2))
}

// GaussianSetUnionDelta returns the exact δ at ε of dp-gsu for one user
// with j of its m artifacts lifted across the Shamir cut ks (ks − 1 → ks
// users) and the other m − j counted in both neighbouring logs, σ and t in
// users (docs/policies.md, "dp-gsu"): with p =
// GaussianSetUnionCrossing(ks, σ, t), ℓ = −ln(1 − p), q = 1 − (1 − p)^j and
// μ = √(m − j)/σ,
//
//	adding the user:   q + (1 − q)·GaussianDelta(μ, ε + j·ℓ),
//	removing the user: GaussianDelta(μ, ε − j·ℓ),
//
// and it returns the larger. The hockey-stick divergences of the whole
// release (post-processing of the noisy counts) are exactly these.
func GaussianSetUnionDelta(m, j, ks int, sigma, t, eps float64) float64 {
	p := GaussianSetUnionCrossing(ks, sigma, t)
	l := -math.Log1p(-p)
	q := -math.Expm1(float64(j) * math.Log1p(-p))
	mu := math.Sqrt(float64(m-j)) / sigma
	add := q + (1-q)*GaussianDelta(mu, eps+float64(j)*l)
	rem := GaussianDelta(mu, eps-float64(j)*l)
	return math.Max(add, rem)
}

// GaussianSetUnionWorstDelta is dp-gsu's δ at ε: the worst case of
// GaussianSetUnionDelta over j = 0..m lifted artifacts; it also returns the
// worst j.
func GaussianSetUnionWorstDelta(m, ks int, sigma, t, eps float64) (delta float64, lifted int) {
	for j := 0; j <= m; j++ {
		if d := GaussianSetUnionDelta(m, j, ks, sigma, t, eps); d > delta {
			delta, lifted = d, j
		}
	}
	return delta, lifted
}

// GaussianSetUnionThreshold returns the smallest release threshold t
// (users, to 1e-9 relative) at which dp-gsu with m, ks and σ (users) is
// (ε, δ)-DP by GaussianSetUnionWorstDelta, or +Inf when no threshold is
// (the Gaussian part alone, GaussianDelta(√m/σ, ε), reaches δ).
func GaussianSetUnionThreshold(m, ks int, sigma, eps, delta float64) float64 {
	ok := func(t float64) bool {
		d, _ := GaussianSetUnionWorstDelta(m, ks, sigma, t, eps)
		return d <= delta
	}
	lo, hi := float64(ks), float64(ks)+sigma
	for !ok(hi) {
		lo, hi = hi, hi+2*(hi-float64(ks))
		if hi-float64(ks) > 80*sigma { // crossing probability below 1e-1000: only the Gaussian part is left
			return math.Inf(1)
		}
	}
	for hi-lo > 1e-9*hi {
		mid := (lo + hi) / 2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// newGaussianSetUnion resolves dp-gsu (docs/policies.md, "dp-gsu"): each
// client sends its m = D most frequent distinct artifacts, each with the
// implicit weight 1/√m, so one user changes the weighted counts by at most
// 1 in L2. Noise is the library's Gaussian for L0 = m, L∞ = 1 at (ε, δ_G):
// σ = noise.SigmaForGaussian(m, 1, ε, δ_G) users. For each δ_G on a grid
// in (0, δ) it takes the smallest threshold T with
// GaussianSetUnionWorstDelta ≤ δ, and keeps the δ_G whose T is smallest
// (golden-section refinement in ln δ_G). Achieved ε = ε, δ =
// GaussianSetUnionWorstDelta at (σ, T) ≤ δ. Errors: m above 10,000.
func newGaussianSetUnion(p Params) (*Policy, error) {
	if p.D > 10000 {
		return nil, fmt.Errorf("policy dp-gsu: m=%d above 10000 artifacts per user", p.D)
	}
	ks := p.ShamirK
	if ks == 0 {
		ks = DefaultSetUnionShamirK
	}
	m := p.D
	thr := func(lnDG float64) (float64, float64) {
		sigma := noise.SigmaForGaussian(int64(m), 1, p.Epsilon, math.Exp(lnDG))
		return GaussianSetUnionThreshold(m, ks, sigma, p.Epsilon, p.Delta), sigma
	}
	// coarse grid in ln δ_G over (δ·1e-6, δ), then golden section around the best
	lo, hi := math.Log(p.Delta)-math.Log(1e6), math.Log(p.Delta)+math.Log1p(-1e-6)
	const steps = 48
	best, bestT := lo, math.Inf(1)
	for i := 0; i <= steps; i++ {
		x := lo + (hi-lo)*float64(i)/steps
		if t, _ := thr(x); t < bestT {
			best, bestT = x, t
		}
	}
	if math.IsInf(bestT, 1) {
		return nil, fmt.Errorf("policy dp-gsu: no threshold reaches δ=%v at ε=%v, m=%d", p.Delta, p.Epsilon, m)
	}
	step := (hi - lo) / steps
	a, b := math.Max(lo, best-step), math.Min(hi, best+step)
	g := (math.Sqrt(5) - 1) / 2
	c, d := b-g*(b-a), a+g*(b-a)
	tc, _ := thr(c)
	td, _ := thr(d)
	for range 40 {
		if tc < td {
			b, d, td = d, c, tc
			c = b - g*(b-a)
			tc, _ = thr(c)
		} else {
			a, c, tc = c, d, td
			d = a + g*(b-a)
			td, _ = thr(d)
		}
	}
	for _, x := range []float64{c, d} {
		if t, _ := thr(x); t < bestT {
			best, bestT = x, t
		}
	}
	t, sigma := thr(best)
	achieved, lifted := GaussianSetUnionWorstDelta(m, ks, sigma, t, p.Epsilon)
	return &Policy{Params: p, ShamirK: ks, Threshold: t, B: sigma, BA: sigma,
		NoiseDelta: math.Exp(best), WorstLifted: lifted,
		AchievedEpsilon: p.Epsilon, AchievedDelta: achieved}, nil
}

// Gaussian returns x + N(0, σ²) drawn by the google/differential-privacy
// library's secure Gaussian sampler (binomial sampling on a grid, crypto
// randomness) with L0 = m, L∞ = 1 at (ε, noiseDelta): σ =
// noise.SigmaForGaussian(m, 1, ε, noiseDelta), which is what
// newGaussianSetUnion calibrated. Errors come from the library (invalid
// parameters) only.
func Gaussian(x float64, m int, eps, noiseDelta float64) (float64, error) {
	v, err := noise.Gaussian().AddNoiseFloat64(x, int64(m), 1, eps, noiseDelta)
	if err != nil {
		return 0, fmt.Errorf("policy: Gaussian noise for m=%d, ε=%v, δ_G=%v: %w", m, eps, noiseDelta, err)
	}
	return v, nil
}
