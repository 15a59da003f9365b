package prio3

import (
	"fmt"

	"github.com/google/differential-privacy/go/v3/noise"

	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// A day's status (Config.StatusEpsilon > 0): released or withheld
// below_min_batch.
//
// Which days a release holds is itself a statistic of the report count n.
// Under the exact rule of DAP (release iff n ≥ MinBatchSize) it tells a
// reader of the release D from D' = D plus one person with certainty at
// n = min − 1 against min, and, when a day without reports is absent
// rather than withheld, at 0 against 1. The leader therefore decides the
// status from a noisy count, once per batch:
//
//	release  iff  n ≥ min  and  n + Lap(1/ε_c) ≥ min + T,
//	T = StatusThreshold(ε_c, δ) = ⌈ln(1/(2δ))/ε_c⌉,
//
// and writes a withheld notice for every other day of the campaign's span,
// days without reports included (the service, service.go). The Laplace
// draw is google/differential-privacy's secure Laplace (AddNoiseFloat64,
// L0 = L∞ = 1: scale 1/ε_c, crypto randomness), the library noise.go
// draws the totals' noise with.
//
// Guarantee: (ε_c, δ)-DP for the status with respect to one person's
// report (one report per person-day: the report tokens). For neighbours
// both at or above min the status is post-processing of n + Lap(1/ε_c)
// (the Laplace mechanism on a count of sensitivity 1: Dwork & Roth, "The
// Algorithmic Foundations of Differential Privacy", 2014, Thm. 3.6). At
// min − 1 against min the hard floor makes release impossible at min − 1,
// and at min it happens with probability P(Lap(1/ε_c) ≥ T) = ½·e^(−ε_c·T)
// ≤ δ: the δ of the noisy-threshold (stability-based histogram) argument,
// as in Korolova, Kenthapadi, Mishra and Ntoulas, "Releasing search
// queries and clicks privately" (WWW 2009) and Vadhan, "The Complexity of
// Differential Privacy" (2017), §3, "Releasing stable values" (a
// one-query noisy threshold; cf. the sparse vector technique, Dwork &
// Roth §3.6). Below min − 1 both neighbours are withheld. A day without reports and a day of one report are both
// withheld (min ≥ 1). The hard floor stays: it is also the helper's rule
// (helper.go), which the helper's own count enforces against the leader.
//
// The status is decided once per batch: the service keeps the decision
// ("status_passed" in its done map) until the shares are written, so a
// retry or a restart never draws again. The release charges ε_c and δ on
// the day's ledger row with the totals' ε (release/prio3 DaySpend).

// StatusThreshold is p3.StatusThreshold: T = ⌈ln(1/(2δ))/ε_c⌉.
func StatusThreshold(epsC, delta float64) uint64 { return p3.StatusThreshold(epsC, delta) }

// checkStatus validates Config.StatusEpsilon and StatusDelta.
func checkStatus(epsC, delta float64) error {
	if err := p3.CheckStatus(epsC, delta); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// statusReleases decides whether a closed batch of count reports is
// released: count ≥ cfg.MinBatchSize and, with cfg.StatusEpsilon > 0,
// count + Lap(1/ε_c) ≥ MinBatchSize + StatusThreshold(ε_c, δ) (one fresh
// draw per call: call it once per batch). Errors are the noise library's.
func statusReleases(cfg *Config, count uint64) (bool, error) {
	if count < cfg.MinBatchSize {
		return false, nil
	}
	if cfg.StatusEpsilon == 0 {
		return true, nil
	}
	noisy, err := noise.Laplace().AddNoiseFloat64(float64(count), 1, 1, cfg.StatusEpsilon, 0)
	if err != nil {
		return false, fmt.Errorf("prio3: status noise (ε_c %v): %w", cfg.StatusEpsilon, err)
	}
	return noisy >= float64(cfg.MinBatchSize)+float64(StatusThreshold(cfg.StatusEpsilon, cfg.StatusDelta)), nil
}
