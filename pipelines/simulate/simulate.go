// Package simulate is CrowdLogging §4 as a tool (`crowdlog simulate`): for
// one application and every release policy it computes, straight from a
// raw log and without any cryptography, the fraction of impressions and of
// distinct artifacts that would be released as the threshold k grows
// (1..160 in the paper's Figure 3), and writes CSV and SVG plots.
//
// Semantics, per threshold k (the x-axis of Figure 3):
//   - ft-a: artifacts with ≥ k instances; impressions = their instances.
//   - ft-u: artifacts with ≥ k distinct users; impressions = their instances.
//   - dp-a: d = the largest d whose CrowdLogging threshold
//     k_a = d(1 − ln(2δ/d)/ε) is ≤ k (§4: "we used the largest d possible
//     for each value of k"); each user keeps its d most recent artifact
//     instances; artifacts with ≥ k kept instances are released.
//   - dp-u: the same with k_u = 1 − d·ln(2δ/d)/ε, each user's d most recent
//     distinct artifacts, ≥ k distinct users.
//   - zealous: m = the largest m whose τ' (Götz et al. Theorem 3 with
//     λ = 2m/ε, τ = max(1, round(λ))) is ≤ k; each user's m most recent
//     distinct artifacts, ≥ k distinct users.
//
// DP releases are simulated without noise, as the paper does: an artifact
// counts as released when its count reaches the threshold (the noisy
// pipeline releases it with probability ≥ 1/2 then). Fractions are of the
// whole log's impressions and distinct artifacts. The per-user limit is the
// same as the clients' (ingest.LimitArtifacts: most recent by Artifact.Time,
// ties by log order).
//
// Beside Figure 3, Result.DP holds the DP policies with their noise: for
// each d (m) in {1, 2, 3, 5, 10, 20} the policy resolved by release/policy
// at (ε, δ), and the expected number of released artifacts and share of
// impressions in closed form (Laplace CDF, Shamir pre-threshold applied as
// Policy.Decide applies it), next to Google's dpagg.PreAggSelectPartition
// on the same users' m most recent distinct artifacts (dp.go).
package simulate

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/release/policy"
)

// Options configure a simulation. Zero fields take the defaults.
type Options struct {
	Input      string       // AOL TSV log, plain or .gz
	App        string       // application; default "query"
	AppOptions apps.Options // as for `crowdlog run`
	MaxK       int          // thresholds 1..MaxK; default 160 (Figure 3)
	Epsilon    float64      // default ln 10 (CrowdLogging §4, after Korolova et al.)
	Delta      float64      // default 1/(U+1) (CrowdLogging §4)
	MaxUsers   int          // only the first MaxUsers AnonIDs (0 = all)
	// DP configures the expected-release comparison of the DP policies
	// with Google's partition selection (Result.DP, dp.go).
	DP DPOptions
}

// Point is one policy at one threshold.
type Point struct {
	Policy policy.Kind
	K      int
	// Param is d (dp-a, dp-u) or m (zealous) used at K; 0 when no d fits
	// (nothing released) and for FT policies.
	Param          int
	Artifacts      int     // distinct artifacts released
	Impressions    int64   // impressions released (reports sent for them)
	ArtifactFrac   float64 // Artifacts / Result.Artifacts
	ImpressionFrac float64 // Impressions / Result.Impressions
}

// Result is a whole simulation.
type Result struct {
	App         string
	Users       int
	Impressions int64 // artifact instances in the log
	Artifacts   int   // distinct artifacts in the log
	Epsilon     float64
	Delta       float64
	Points      []Point // per policy (policy.Kinds order), k = 1..MaxK
	// DP is the expected release of dp-a, dp-u and zealous at every d (m)
	// of Options.DP.Params, with the noise, beside Google's
	// PreAggSelectPartition at the same (ε, δ) (written as APP-dp.csv).
	DP *DPResult
}

// Run reads the log and simulates every policy. Errors: unreadable log,
// unknown application, invalid ε/δ.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.App == "" {
		o.App = "query"
	}
	if o.MaxK <= 0 {
		o.MaxK = 160
	}
	if o.Epsilon == 0 {
		o.Epsilon = math.Ln10
	}
	if !(o.Epsilon > 0) || math.IsInf(o.Epsilon, 0) {
		return nil, fmt.Errorf("simulate: epsilon %v must be > 0", o.Epsilon)
	}
	app, err := apps.LookupWith(o.App, o.AppOptions)
	if err != nil {
		return nil, err
	}
	ids := map[string]int32{}
	var users [][]int32 // per user, artifact ids in time order
	stop := fmt.Errorf("enough users")
	_, err = aol.ReadUsers(o.Input, func(u aol.User) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if o.MaxUsers > 0 && len(users) == o.MaxUsers {
			return stop
		}
		users = append(users, intern(ids, app.Mine(u.Records)))
		return nil
	})
	if err != nil && err != stop {
		return nil, fmt.Errorf("simulate: read %s: %w", o.Input, err)
	}
	return simulate(users, len(ids), o)
}

// intern returns one user's artifacts (arts, in log order; reordered in
// place) as ids in time order with log-order ties, exactly as
// ingest.LimitArtifacts ranks "most recent"; ids maps Primary to id and
// grows with new artifacts.
func intern(ids map[string]int32, arts []apps.Artifact) []int32 {
	sort.SliceStable(arts, func(i, j int) bool { return arts[i].Time.Before(arts[j].Time) })
	seq := make([]int32, len(arts))
	for i, a := range arts {
		id, ok := ids[a.Primary]
		if !ok {
			id = int32(len(ids))
			ids[a.Primary] = id
		}
		seq[i] = id
	}
	return seq
}

// simulate works on interned artifact ids: users[u] lists user u's
// artifacts in log (time) order, n distinct artifacts in all.
func simulate(users [][]int32, n int, o Options) (*Result, error) {
	U := len(users)
	r := &Result{App: o.App, Users: U, Artifacts: n, Epsilon: o.Epsilon, Delta: o.Delta}
	if U == 0 {
		return nil, fmt.Errorf("simulate: %s has no users", o.Input)
	}
	if r.Delta == 0 {
		r.Delta = 1 / float64(U+1)
	}
	if !(r.Delta > 0) || r.Delta >= 1/float64(U) {
		return nil, fmt.Errorf("simulate: delta %v must be in (0, 1/U) for U=%d", r.Delta, U)
	}
	inst := make([]int64, n)
	dist := make([]int64, n)
	last := make([]int32, n)
	for i := range last {
		last[i] = -1
	}
	for u, seq := range users {
		r.Impressions += int64(len(seq))
		for _, a := range seq {
			inst[a]++
			if last[a] != int32(u) {
				last[a] = int32(u)
				dist[a]++
			}
		}
	}
	// FT: released set by the count that decides, impressions = instances
	r.Points = append(r.Points, ftPoints(policy.FTa, inst, inst, o.MaxK, r)...)
	r.Points = append(r.Points, ftPoints(policy.FTu, dist, inst, o.MaxK, r)...)

	// DP: for each k the largest d; counts of the d-limited data
	thresholdDP := func(kind policy.Kind, d int) float64 { return policy.PaperThreshold(kind, r.Epsilon, r.Delta, d) }
	thresholdZ := func(_ policy.Kind, m int) float64 {
		lambda := 2 * float64(m) / r.Epsilon
		tau := max(1, int(math.Round(lambda)))
		return policy.ZealousTau2(lambda, tau, U, m, r.Delta)
	}
	for _, c := range []struct {
		kind      policy.Kind
		threshold func(policy.Kind, int) float64
		distinct  bool
	}{{policy.DPa, thresholdDP, false}, {policy.DPu, thresholdDP, true}, {policy.Zealous, thresholdZ, true}} {
		cache := map[int][]int64{}
		for k := 1; k <= o.MaxK; k++ {
			d := 0
			for d+1 <= 1<<20 && c.threshold(c.kind, d+1) <= float64(k) {
				d++
			}
			p := Point{Policy: c.kind, K: k, Param: d}
			if d > 0 {
				counts, ok := cache[d]
				if !ok {
					counts = limitedCounts(users, n, d, c.distinct)
					cache[d] = counts
				}
				for _, x := range counts {
					if x >= int64(k) {
						p.Artifacts++
						p.Impressions += x
					}
				}
			}
			r.Points = append(r.Points, r.fractions(p))
		}
	}
	r.DP = expectDP(users, n, inst, r.Impressions, r.Epsilon, r.Delta, r.App, o.DP)
	return r, nil
}

func ftPoints(kind policy.Kind, decide, inst []int64, maxK int, r *Result) []Point {
	out := make([]Point, 0, maxK)
	for k := 1; k <= maxK; k++ {
		p := Point{Policy: kind, K: k}
		for a, c := range decide {
			if c >= int64(k) {
				p.Artifacts++
				p.Impressions += inst[a]
			}
		}
		out = append(out, r.fractions(p))
	}
	return out
}

func (r *Result) fractions(p Point) Point {
	if r.Artifacts > 0 {
		p.ArtifactFrac = float64(p.Artifacts) / float64(r.Artifacts)
	}
	if r.Impressions > 0 {
		p.ImpressionFrac = float64(p.Impressions) / float64(r.Impressions)
	}
	return p
}

// limitedCounts counts, per artifact, the reports sent when every user
// keeps its d most recent artifacts (distinct: d distinct ones, one report
// each, so the count is distinct users). Users' sequences are in time
// order already; ties keep log order, as ingest.LimitArtifacts does.
func limitedCounts(users [][]int32, n, d int, distinct bool) []int64 {
	counts := make([]int64, n)
	seen := map[int32]bool{}
	for _, seq := range users {
		clear(seen)
		kept := 0
		for j := len(seq) - 1; j >= 0 && kept < d; j-- {
			a := seq[j]
			if distinct {
				if seen[a] {
					continue
				}
				seen[a] = true
			}
			counts[a]++
			kept++
		}
	}
	return counts
}

// frequentCounts is the client rule of dp-su and dp-gsu
// (ingest.LimitFrequent) on every user: per artifact id, how many users
// chose it among the limit most frequent of their window most recent
// distinct artifacts, ties to the more recent. users[u] is in time order
// already; ties keep log order, as ingest.LimitFrequent does.
func frequentCounts(users [][]int32, n, limit, window int) []int64 {
	counts := make([]int64, n)
	freq := map[int32]int{}
	type cand struct {
		a int32
		f int
	}
	var cands []cand
	for _, seq := range users {
		clear(freq)
		for _, a := range seq {
			freq[a]++
		}
		cands = cands[:0] // most recent first
		for j := len(seq) - 1; j >= 0 && len(cands) < window; j-- {
			a := seq[j]
			f := freq[a]
			if f < 0 {
				continue // seen: marked below
			}
			cands = append(cands, cand{a, f})
			freq[a] = -1
		}
		sort.SliceStable(cands, func(x, y int) bool { return cands[x].f > cands[y].f })
		for _, c := range cands[:min(limit, len(cands))] {
			counts[c.a]++
		}
	}
	return counts
}

// At returns the point of kind at threshold k (false when absent).
func (r *Result) At(kind policy.Kind, k int) (Point, bool) {
	for _, p := range r.Points {
		if p.Policy == kind && p.K == k {
			return p, true
		}
	}
	return Point{}, false
}

// CSVHeader is the header line of WriteCSV.
const CSVHeader = "app,policy,k,param,artifacts,artifact_fraction,impressions,impression_fraction"

// WriteCSV writes one line per point after CSVHeader.
func (r *Result) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"app", "policy", "k", "param", "artifacts", "artifact_fraction", "impressions", "impression_fraction"})
	for _, p := range r.Points {
		cw.Write([]string{r.App, string(p.Policy), strconv.Itoa(p.K), strconv.Itoa(p.Param), strconv.Itoa(p.Artifacts),
			strconv.FormatFloat(p.ArtifactFrac, 'g', 6, 64), strconv.FormatInt(p.Impressions, 10),
			strconv.FormatFloat(p.ImpressionFrac, 'g', 6, 64)})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("simulate: write CSV: %w", err)
	}
	return nil
}
