package attack

import (
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/release/policy"
)

// gsuChoices runs dp-gsu's client rule (ingest.LimitFrequent: the m most
// frequent distinct artifacts of the user's whole epoch) over every user
// of the bundled log; users in log order.
func gsuChoices(t *testing.T, m int) [][]string {
	t.Helper()
	app, err := apps.Lookup("query")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	if _, err := aol.ReadUsers(bundledLog, func(u aol.User) error {
		var arts []string
		for _, a := range ingest.LimitFrequent(app.Mine(u.Records), m, policy.AllArtifacts) {
			arts = append(arts, a.Primary)
		}
		out = append(out, arts)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// jointFrequencies runs the real release decision n times on one user's
// artifacts, whose distinct-user counts are with (in the log with the
// user) and without (in the log without it), and returns per log the
// frequencies of the events the check uses: cut = some artifact below the
// Shamir threshold without the user is released; sum[i] = the sum of the
// released values of the user's other artifacts exceeds xs[i] (the
// likelihood-ratio direction of the Gaussian part).
func jointFrequencies(t *testing.T, pol *policy.Policy, with, without []uint64, xs []float64, n int) (cutW, cutWo float64, sumW, sumWo []float64) {
	t.Helper()
	run := func(counts []uint64) (cut float64, sum []float64) {
		sum = make([]float64, len(xs))
		for range n {
			anyCut, s := sample(t, pol, counts, without)
			if anyCut {
				cut++
			}
			for k, x := range xs {
				if s > x {
					sum[k]++
				}
			}
		}
		cut /= float64(n)
		for k := range sum {
			sum[k] /= float64(n)
		}
		return cut, sum
	}
	cutW, sumW = run(with)
	cutWo, sumWo = run(without)
	return cutW, cutWo, sumW, sumWo
}

// sample is one run of the release decision on a user's artifacts with
// counts: whether an artifact below the cut without the user (without) was
// released, and the sum of the other released counts.
func sample(t *testing.T, pol *policy.Policy, counts, without []uint64) (anyCut bool, sum float64) {
	for i, c := range counts {
		o, err := pol.Decide(c, c)
		if err != nil {
			t.Fatal(err)
		}
		if !o.Released {
			continue
		}
		if without[i] < uint64(pol.ShamirK) {
			anyCut = true
		} else {
			sum += float64(o.Users)
		}
	}
	return anyCut, sum
}

// ratio is the larger of (p − slack)/(e^ε·q + slack + δ) both ways: above 1
// the pair of frequencies breaks (ε, δ)-DP beyond 4 binomial standard
// errors of each frequency.
func ratio(p, q, eps, delta float64, n int) float64 {
	slack := func(p float64) float64 { return 4 * math.Sqrt(math.Max(p, delta)*(1-p)/float64(n)) }
	e := math.Exp(eps)
	return math.Max((p-slack(p))/(e*(q+slack(q))+delta), (q-slack(q))/(e*(p+slack(p))+delta))
}

// cutRatio is (p − 4 standard errors)/δ for the frequency p of an event
// that is impossible in the other log: above 1 it breaks p ≤ e^ε·0 + δ.
func cutRatio(p, delta float64, n int) float64 {
	return (p - 4*math.Sqrt(math.Max(p, delta)*(1-p)/float64(n))) / delta
}

// TestAttackNeighbouringLogsGSU checks dp-gsu's (ε, δ) empirically on
// neighbouring logs built from the bundled log, with the whole user's
// joint output (m artifacts at once, the mechanism's real sensitivity):
//   - the real user with the most chosen artifacts at the Shamir cut
//     (k_s users with it, k_s − 1 without), D vs D − u;
//   - the real user with the most chosen artifacts within 2σ of the
//     release threshold, D vs D − u;
//   - the worst case of the proof, j = m: D + s for a added user s whose m
//     artifacts are m queries that exactly k_s − 1 users of D chose.
//
// Events: "some artifact at the cut released" — impossible without the
// user, so its frequency with the user must be ≤ δ up to 4 standard errors
// — and "the sum of the user's other released counts exceeds x" for x at
// that sum's 50th, 90th and 99th percentile with the user (a pilot of
// 2,000 runs), whose frequency pairs must satisfy p ≤ e^ε·q + δ both ways
// up to 4 standard errors of each. Control: a threshold calibrated as if
// k_s = 1 (without the Shamir term) but cut at k_s must be caught on the
// added user.
func TestAttackNeighbouringLogsGSU(t *testing.T) {
	const m = 20
	chosen := gsuChoices(t, m)
	count := map[string]uint64{}
	for _, arts := range chosen {
		for _, a := range arts {
			count[a]++
		}
	}
	eps := math.Ln10
	pol, err := policy.New(policy.Params{Kind: policy.DPGSU, Epsilon: eps, D: m, Users: len(chosen)})
	if err != nil {
		t.Fatal(err)
	}
	delta, ks := pol.AchievedDelta, uint64(pol.ShamirK)
	// victims
	bestCut, bestNear := -1, -1
	nCut, nNear := 0, 0
	for u, arts := range chosen {
		c, near := 0, 0
		for _, a := range arts {
			if count[a] == ks {
				c++
			}
			if math.Abs(float64(count[a])-pol.Threshold) <= 2*pol.B {
				near++
			}
		}
		if c > nCut {
			bestCut, nCut = u, c
		}
		if near > nNear {
			bestNear, nNear = u, near
		}
	}
	if bestCut < 0 || bestNear < 0 {
		t.Fatal("no victim at the cut or near the threshold in the bundled log")
	}
	var singles []string // queries that exactly k_s − 1 users chose: the added user's
	for a, c := range count {
		if c == ks-1 {
			singles = append(singles, a)
		}
	}
	sort.Strings(singles)
	if len(singles) < m {
		t.Fatalf("only %d queries with %d users", len(singles), ks-1)
	}
	type victim struct {
		name          string
		with, without []uint64
		n             int
	}
	real := func(name string, u int, n int) victim {
		v := victim{name: name, n: n}
		for _, a := range chosen[u] {
			v.with = append(v.with, count[a])
			v.without = append(v.without, count[a]-1)
		}
		return v
	}
	added := victim{name: fmt.Sprintf("added user, %d artifacts at the cut", m), n: 50000}
	for range m {
		added.with = append(added.with, ks)
		added.without = append(added.without, ks-1)
	}
	victims := []victim{real(fmt.Sprintf("user with %d artifacts at the cut", nCut), bestCut, 10000),
		real(fmt.Sprintf("user with %d artifacts within 2σ of T", nNear), bestNear, 10000), added}
	var lines []string
	worst := 0.0
	for _, v := range victims {
		// sum thresholds: percentiles of the released sum with the user (pilot)
		pilot := make([]float64, 2000)
		for i := range pilot {
			_, pilot[i] = sample(t, pol, v.with, v.without)
		}
		sort.Float64s(pilot)
		xs := []float64{pilot[1000], pilot[1800], pilot[1980]}
		cW, cWo, sW, sWo := jointFrequencies(t, pol, v.with, v.without, xs, v.n)
		if cWo != 0 {
			t.Fatalf("%s: an artifact below the cut was released without the user", v.name)
		}
		r := cutRatio(cW, delta, v.n)
		for i := range xs {
			r = math.Max(r, ratio(sW[i], sWo[i], eps, delta, v.n))
		}
		worst = math.Max(worst, r)
		lines = append(lines, fmt.Sprintf("%s: cut released %.5f vs 0, sum>%.0f %.4f vs %.4f, ratio %.2f", v.name, cW, xs[2], sW[2], sWo[2], r))
		if r > 1 {
			t.Errorf("dp-gsu, %s: frequencies break e^ε·p + δ (ratio %.2f): cut %v vs %v, sums %v vs %v", v.name, r, cW, cWo, sW, sWo)
		}
	}
	// control: the threshold without the Shamir term
	naive, err := policy.New(policy.Params{Kind: policy.DPGSU, Epsilon: eps, D: m, Users: len(chosen), ShamirK: 1})
	if err != nil {
		t.Fatal(err)
	}
	naive.ShamirK = pol.ShamirK // the cut stays; the threshold forgets it
	naiveN := 100000
	cW, cWo, _, _ := jointFrequencies(t, naive, added.with, added.without, nil, naiveN)
	cr := cutRatio(cW, delta, naiveN)
	if cr <= 1 {
		t.Errorf("control: the threshold without the Shamir term (%.3f) passed (cut released %.5f vs %.5f): the check cannot see a broken δ", naive.Threshold, cW, cWo)
	}
	fmt.Printf("ATTACK neighbouring-logs: dp-gsu (m=%d, k_s=%d, σ=%.2f, T=%.2f, ε=%.3f, δ=%.2g), joint output of the user's m artifacts: %v; worst ratio to e^ε·p+δ %.2f (≤ 1 holds); control without the Shamir term (T=%.2f): cut released %.5f vs 0, ratio %.2f\n",
		m, pol.ShamirK, pol.B, pol.Threshold, eps, delta, lines, worst, naive.Threshold, cW, cr)
}
