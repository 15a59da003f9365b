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

// choices runs dp-su's client rule (ingest.LimitFrequent, one artifact of
// the window most recent distinct) over every user of the bundled log and
// returns each user's chosen artifact (users in log order).
func choices(t *testing.T, window int) []string {
	t.Helper()
	app, err := apps.Lookup("query")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if _, err := aol.ReadUsers(bundledLog, func(u aol.User) error {
		for _, a := range ingest.LimitFrequent(app.Mine(u.Records), 1, window) {
			out = append(out, a.Primary)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// releaseFrequency is the share of n runs of pol.Decide on an artifact with
// users distinct users that released it.
func releaseFrequency(t *testing.T, pol *policy.Policy, users uint64, n int) float64 {
	t.Helper()
	hits := 0
	for range n {
		o, err := pol.Decide(users, users)
		if err != nil {
			t.Fatal(err)
		}
		if o.Released {
			hits++
		}
	}
	return float64(hits) / float64(n)
}

// TestAttackNeighbouringLogs checks dp-su's (ε, δ) empirically on real
// neighbouring logs: the bundled log D and D − u for victims u whose chosen
// artifact sits at the Shamir cut (removing u closes it: k_s → k_s − 1
// users), at each count up to one above the release threshold, and at the
// most chosen artifact. For the victim's artifact (the only one whose count
// differs) the release frequencies over n runs of the real release
// decision must satisfy p_D ≤ e^ε·p_D' + δ and p_D' ≤ e^ε·p_D + δ, up to 4
// binomial standard errors of each frequency. Control: the same check
// against a release threshold that ignores the Shamir cut (the paper's
// T = 1 + ln(1/(2δ))/ε with k_s = 2, what an implementation without the
// margin would use) must fail at the cut.
func TestAttackNeighbouringLogs(t *testing.T) {
	const window, n = 20, 200000
	chosen := choices(t, window)
	users := len(chosen)
	count := map[string]uint64{}
	for _, a := range chosen {
		count[a]++
	}
	eps := math.Ln10
	pol, err := policy.New(policy.Params{Kind: policy.DPSU, Epsilon: eps, D: window, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	delta := pol.AchievedDelta
	// victims: one user per decisive count, chosen by their artifact's count
	var targets []uint64
	for c := uint64(pol.ShamirK); c <= uint64(math.Ceil(pol.Threshold))+1; c++ {
		targets = append(targets, c)
	}
	var maxCount uint64
	present := map[uint64]bool{} // counts some artifact has: a victim exists
	for _, c := range count {
		maxCount = max(maxCount, c)
		present[c] = true
	}
	targets = append(targets, maxCount)
	violation := func(p *policy.Policy, c uint64) (pD, pN, worst float64) {
		pD = releaseFrequency(t, p, c, n)
		pN = 0
		if c > 1 {
			pN = releaseFrequency(t, p, c-1, n)
		}
		// a violation must stand out of the sampling error of both
		// frequencies: 4 binomial standard errors on each side (at ε = ln 10
		// Laplace thresholding meets e^ε·p + δ with equality near the
		// threshold, so the denominator's own error matters as much)
		slack := func(p float64) float64 { return 4 * math.Sqrt(math.Max(p, delta)*(1-p)/n) }
		e := math.Exp(eps)
		worst = math.Max((pD-slack(pD))/(e*(pN+slack(pN))+delta), (pN-slack(pN))/(e*(pD+slack(pD))+delta))
		return pD, pN, worst
	}
	var lines []string
	worstAll := 0.0
	for _, c := range targets {
		if c == 0 {
			continue
		}
		if !present[c] {
			t.Logf("no artifact with exactly %d users; skipped", c)
			continue
		}
		pD, pN, worst := violation(pol, c)
		worstAll = math.Max(worstAll, worst)
		lines = append(lines, fmt.Sprintf("%d→%d users: p_D=%.5f p_D'=%.5f", c, c-1, pD, pN))
		if worst > 1 {
			t.Errorf("dp-su: removing a user of an artifact with %d users: release frequency %.5f vs %.5f breaks e^ε·p + δ (ε=%.3f, δ=%.2g; ratio %.2f)",
				c, pD, pN, eps, delta, worst)
		}
	}
	if len(lines) < 4 {
		t.Fatalf("only %d victims found in the bundled log; the check covers too little", len(lines))
	}
	// control: no Shamir margin in the threshold
	naive, err := policy.New(policy.Params{Kind: policy.DPSU, Epsilon: eps, D: window, Users: users, ShamirK: 1})
	if err != nil {
		t.Fatal(err)
	}
	naive.ShamirK = pol.ShamirK // the cut stays; the threshold forgets it
	cD, cN, cWorst := violation(naive, uint64(pol.ShamirK))
	if cWorst <= 1 {
		t.Errorf("control: a threshold without the Shamir margin (%.3f) passed the check (p_D=%.5f, p_D'=%.5f): the check cannot see a broken δ", naive.Threshold, cD, cN)
	}
	sort.Strings(lines)
	fmt.Printf("ATTACK neighbouring-logs: dp-su (window %d, k_s=%d, T=%.2f, ε=%.3f, δ=%.2g) on D vs D−u, %d runs each: %v; worst ratio to e^ε·p+δ %.2f (≤ 1 holds); control without the Shamir margin (T=%.2f): p_D=%.5f p_D'=%.5f, ratio %.1f\n",
		window, pol.ShamirK, pol.Threshold, eps, delta, n, lines, worstAll, naive.Threshold, cD, cN, cWorst)
}
