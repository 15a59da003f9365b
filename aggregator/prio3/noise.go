package prio3

import (
	"fmt"
	"math"

	"github.com/google/differential-privacy/go/v3/noise"

	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// Per-aggregator noise (Config.Epsilon > 0).
//
// Each aggregator adds integer Laplace noise of scale S/ε to each of the L
// entries of its aggregate share before sealing it to the collector, in
// the field (p3.FieldOf): entry ℓ of the share becomes share[ℓ] +
// Lap(S/ε), S = Config.Measurement.Sensitivity(), the L1 bound of one
// honest client's whole daily vector (the campaign's L1 for SumVec, which
// the honest client keeps, p3.Config.Clip; the max weight w for presence,
// which the FLP proof enforces). The draw is google/differential-privacy's
// secure integer Laplace (AddNoiseInt64 with L0 = 1, L∞ = S: a two-sided
// geometric of scale S/ε, crypto randomness), as release/pdd's groups mode.
//
// Guarantee: one aggregator's noise alone makes the whole day's vector of
// L totals ε-DP with respect to one person's report (the Laplace
// mechanism on a vector of L1 sensitivity S, Dwork & Roth, "The
// Algorithmic Foundations of Differential Privacy", Thm. 3.6): one ε per
// person-day. The other aggregator's share, its noise or no noise, is
// post-processing, so the release stays ε-DP if either aggregator skips
// its noise, colludes with the collector (hands it its exact share or its
// draw), or — the leader — pads a batch with reports of its own and
// subtracts its own draw: the helper's draw alone carries the guarantee.
// The price is the variance: the released total carries two independent
// draws, 2 × 2(S/ε)² = 4(S/ε)² (twice one central draw's).
//
// Draw once: the noise vector of a batch is drawn the first time the
// aggregator seals the batch's share and is kept in its state (and
// snapshot, state version 2) with the ε it was drawn under; every later
// seal of the batch (a re-collection, a restart) adds the same vector, so
// the collector cannot average fresh draws away. A stored draw wins over a
// changed Config.Epsilon (0 included: an exact share after a noisy one
// would reveal the noise); AggShare.Epsilon carries the draw's ε.

// drawNoise returns n integer Laplace draws of scale delta/epsilon (delta:
// the L1 sensitivity of the whole vector).
func drawNoise(n int, epsilon float64, delta int64) ([]int64, error) {
	lap := noise.Laplace()
	out := make([]int64, n)
	for i := range out {
		v, err := lap.AddNoiseInt64(0, 1, delta, epsilon, 0)
		if err != nil {
			return nil, fmt.Errorf("prio3: Laplace noise (epsilon %v, sensitivity %d): %w", epsilon, delta, err)
		}
		out[i] = v
	}
	return out, nil
}

// checkEpsilon validates Config.Epsilon.
func checkEpsilon(eps float64) error {
	if math.IsNaN(eps) || math.IsInf(eps, 0) || eps < 0 {
		return fmt.Errorf("%w: epsilon %v must be finite and ≥ 0 (0 = no noise)", ErrConfig, eps)
	}
	return nil
}

// noisyAggregate returns b's encoded aggregate share for the collector and
// the ε of its noise: the exact share when the batch has no draw and
// cfg.Epsilon is 0, else the share plus the batch's noise vector, drawn
// now (and kept in b) when the batch has none yet.
func noisyAggregate(cfg *Config, b *batch) ([]byte, float64, error) {
	enc := p3.EncodeAggregate(&b.agg)
	if b.noise == nil && cfg.Epsilon > 0 {
		n, err := drawNoise(cfg.Measurement.Length, cfg.Epsilon, int64(min(cfg.Measurement.Sensitivity(), math.MaxInt64)))
		if err != nil {
			return nil, 0, err
		}
		b.noise, b.noiseEps = n, cfg.Epsilon
	}
	if b.noise == nil {
		return enc, 0, nil
	}
	v, err := p3.DecodeVec(enc, cfg.Measurement.Length)
	if err != nil {
		return nil, 0, err
	}
	if len(b.noise) != len(v) {
		return nil, 0, fmt.Errorf("prio3: stored noise of %d entries for a share of %d", len(b.noise), len(v))
	}
	for i := range v {
		x := p3.FieldOf(b.noise[i])
		v[i].AddAssign(&x)
	}
	return p3.EncodeVec(v), b.noiseEps, nil
}
