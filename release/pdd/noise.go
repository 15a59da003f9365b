package pdd

import (
	"fmt"
	"math"

	"github.com/google/differential-privacy/go/v3/noise"

	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/release"
)

// DefaultMaxCount is the default per-client per-keyword per-day clip, the
// sensitivity of the Laplace noise. A client counts each query instance
// once per keyword (ingest/keywords), so the clip is the number of a
// client's query instances in one day that contain the keyword; PDD §4.1's
// users make 1.3 ± 0.9 searches per active day, and 10 keeps almost every
// real count intact while bounding what one client can add.
const DefaultMaxCount = 10

// Noisy returns counts with Laplace noise added to every entry (PDD
// release with differential privacy per (day, keyword)): entry ℓ becomes
// counts[ℓ] + Lap(maxCount/ε), drawn by google/differential-privacy's
// secure integer Laplace mechanism (AddNoiseInt64 with L0 = 1, L∞ =
// maxCount: a two-sided geometric distribution, crypto randomness; never
// hand-rolled float sampling). Every entry is noised, zero or not, so the
// set of released keywords does not reveal which ones nobody searched.
// Results may be negative and are not clamped (clamping biases sums).
//
// Guarantee: if every client clips each keyword's daily count at maxCount,
// the count of one (day, keyword) is ε-DP with respect to one client; a
// client who searched k keywords on a day is protected at k·ε for that
// day (basic composition), and over days the ε's add up.
//
// Errors: ε not finite and > 0, maxCount < 1, or a count above 2^63−1.
func Noisy(counts []uint64, epsilon float64, maxCount int64) ([]int64, error) {
	if !(epsilon > 0) || math.IsInf(epsilon, 0) {
		return nil, fmt.Errorf("pdd: epsilon %v must be a finite number > 0 (0 = exact counts)", epsilon)
	}
	if maxCount < 1 {
		return nil, fmt.Errorf("pdd: max count %d must be ≥ 1 (the clients' per-keyword daily clip; default %d)", maxCount, DefaultMaxCount)
	}
	out := make([]int64, len(counts))
	lap := noise.Laplace()
	for i, c := range counts {
		if c > math.MaxInt64 {
			return nil, fmt.Errorf("pdd: count %d of keyword %d exceeds 2^63−1 (a corrupt sum)", c, i)
		}
		v, err := lap.AddNoiseInt64(int64(c), 1, maxCount, epsilon, 0)
		if err != nil {
			return nil, fmt.Errorf("pdd: Laplace noise (epsilon %v, sensitivity %d): %w", epsilon, maxCount, err)
		}
		out[i] = v
	}
	return out, nil
}

// DaySpend is the privacy-ledger row of the noisy day row (row.Epsilon > 0,
// made by Release from a keyword list of length keywords) on the budget of
// (dataset, row.Day): key release.PDDLedgerKey(row.Campaign, row.Day),
// ε = keywords × row.Epsilon, δ = 0 (pure Laplace).
//
// Why keywords × ε and not ε: the ledger records, per release, the
// guarantee every contributor gets (the threshold mode records its
// policies' achieved ε for a user sending all d artifacts). Every one of
// the L counts of a day is released with its own Lap(MaxCount/ε), and a
// client's vector may have all L entries non-zero (nothing bounds the
// keywords a client counts in a day, only each one's count), so the day is
// (L·ε, 0)-DP for one client: the k·ε of Noisy's doc with k = L. A client
// who searched fewer keywords is better protected than the ledger says,
// never worse. Params records the per-keyword ε, L and the clip.
func DaySpend(dataset string, row release.PDDRound, keywords int) release.Spend {
	key := release.PDDLedgerKey(row.Campaign, row.Day)
	return release.Spend{Dataset: dataset, Epoch: key.Epoch, App: key.App, Policy: key.Policy, K: key.K,
		Epsilon: float64(keywords) * row.Epsilon,
		Params:  fmt.Sprintf("mechanism=laplace keywords=%d epsilon_per_keyword=%g max_count=%d", keywords, row.Epsilon, row.MaxCount)}
}

// Release turns a complete round into the day to write: keyword names from
// list (Counts[ℓ] is list.Words[ℓ]), exact counts when epsilon = 0, noisy
// counts (Noisy) when epsilon > 0, recorded with epsilon and maxCount.
// Zero counts are left out. Errors: a round
// whose Counts length is not list.Len(), an exact count above 2^63−1, and
// those of Noisy.
func Release(r Round, list *keywords.List, epsilon float64, maxCount int64) (release.PDDRound, error) {
	if len(r.Counts) != list.Len() {
		return release.PDDRound{}, fmt.Errorf("pdd: round %s/%s has %d counts for a list of %d keywords", r.Campaign, r.Day, len(r.Counts), list.Len())
	}
	out := roundRow(r)
	var vals []int64
	if epsilon == 0 {
		vals = make([]int64, len(r.Counts))
		for i, c := range r.Counts {
			if c > math.MaxInt64 {
				return release.PDDRound{}, fmt.Errorf("pdd: round %s/%s: count %d of %q exceeds 2^63−1 (a corrupt sum)", r.Campaign, r.Day, c, list.Words[i])
			}
			vals[i] = int64(c)
		}
	} else {
		var err error
		if vals, err = Noisy(r.Counts, epsilon, maxCount); err != nil {
			return release.PDDRound{}, err
		}
		out.Epsilon, out.MaxCount = epsilon, uint32(min(maxCount, math.MaxUint32))
	}
	out.Counts = make([]release.KeywordCount, 0, len(vals))
	for i, v := range vals {
		if v != 0 {
			out.Counts = append(out.Counts, release.KeywordCount{Keyword: list.Words[i], Count: v})
		}
	}
	return out, nil
}
