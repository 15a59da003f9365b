package prio3

import (
	"bufio"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/tests/truth"
)

// discreteGaussian draws from the discrete Gaussian N_Z(0, σ²) by
// Canonne, Kamath and Steinke's rejection sampler ("The Discrete Gaussian
// for Differential Privacy", NeurIPS 2020, Alg. 1): a discrete Laplace of
// scale t = ⌊σ⌋ + 1, accepted with probability exp(−(|Y| − σ²/t)²/(2σ²)).
// Floating point and math/rand: for measuring error only, not for a
// release.
func discreteGaussian(rng *mrand.Rand, sigma float64) int64 {
	t := math.Floor(sigma) + 1
	q := math.Exp(-1 / t)
	for {
		// two-sided geometric: P(y) ∝ q^|y|
		g := func() int64 { return int64(math.Floor(math.Log(1-rng.Float64()) / math.Log(q))) }
		y := g() - g()
		d := math.Abs(float64(y)) - sigma*sigma/t
		if rng.Float64() < math.Exp(-d*d/(2*sigma*sigma)) {
			return y
		}
	}
}

// rhoFor is the ρ of ρ-zCDP that gives (ε, δ)-DP by Bun & Steinke's
// conversion ε = ρ + 2√(ρ ln(1/δ)) ("Concentrated Differential Privacy",
// TCC 2016, Prop. 1.3), solved for ρ.
func rhoFor(eps, delta float64) float64 {
	l := math.Log(1 / delta)
	r := math.Sqrt(l+eps) - math.Sqrt(l) // √ρ
	return r * r
}

// TestNoiseLaplaceVsGaussian measures the two per-person-day mechanisms
// on the bundled log's first 7 days (1,000 clients, the default
// 10,000-keyword list, counts clipped to 15, each client's day bounded by
// L1 ≤ S = 20: the exact totals written from the raw log by tests/truth):
// the mean relative error of the 100 most searched keywords' daily
// counts, each released total carrying one draw per aggregator, as
// `crowdlog pdd --mode prio3 --epsilon 1` releases them. Laplace: this
// package's draw (scale S/ε, ε-DP per person-day). Discrete Gaussian on
// the L2 bound Δ₂ = √(15² + 5²) (the largest L2 norm of a vector with
// entries ≤ 15 and L1 ≤ 20): σ = Δ₂/√(2ρ) per aggregator for ρ-zCDP, at
// ρ = ε²/2 (the zCDP pure ε implies) and at the ρ that gives (ε, 10⁻⁶)-DP.
func TestNoiseLaplaceVsGaussian(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the bundled log")
	}
	const eps, S, maxCount, days, trials = 1.0, 20, 15, 7, 20
	f, err := os.Open(keywordList)
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.ToLower(strings.TrimSpace(sc.Text()))
		if w != "" && !seen[w] {
			seen[w] = true
			words = append(words, w)
		}
	}
	f.Close()
	dc, err := truth.KeywordClients(bundledLog, 0, keywordList, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var dayList []string
	for d := range dc.Active {
		dayList = append(dayList, d)
	}
	sort.Strings(dayList)
	dayList = dayList[:days]
	exact := dc.ClippedL1(maxCount, S, words, nil)
	total := map[string]int{}
	for _, d := range dayList {
		for w, n := range exact[d] {
			total[w] += n
		}
	}
	var top []string
	for w := range total {
		top = append(top, w)
	}
	sort.Slice(top, func(i, j int) bool {
		if total[top[i]] != total[top[j]] {
			return total[top[i]] > total[top[j]]
		}
		return top[i] < top[j]
	})
	top = top[:100]
	var cells []int
	for _, d := range dayList {
		for _, w := range top {
			if n := exact[d][w]; n > 0 {
				cells = append(cells, n)
			}
		}
	}
	d2 := math.Sqrt(maxCount*maxCount + (S-maxCount)*(S-maxCount))
	rhoPure, rhoApprox := eps*eps/2, rhoFor(eps, 1e-6)
	rng := mrand.New(mrand.NewPCG(5, 46))
	type mech struct {
		name  string
		sd    float64 // analytic std of one released total (two draws)
		draw  func() (int64, error)
		mre   float64
		sq, n float64
	}
	ms := []*mech{
		{name: fmt.Sprintf("Laplace S/ε = %g (ε = %g-DP)", S/eps, eps), sd: math.Sqrt(2 * 2 * (S / eps) * (S / eps)),
			draw: func() (int64, error) { v, err := drawNoise(1, eps, S); return v[0], err }},
		{name: fmt.Sprintf("discrete Gaussian σ = %.1f (ρ = %g-zCDP)", d2/math.Sqrt(2*rhoPure), rhoPure), sd: math.Sqrt(2) * d2 / math.Sqrt(2*rhoPure),
			draw: func() (int64, error) { return discreteGaussian(rng, d2/math.Sqrt(2*rhoPure)), nil }},
		{name: fmt.Sprintf("discrete Gaussian σ = %.1f (ρ = %.4f-zCDP: (ε, 10⁻⁶)-DP)", d2/math.Sqrt(2*rhoApprox), rhoApprox), sd: math.Sqrt(2) * d2 / math.Sqrt(2*rhoApprox),
			draw: func() (int64, error) { return discreteGaussian(rng, d2/math.Sqrt(2*rhoApprox)), nil }},
	}
	var lines []string
	for _, m := range ms {
		var sum float64
		for range trials {
			for _, c := range cells {
				a, err := m.draw()
				if err != nil {
					t.Fatal(err)
				}
				b, err := m.draw()
				if err != nil {
					t.Fatal(err)
				}
				e := float64(a + b)
				sum += math.Abs(e) / float64(c)
				m.sq += e * e
				m.n++
			}
		}
		m.mre = sum / float64(trials*len(cells))
		emp := math.Sqrt(m.sq / m.n)
		if math.Abs(emp-m.sd) > 0.05*m.sd {
			t.Errorf("%s: empirical std %.2f, analytic %.2f", m.name, emp, m.sd)
		}
		lines = append(lines, fmt.Sprintf("%s: total std %.1f (empirical %.1f), MRE %.2f", m.name, m.sd, emp, m.mre))
	}
	mean := 0.0
	for _, c := range cells {
		mean += float64(c)
	}
	fmt.Printf("NOISE top-100 keywords × %d days of the bundled log (%d cells with an exact count > 0, mean %.1f; ε = %g per person-day, S = %d, Δ₂ = %.1f; %d trials): %s\n",
		days, len(cells), mean/float64(len(cells)), eps, S, d2, trials, strings.Join(lines, "; "))
}
