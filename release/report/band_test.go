package report

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBandHalfWidth: the band holds BandLevel of the noise, checked by
// sampling Laplace draws (inverse CDF) rather than by the formula the
// code solves: one draw of scale 3 (h = 3·ln 20 = 8.99) and the sum of
// two draws of scale 20 (h ≈ 82.3).
func TestBandHalfWidth(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lap := func(b float64) float64 {
		u := rng.Float64() - 0.5
		return -b * math.Copysign(1, u) * math.Log(1-2*math.Abs(u))
	}
	for _, c := range []struct {
		b     float64
		draws int
		want  float64
	}{{3, 1, 3 * math.Log(20)}, {20, 2, 82.26}} {
		h := bandHalfWidth(c.b, c.draws, BandLevel)
		if math.Abs(h-c.want) > 0.01 {
			t.Errorf("b %v, %d draws: h = %v, want %v", c.b, c.draws, h, c.want)
		}
		const n = 400000
		in := 0
		for i := 0; i < n; i++ {
			x := 0.0
			for j := 0; j < c.draws; j++ {
				x += lap(c.b)
			}
			if math.Abs(x) <= h {
				in++
			}
		}
		if got := float64(in) / n; math.Abs(got-BandLevel) > 0.002 {
			t.Errorf("b %v, %d draws: %.4f of the samples inside ± %.2f, want %.2f", c.b, c.draws, got, h, BandLevel)
		}
	}
	if bandHalfWidth(0, 1, BandLevel) != 0 {
		t.Error("exact counts have a band")
	}
}
