package simulate

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/google/differential-privacy/go/v3/noise"

	"github.com/crowdlog/crowdlog/release/policy"
)

// GooglePreAgg is the policy column of the baseline rows: the
// google/differential-privacy library's dpagg.PreAggSelectPartition, each
// user contributing its m most recent distinct artifacts.
const GooglePreAgg = "google-preagg"

// CrowdlogDP are crowdlog's DP policies, in the order of the rows.
var CrowdlogDP = []policy.Kind{policy.DPa, policy.DPu, policy.Zealous, policy.DPSU, policy.DPGSU}

// DefaultDPParams are the d (dp-a, dp-u), m (zealous, google-preagg) that
// the expected-release comparison evaluates.
var DefaultDPParams = []int{1, 2, 3, 5, 10, 20}

// DefaultGSUParams are the m of dp-gsu's rows (its own list: dp-gsu is
// built for many contributions per user).
var DefaultGSUParams = []int{5, 10, 20, 50}

// Selection strategies named in DPRow.Selection.
const (
	// SelectLaplace: the noisy count users (reports) + Laplace noise
	// passes a threshold (dp-a, dp-u, zealous, dp-su).
	SelectLaplace = "laplace-threshold"
	// SelectGaussianTight: users + Gaussian noise passes a threshold
	// calibrated with the exact Gaussian δ and the Shamir crossing term,
	// worst case over crossing artifacts (dp-gsu).
	SelectGaussianTight = "gaussian-threshold-tight"
	// SelectMagic: the library's optimal partition selection for m ≤ 3
	// (Desfontaines et al., PoPETs 2022), at (ε/m, δ/m) per partition.
	SelectMagic = "magic-partition"
	// SelectGaussianSplit: the library's Gaussian thresholding for m > 3,
	// noise at (ε, δ/2), threshold at δ/2.
	SelectGaussianSplit = "gaussian-threshold-split"
)

// DPOptions configure the expected-release comparison (ExpectDP). Zero
// fields take the defaults; ε and δ come from Options.
type DPOptions struct {
	// Params are the d / m values; nil means DefaultDPParams.
	Params []int
	// GSUParams are dp-gsu's m values; nil means DefaultGSUParams.
	GSUParams []int
	// CountShare, Slack and ShamirK are passed to policy.New for every DP
	// policy and parameter (0 = the policy's defaults, docs/policies.md).
	CountShare float64
	Slack      float64
	ShamirK    int
}

// DPRow is one policy at one parameter: the expectation, over the release
// noise, of what the real release would publish.
type DPRow struct {
	// Policy is "dp-a", "dp-u", "zealous", "dp-su", "dp-gsu" or
	// GooglePreAgg.
	Policy string
	// Param is d (dp-a, dp-u; dp-su: the candidate window) or m (zealous,
	// dp-gsu, google-preagg).
	Param int
	// Selection is the selection strategy of the row: SelectLaplace,
	// SelectGaussianTight, or for google-preagg the one the library uses
	// at this m (SelectMagic for m ≤ 3, SelectGaussianSplit above).
	Selection string
	// Epsilon and Delta are the (ε, δ) asked for (the same for every row).
	Epsilon, Delta float64
	// ExpectedReleased is Σ over artifacts of P(released).
	ExpectedReleased float64
	// ExpectedImpressionShare is Σ P(released)·impressions / the log's
	// impressions, with an artifact's impressions all its instances in the
	// log (not only the reports its users sent).
	ExpectedImpressionShare float64
	// ShamirK and Threshold are the resolved policy's (crowdlog rows; for
	// google-preagg Threshold is the Gaussian threshold when m > 3, else 0).
	ShamirK   int
	Threshold float64
	// Err is why policy.New refused this parameter ("" = none); the
	// expectations are 0 then.
	Err string
}

// DPResult is the expected-release comparison of one log.
type DPResult struct {
	App            string
	Users          int
	Impressions    int64
	Artifacts      int
	Epsilon, Delta float64
	// Rows: dp-a, dp-u, zealous, dp-su over Params, dp-gsu over
	// GSUParams, google-preagg over Params, each in order.
	Rows []DPRow
}

// expectDP computes every row. users[u] is user u's artifact ids in time
// order (ties in log order), n the number of distinct artifacts, inst the
// instances per artifact.
func expectDP(users [][]int32, n int, inst []int64, total int64, eps, delta float64, app string, o DPOptions) *DPResult {
	params := o.Params
	if len(params) == 0 {
		params = DefaultDPParams
	}
	gsu := o.GSUParams
	if len(gsu) == 0 {
		gsu = DefaultGSUParams
	}
	r := &DPResult{App: app, Users: len(users), Impressions: total, Artifacts: n, Epsilon: eps, Delta: delta}
	for _, kind := range CrowdlogDP {
		ps, sel := params, SelectLaplace
		if kind == policy.DPGSU {
			ps, sel = gsu, SelectGaussianTight
		}
		for _, d := range ps {
			row := DPRow{Policy: string(kind), Param: d, Epsilon: eps, Delta: delta, Selection: sel}
			pol, err := policy.New(policy.Params{Kind: kind, Epsilon: eps, Delta: delta, D: d, Users: len(users),
				CountShare: o.CountShare, Slack: o.Slack, ShamirK: o.ShamirK})
			if err != nil {
				row.Err = err.Error()
				r.Rows = append(r.Rows, row)
				continue
			}
			row.ShamirK, row.Threshold = pol.ShamirK, pol.Threshold
			limit, distinct := pol.Limit() // what the clients send: ingest.LimitArtifacts(arts, limit, distinct)
			counts := limitedCounts(users, n, limit, distinct)
			if w := pol.Window(); w > 0 { // dp-su, dp-gsu: ingest.LimitFrequent(arts, limit, w)
				counts = frequentCounts(users, n, limit, w)
			}
			row.ExpectedReleased, row.ExpectedImpressionShare = expectation(counts, inst, total,
				func(c int64) float64 { return ReleaseProbability(pol, c) })
			r.Rows = append(r.Rows, row)
		}
	}
	for _, m := range params {
		row := DPRow{Policy: GooglePreAgg, Param: m, Epsilon: eps, Delta: delta, Selection: GoogleSelection(m)}
		keep, thr, err := GoogleKeepProbabilities(eps, delta, m)
		if err != nil {
			row.Err = err.Error()
			r.Rows = append(r.Rows, row)
			continue
		}
		row.Threshold = thr
		row.ExpectedReleased, row.ExpectedImpressionShare = expectation(limitedCounts(users, n, m, true), inst, total, keep)
		r.Rows = append(r.Rows, row)
	}
	return r
}

// expectation sums the release probabilities p(count) of every artifact
// and the impressions they cover, as a share of total.
func expectation(counts, inst []int64, total int64, p func(int64) float64) (released, share float64) {
	cache := map[int64]float64{}
	var imp float64
	for a, c := range counts {
		if c == 0 {
			continue
		}
		q, ok := cache[c]
		if !ok {
			q = p(c)
			cache[c] = q
		}
		released += q
		imp += q * float64(inst[a])
	}
	if total > 0 {
		share = imp / float64(total)
	}
	return released, share
}

// GoogleSelection names the selection strategy that
// dpagg.PreAggSelectPartition uses for MaxPartitionsContributed m:
// SelectMagic for m ≤ 3, SelectGaussianSplit above.
func GoogleSelection(m int) string {
	if m <= 3 {
		return SelectMagic
	}
	return SelectGaussianSplit
}

// ReleaseProbability is the probability that pol.Decide releases an
// artifact whose decisive count (reports for DP_a, distinct users for
// DP_u, ZEALOUS, dp-su and dp-gsu) is count: 0 below the Shamir threshold
// (never decrypted), else P(count + Lap(b) > T) from the Laplace CDF,
// ½·e^{−(T−count)/b} when count ≤ T and 1 − ½·e^{−(count−T)/b} above
// (≥ T for ZEALOUS: the same, the noise being continuous); dp-gsu
// P(count + N(0, σ²) > T) = ½·erfc((T − count)/(σ√2)), σ = pol.B. The
// library samples both on a grid finer than the scale/2^40, which this
// ignores. FT policies: 1 at or above K, else 0.
func ReleaseProbability(pol *policy.Policy, count int64) float64 {
	c := float64(count)
	if c < float64(pol.ShamirK) {
		return 0
	}
	if !pol.Kind.IsDP() {
		return 1
	}
	if pol.Kind == policy.DPGSU {
		return policy.GaussianSetUnionCrossing(int(count), pol.B, pol.Threshold)
	}
	x := (c - pol.Threshold) / pol.B
	if x <= 0 {
		return 0.5 * math.Exp(x)
	}
	return 1 - 0.5*math.Exp(-x)
}

// GoogleKeepProbabilities returns, for dpagg.PreAggSelectPartition with
// (eps, delta) and MaxPartitionsContributed m (no pre-threshold), the
// probability keep(n) that a partition with n privacy units is kept, and
// the Gaussian threshold (0 when m ≤ 3). The library keeps its own
// probability function unexported, so this follows its documented
// algorithms (dpagg/select_partition.go, v3.0.0):
//
//   - m ≤ 3 (Desfontaines et al., PoPETs 2022, "magic partition
//     selection"): pε = ε/m, pδ = δ/m, keep(0) = 0,
//     keep(n) = min(keep(n−1)·e^{pε} + pδ, 1 − e^{−pε}·(1 − keep(n−1) − pδ), 1).
//   - m > 3: a Count with Gaussian noise at (ε, δ/2), σ =
//     noise.SigmaForGaussian(m, 1, ε, δ/2), kept when the integer noisy
//     count n + round(N(0, σ²)) reaches ⌈T⌉, T = noise.Gaussian().Threshold(m,
//     1, ε, δ/2, δ/2): keep(n) = P(N(0, σ²) ≥ ⌈T⌉ − n − ½). (The library
//     samples a binomial approximation of the Gaussian; the difference is
//     far below the statistical tolerance of the tests.)
//
// Errors: invalid (ε, δ, m), as the library reports them.
func GoogleKeepProbabilities(eps, delta float64, m int) (keep func(n int64) float64, threshold float64, err error) {
	if !(eps > 0) || math.IsInf(eps, 0) || !(delta > 0 && delta < 1) || m < 1 {
		return nil, 0, fmt.Errorf("simulate: google-preagg needs ε > 0, 0 < δ < 1 and m ≥ 1, got ε=%v δ=%v m=%d", eps, delta, m)
	}
	if m > 3 {
		t, err := noise.Gaussian().Threshold(int64(m), 1, eps, delta/2, delta/2)
		if err != nil {
			return nil, 0, fmt.Errorf("simulate: google-preagg threshold: %w", err)
		}
		sigma := noise.SigmaForGaussian(int64(m), 1, eps, delta/2)
		ct := math.Ceil(t)
		return func(n int64) float64 {
			if n <= 0 {
				return 0
			}
			return 0.5 * math.Erfc((ct-float64(n)-0.5)/(sigma*math.Sqrt2))
		}, t, nil
	}
	pe, pd := eps/float64(m), delta/float64(m)
	probs := []float64{0}
	return func(n int64) float64 {
		if n <= 0 {
			return 0
		}
		for int64(len(probs)) <= n {
			prev := probs[len(probs)-1]
			if prev >= 1 {
				return 1
			}
			probs = append(probs, math.Min(math.Min(prev*math.Exp(pe)+pd, 1-math.Exp(-pe)*(1-prev-pd)), 1))
		}
		return probs[n]
	}, 0, nil
}

// Best returns the row of policy with the largest ExpectedReleased (false
// when the policy has no valid row).
func (r *DPResult) Best(policy string) (DPRow, bool) {
	var best DPRow
	found := false
	for _, row := range r.Rows {
		if row.Policy == policy && row.Err == "" && (!found || row.ExpectedReleased > best.ExpectedReleased) {
			best, found = row, true
		}
	}
	return best, found
}

// DPCSVHeader is the header line of DPResult.WriteCSV.
const DPCSVHeader = "policy,param,epsilon,delta,expected_released,expected_impression_share,selection"

// WriteCSV writes one line per row after DPCSVHeader (rows whose parameters
// the policy refused have empty expectations).
func (r *DPResult) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"policy", "param", "epsilon", "delta", "expected_released", "expected_impression_share", "selection"})
	for _, row := range r.Rows {
		rel, share := strconv.FormatFloat(row.ExpectedReleased, 'g', 8, 64), strconv.FormatFloat(row.ExpectedImpressionShare, 'g', 8, 64)
		if row.Err != "" {
			rel, share = "", ""
		}
		cw.Write([]string{row.Policy, strconv.Itoa(row.Param), strconv.FormatFloat(row.Epsilon, 'g', 10, 64),
			strconv.FormatFloat(row.Delta, 'g', 10, 64), rel, share, row.Selection})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("simulate: write DP CSV: %w", err)
	}
	return nil
}

// WriteSummary prints the rows as a table, then each policy's best row and
// the ratio of crowdlog's best to Google's best.
func (r *DPResult) WriteSummary(w io.Writer) error {
	fmt.Fprintf(w, "expected DP release: app %s, %d users, ε=%.4g δ=%.4g (closed form over the release noise)\n",
		r.App, r.Users, r.Epsilon, r.Delta)
	fmt.Fprintln(w, "policy          param  shamir_k  threshold  expected_released  impression_share  selection")
	for _, row := range r.Rows {
		if row.Err != "" {
			fmt.Fprintf(w, "%-15s %5d  refused: %s\n", row.Policy, row.Param, row.Err)
			continue
		}
		fmt.Fprintf(w, "%-15s %5d  %8d  %9.3f  %17.3f  %16.5f  %s\n", row.Policy, row.Param, row.ShamirK, row.Threshold,
			row.ExpectedReleased, row.ExpectedImpressionShare, row.Selection)
	}
	var ours DPRow
	found := false
	for _, p := range CrowdlogDP {
		if b, ok := r.Best(string(p)); ok && (!found || b.ExpectedReleased > ours.ExpectedReleased) {
			ours, found = b, true
		}
	}
	g, gok := r.Best(GooglePreAgg)
	if found && gok {
		ratio := math.Inf(1)
		if g.ExpectedReleased > 0 {
			ratio = ours.ExpectedReleased / g.ExpectedReleased
		}
		_, err := fmt.Fprintf(w, "best crowdlog: %s %d = %.3f; best google-preagg: m=%d = %.3f; ratio %.3f\n",
			ours.Policy, ours.Param, ours.ExpectedReleased, g.Param, g.ExpectedReleased, ratio)
		return err
	}
	return nil
}

// policies returns the row policies in first-seen order.
func (r *DPResult) policies() []string {
	seen := map[string]bool{}
	var out []string
	for _, row := range r.Rows {
		if !seen[row.Policy] {
			seen[row.Policy] = true
			out = append(out, row.Policy)
		}
	}
	return out
}
