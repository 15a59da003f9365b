package prio3

import (
	"fmt"
	"math"
)

// The noisy rule of a day's status (released, or withheld under the
// minimum batch size), shared by the leader that decides it
// (aggregator/prio3, status.go), the release that charges it to the
// privacy ledger (release/prio3 DaySpend) and `crowdlog pdd`:
//
//	release  iff  n ≥ min  and  n + Lap(1/ε_c) ≥ min + StatusThreshold(ε_c, δ),
//
// (ε_c, δ)-DP in the report count n (one report per person-day).

// DefaultStatusDelta is the default δ of the status (--status-delta): the
// chance that a day of exactly min reports is released though a day of
// min − 1 never is.
const DefaultStatusDelta = 1e-6

// AutoStatusEpsilon is the default --status-epsilon: ε_c =
// StatusEpsilonShare × ε (StatusEpsilonOf).
const AutoStatusEpsilon = -1.0

// StatusEpsilonShare is the share of the aggregators' ε the status gets by
// default: at ε = 1 and δ = 10⁻⁶ the noisy count must pass the minimum
// batch size by StatusThreshold(0.1, 10⁻⁶) = 132, and the ledger charges
// 1.1 per person-day.
const StatusEpsilonShare = 0.1

// StatusEpsilonOf returns ε_c for flag value statusEps and the
// aggregators' noise ε eps: StatusEpsilonShare × eps when statusEps < 0
// (AutoStatusEpsilon; 0 with exact shares), else statusEps.
func StatusEpsilonOf(statusEps, eps float64) float64 {
	if statusEps < 0 {
		return StatusEpsilonShare * eps
	}
	return statusEps
}

// StatusThreshold returns T = ⌈ln(1/(2δ))/ε_c⌉, the margin above the
// minimum batch size a noisy count must reach: P(Lap(1/ε_c) ≥ T) =
// ½·e^(−ε_c·T) ≤ δ. It panics on ε_c ≤ 0 or δ outside (0, ½) (validate
// first: CheckStatus).
func StatusThreshold(epsC, delta float64) uint64 {
	if err := CheckStatus(epsC, delta); err != nil || epsC == 0 {
		panic(fmt.Sprintf("prio3: status threshold of ε_c %v, δ %v", epsC, delta))
	}
	return uint64(math.Ceil(math.Log(1/(2*delta)) / epsC))
}

// CheckStatus validates a status ε_c (finite, ≥ 0; 0 = the exact minimum
// batch rule) and, with ε_c > 0, its δ (0 < δ < ½). Errors wrap ErrConfig.
func CheckStatus(epsC, delta float64) error {
	if math.IsNaN(epsC) || math.IsInf(epsC, 0) || epsC < 0 {
		return fmt.Errorf("%w: status epsilon %v must be finite and ≥ 0 (0 = the exact minimum batch rule)", ErrConfig, epsC)
	}
	if epsC > 0 && !(delta > 0 && delta < 0.5) {
		return fmt.Errorf("%w: status delta %v must be in (0, 0.5) with a status epsilon (default %g)", ErrConfig, delta, DefaultStatusDelta)
	}
	return nil
}
