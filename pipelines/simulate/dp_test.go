package simulate

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/differential-privacy/go/v3/dpagg"
	"github.com/google/differential-privacy/go/v3/noise"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/release/policy"
)

// madeUpLog is a small made-up log: users' artifacts in log order, drawn
// from a heavy-headed vocabulary ("q0" is the most popular) with times that
// are neither sorted nor distinct, so the recency ranking and its ties
// matter.
func madeUpLog(users int, seed uint64) [][]apps.Artifact {
	rng := rand.New(rand.NewPCG(seed, 7))
	base := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	log := make([][]apps.Artifact, users)
	for u := range log {
		n := 1 + rng.IntN(8)
		for range n {
			q := int(math.Floor(12 * math.Pow(rng.Float64(), 2.5))) // q0 most frequent
			log[u] = append(log[u], apps.Artifact{Primary: fmt.Sprintf("made-up query %d", q),
				Time: base.Add(time.Duration(rng.IntN(6)) * time.Minute)})
		}
	}
	return log
}

// expectFor runs the code under test on log.
func expectFor(t *testing.T, log [][]apps.Artifact, eps, delta float64, params []int) *DPResult {
	t.Helper()
	ids := map[string]int32{}
	var users [][]int32
	var total int64
	for _, arts := range log {
		users = append(users, intern(ids, append([]apps.Artifact(nil), arts...)))
		total += int64(len(arts))
	}
	inst := make([]int64, len(ids))
	for _, seq := range users {
		for _, a := range seq {
			inst[a]++
		}
	}
	return expectDP(users, len(ids), inst, total, eps, delta, "query", DPOptions{Params: params})
}

// sent is the ground truth of what the clients send: per artifact, the
// reports and distinct users after ingest.LimitArtifacts(limit, distinct)
// (window > 0: ingest.LimitFrequent(limit, window), dp-su's rule), and
// every artifact's impressions in the raw log.
func sent(log [][]apps.Artifact, limit int, distinct bool, window int) (reports, users, impressions map[string]uint64, total uint64) {
	reports, users, impressions = map[string]uint64{}, map[string]uint64{}, map[string]uint64{}
	for _, arts := range log {
		for _, a := range arts {
			impressions[a.Primary]++
			total++
		}
		seen := map[string]bool{}
		kept := ingest.LimitArtifacts(append([]apps.Artifact(nil), arts...), limit, distinct)
		if window > 0 {
			kept = ingest.LimitFrequent(append([]apps.Artifact(nil), arts...), limit, window)
		}
		for _, a := range kept {
			reports[a.Primary]++
			if !seen[a.Primary] {
				seen[a.Primary] = true
				users[a.Primary]++
			}
		}
	}
	return reports, users, impressions, total
}

// meanSE returns the mean of xs and its standard error.
func meanSE(xs []float64) (mean, se float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (x - mean) * (x - mean)
	}
	v /= float64(len(xs) - 1)
	return mean, math.Sqrt(v / float64(len(xs)))
}

// within fails unless the closed form got is within 4 standard errors of
// the Monte-Carlo mean, plus 2/len(draws), the standard error being at
// least a Bernoulli(got)'s when got is a probability.
func within(t *testing.T, what string, got float64, draws []float64) {
	t.Helper()
	mean, se := meanSE(draws)
	// under the null hypothesis a draw's variance is the closed form's own
	// (exact for one Bernoulli); it keeps rare events testable: a closed
	// form of 0 must see no release at all
	if got >= 0 && got <= 1 {
		se = math.Max(se, math.Sqrt(got*(1-got)/float64(len(draws))))
	}
	// plus 2 draws' worth for the discreteness of rare events (a normal
	// approximation of 0.4 expected hits is poor): a false alarm is then
	// below 1e-4 per check
	if math.Abs(got-mean) > 4*se+2/float64(len(draws)) {
		t.Errorf("%s: closed form %.4f, Monte Carlo %.4f ± %.4f (%d draws)", what, got, mean, se, len(draws))
	}
}

// TestDPExpectationMatchesMechanism: for dp-a, dp-u, zealous and dp-su at
// d (m, window) = 1, 2, 3 and dp-gsu at m = 5, 10, 20, 50, the closed-form expected release count and impression share
// equal, within 4 standard errors, the mean over 1,000 runs of the real
// mechanism (policy.Decide, the library's Laplace noise) on what the
// clients send (ingest.LimitArtifacts, ingest.LimitFrequent), with impressions counted from the
// raw log. d = 2, 3 have a Shamir threshold ≥ 2 here, so the pre-threshold
// path is covered.
func TestDPExpectationMatchesMechanism(t *testing.T) {
	const U, draws = 60, 1000
	log := madeUpLog(U, 1)
	eps, delta := math.Ln10, 1/float64(U+1)
	params := []int{1, 2, 3}
	r := expectFor(t, log, eps, delta, params)
	shamirAbove1 := 0
	for _, row := range r.Rows {
		if row.Policy == GooglePreAgg {
			continue
		}
		if row.Err != "" {
			t.Fatalf("%s %d refused: %s", row.Policy, row.Param, row.Err)
		}
		pol, err := policy.New(policy.Params{Kind: policy.Kind(row.Policy), Epsilon: eps, Delta: delta, D: row.Param, Users: U})
		if err != nil {
			t.Fatal(err)
		}
		if pol.ShamirK >= 2 {
			shamirAbove1++
		}
		limit, distinct := pol.Limit()
		reports, users, impressions, total := sent(log, limit, distinct, pol.Window())
		released, shares := make([]float64, draws), make([]float64, draws)
		for i := range draws {
			for a, rep := range reports {
				o, err := pol.Decide(rep, users[a])
				if err != nil {
					t.Fatal(err)
				}
				if o.Released {
					released[i]++
					shares[i] += float64(impressions[a]) / float64(total)
				}
			}
		}
		what := fmt.Sprintf("%s %d", row.Policy, row.Param)
		within(t, what+" released", row.ExpectedReleased, released)
		within(t, what+" impression share", row.ExpectedImpressionShare, shares)
		if mean, _ := meanSE(released); mean < 0.2 {
			t.Errorf("%s: the made-up log releases almost nothing (%.3f); the test would check little", what, mean)
		}
	}
	if shamirAbove1 < 3 {
		t.Errorf("only %d policies have a Shamir threshold ≥ 2; the pre-threshold path is not covered", shamirAbove1)
	}
}

// TestGoogleExpectationMatchesLibrary: Google's baseline at m = 1, 2, 3
// (magic partition selection) and 5 (Gaussian thresholding) equals, within
// 4 standard errors, the mean over 1,000 runs of the library's own
// PreAggSelectPartition on each user's m most recent distinct artifacts;
// and for m ≤ 3 the first count kept with probability 1 is the library's
// GetHardThreshold.
func TestGoogleExpectationMatchesLibrary(t *testing.T) {
	const U, draws = 60, 1000
	log := madeUpLog(U, 2)
	eps, delta := math.Ln10, 1/float64(U+1)
	params := []int{1, 2, 3, 5}
	r := expectFor(t, log, eps, delta, params)
	for _, row := range r.Rows {
		if row.Policy != GooglePreAgg {
			continue
		}
		m := row.Param
		opt := dpagg.PreAggSelectPartitionOptions{Epsilon: eps, Delta: delta, MaxPartitionsContributed: int64(m)}
		_, users, impressions, total := sent(log, m, true, 0)
		released, shares := make([]float64, draws), make([]float64, draws)
		for i := range draws {
			for a, n := range users {
				s, err := dpagg.NewPreAggSelectPartition(&opt)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.IncrementBy(int64(n)); err != nil {
					t.Fatal(err)
				}
				keep, err := s.ShouldKeepPartition()
				if err != nil {
					t.Fatal(err)
				}
				if keep {
					released[i]++
					shares[i] += float64(impressions[a]) / float64(total)
				}
			}
		}
		what := fmt.Sprintf("google-preagg m=%d", m)
		within(t, what+" released", row.ExpectedReleased, released)
		within(t, what+" impression share", row.ExpectedImpressionShare, shares)
		if m <= 3 {
			s, _ := dpagg.NewPreAggSelectPartition(&opt)
			hard, err := s.GetHardThreshold()
			if err != nil {
				t.Fatal(err)
			}
			keep, _, err := GoogleKeepProbabilities(eps, delta, m)
			if err != nil {
				t.Fatal(err)
			}
			if keep(int64(hard)) < 1 || keep(int64(hard-1)) >= 1 {
				t.Errorf("%s: keep(%d) = %v, keep(%d) = %v; the library's hard threshold is %d",
					what, hard-1, keep(int64(hard-1)), hard, keep(int64(hard)), hard)
			}
		}
	}
}

// TestDPFiles: WriteFiles writes APP-dp.csv with the documented header and
// one row per (policy, param), and the plot.
func TestDPFiles(t *testing.T) {
	r := expectFor(t, madeUpLog(30, 3), math.Ln10, 1/31.0, DefaultDPParams)
	dir := t.TempDir()
	csvPath, plots, err := WriteFiles(dir, "query-dp.csv", "svg", r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if n := 1 + len(CrowdlogDP)*len(DefaultDPParams) + len(DefaultGSUParams); lines[0] != DPCSVHeader || len(lines) != n {
		t.Fatalf("CSV header %q and %d lines, want %q and %d", lines[0], len(lines), DPCSVHeader, n)
	}
	if !strings.HasPrefix(lines[len(lines)-1], "google-preagg,20,") || !strings.HasSuffix(lines[len(lines)-1], ","+SelectGaussianSplit) {
		t.Errorf("last row %q, want google-preagg m=20 with Gaussian selection", lines[len(lines)-1])
	}
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		if f[0] == GooglePreAgg && f[1] <= "3" && len(f[1]) == 1 && f[len(f)-1] != SelectMagic {
			t.Errorf("row %q: the library uses magic partition selection for m ≤ 3", l)
		}
	}
	if len(plots) != 1 || plots[0] != filepath.Join(dir, "query-dp.svg") {
		t.Errorf("plots %v", plots)
	}
	var out bytes.Buffer
	if err := r.WriteSummary(&out); err != nil || !strings.Contains(out.String(), "best google-preagg") {
		t.Errorf("summary %q, %v", out.String(), err)
	}
}

// TestReleaseProbabilityPerCount: per count, ReleaseProbability equals the
// release frequency of policy.Decide over 1,000 draws within 4 standard
// errors, from two below the Shamir threshold (where both must be exactly
// 0: the pre-threshold) to two noise scales above the release threshold,
// for derived and given Shamir thresholds.
func TestReleaseProbabilityPerCount(t *testing.T) {
	const U, draws = 60, 1000
	for _, kind := range []policy.Kind{policy.DPa, policy.DPu, policy.Zealous, policy.DPGSU} {
		for _, c := range []struct{ d, shamirK int }{{1, 0}, {3, 0}, {2, 1}, {2, 4}, {20, 0}} {
			if c.d == 20 && kind != policy.DPGSU {
				continue
			}
			pol, err := policy.New(policy.Params{Kind: kind, Epsilon: math.Ln10, Delta: 1.0 / (U + 1), D: c.d, Users: U, ShamirK: c.shamirK})
			if err != nil {
				t.Fatal(err)
			}
			for n := max(0, pol.ShamirK-2); float64(n) <= pol.Threshold+2*pol.B; n++ {
				got := ReleaseProbability(pol, int64(n))
				xs := make([]float64, draws)
				for i := range xs {
					o, err := pol.Decide(uint64(n), uint64(n))
					if err != nil {
						t.Fatal(err)
					}
					if o.Released {
						xs[i] = 1
					}
				}
				within(t, fmt.Sprintf("%s count %d", pol, n), got, xs)
				if n < pol.ShamirK && got != 0 {
					t.Errorf("%s: count %d below the Shamir threshold has probability %v", pol, n, got)
				}
			}
		}
	}
}

// TestGoogleKeepPerCount: per number of users n, GoogleKeepProbabilities
// equals the frequency with which the library's PreAggSelectPartition
// keeps a partition of n users over 1,000 runs (4 standard errors), for
// m = 1, 2, 3 (magic partition selection) and 5, 20 (Gaussian), from n = 0
// to where both keep with certainty (or the threshold plus 3σ).
func TestGoogleKeepPerCount(t *testing.T) {
	const draws = 1000
	eps, delta := math.Ln10, 1/1001.0
	for _, m := range []int{1, 2, 3, 5, 20} {
		keep, thr, err := GoogleKeepProbabilities(eps, delta, m)
		if err != nil {
			t.Fatal(err)
		}
		opt := dpagg.PreAggSelectPartitionOptions{Epsilon: eps, Delta: delta, MaxPartitionsContributed: int64(m)}
		top := int64(40)
		if m > 3 {
			top = int64(thr + 3*noiseSigma(m, eps, delta))
		}
		for n := int64(0); n <= top; n++ {
			xs := make([]float64, draws)
			for i := range xs {
				s, err := dpagg.NewPreAggSelectPartition(&opt)
				if err != nil {
					t.Fatal(err)
				}
				s.IncrementBy(n)
				if k, err := s.ShouldKeepPartition(); err != nil {
					t.Fatal(err)
				} else if k {
					xs[i] = 1
				}
			}
			within(t, fmt.Sprintf("google-preagg m=%d n=%d", m, n), keep(n), xs)
		}
	}
}

// noiseSigma is the Gaussian σ the library uses for m > 3 (test helper).
func noiseSigma(m int, eps, delta float64) float64 {
	return noise.SigmaForGaussian(int64(m), 1, eps, delta/2)
}
