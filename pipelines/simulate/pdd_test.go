package simulate

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest/keywords"
)

// identity keeps the candidates in ascending user order, so groups can be
// worked out by hand.
func identity(int, []int32) {}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// TestPDDHandBuilt: six users over five days, delay 1, recovery window 1,
// so rounds 0 and 1 are scored (s+1+δ+R ≤ D−1). Worked out by hand:
//
//	day:  0 1 2 3 4      nnz(day 0, day 1)
//	u0:   1 1 1 1 1      2, 1   (day 2: 9, never scored)
//	u1:   1 1 . 1 1      1, 3
//	u2:   1 . 1 1 .      4, -
//	u3:   1 . . . .      1, -
//	u4:   . 1 . 1 1      -, 2   (day 3: 4, never scored)
//	u5:   1 1 . . .      0, 5
//
// Round 0 (d=1, no heuristic since d ≤ δ): candidates u0 u1 u2 u3 u5 (5
// active, 8 nnz); submit in [1,2]: all but u3; recovery window [3,3]: u0
// u1 u2. Round 1 (d=2): candidates u0 u1 u4 u5 (4 active, 11 nnz); the
// heuristic keeps those active on day 0 (u0 u1 u5); submit in [2,3]: all
// but u5; recovery window [4,4]: u0 u1 u4.
//
// gs=3 (one group each round): round 0 {0,1,2,3,5}: u3 missing; recovery
// needs t=3 of S={0,1,2,5} in the window: u0 u1 u2 → decrypt S (7 nnz, 4
// clients). Round 1 {0,1,4,5}: u5 missing, t=3, {0,1,4} in the window →
// decrypt 6 nnz, 3 clients. With the heuristic {0,1,5}: t=2, {0,1} → 4
// nnz, 2 clients.
//
// gs=2: round 0 deals {0,2,5} {1,3}: the first submits fully (6 nnz, 3
// clients), the second has 1 of 2 (t=2): lost either way. Round 1 deals
// {0,4} {1,5}: 3 nnz, 2 clients, the second lost either way; with the
// heuristic N=3 gives one group {0,1,5}, as for gs=3.
func TestPDDHandBuilt(t *testing.T) {
	act := [][]bool{
		{true, true, true, true, true},
		{true, true, false, true, true},
		{true, false, true, true, false},
		{true, false, false, false, false},
		{false, true, false, true, true},
		{true, true, false, false, false},
	}
	nnz := [][]int32{
		{2, 1, 9, 0, 0},
		{1, 3, 0, 0, 0},
		{4, 0, 0, 0, 0},
		{1, 0, 0, 0, 0},
		{0, 2, 0, 4, 0},
		{0, 5, 0, 0, 0},
	}
	p, err := NewPopulation(act, nnz)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.evaluate(context.Background(), PDDGrid{GroupSizes: []int{3, 2}, Delays: []int{1}, RecoveryDays: 1}, 1, identity)
	if err != nil {
		t.Fatal(err)
	}
	if r.FirstRound != 0 || r.LastRound != 1 {
		t.Fatalf("scored rounds %d..%d, want 0..1", r.FirstRound, r.LastRound)
	}
	const total = 8 + 11
	for _, c := range []struct {
		mode                      PDDMode
		gs                        int
		lost                      int64
		conf                      float64
		groups, glost, grecovered int
	}{
		{ModePDD, 3, 8 + 11, (0 + 0) / 2., 2, 2, 0},
		{ModePDDHeuristic, 3, 8 + 11, 0, 2, 2, 0},
		{ModeRecovery, 3, (8 - 7) + (11 - 6), (4/5. + 3/4.) / 2, 2, 0, 2},
		{ModeRecoveryHeuristic, 3, (8 - 7) + (11 - 4), (4/5. + 2/4.) / 2, 2, 0, 2},
		{ModePDD, 2, (8 - 6) + (11 - 3), (3/5. + 2/4.) / 2, 4, 2, 0},
		{ModeRecovery, 2, (8 - 6) + (11 - 3), (3/5. + 2/4.) / 2, 4, 2, 0},
		{ModePDDHeuristic, 2, (8 - 6) + 11, (3/5. + 0) / 2, 3, 2, 0},
		{ModeRecoveryHeuristic, 2, (8 - 6) + (11 - 4), (3/5. + 2/4.) / 2, 3, 1, 1},
	} {
		pt, ok := r.At(c.mode, c.gs, 1)
		if !ok {
			t.Fatalf("%s gs=%d missing", c.mode, c.gs)
		}
		if pt.TotalNNZ != total || pt.LostNNZ != c.lost || !near(pt.MRE, float64(c.lost)/total) ||
			!near(pt.Confidence, c.conf) || pt.Rounds != 2 ||
			pt.Groups != c.groups || pt.GroupsLost != c.glost || pt.GroupsRecovered != c.grecovered {
			t.Errorf("%s gs=%d: got %+v, want lost %d/%d conf %.4f groups %d lost %d recovered %d",
				c.mode, c.gs, pt, c.lost, total, c.conf, c.groups, c.glost, c.grecovered)
		}
	}

	// A lone candidate never forms a group: day 0 has only u0 active.
	p, err = NewPopulation([][]bool{{true, true, true}, {false, true, true}}, [][]int32{{3, 0, 0}, {0, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	r, err = p.Evaluate(context.Background(), PDDGrid{GroupSizes: []int{1, 10}, Delays: []int{0}, RecoveryDays: 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range r.Points {
		if pt.Rounds != 1 || pt.Groups != 0 || pt.MRE != 1 || pt.Confidence != 0 {
			t.Errorf("lone user: %+v, want 1 round, 0 groups, MRE 1, confidence 0", pt)
		}
	}

	// Too few days for the grid, and nnz on an inactive day, are errors.
	if _, err := p.Evaluate(context.Background(), PDDGrid{GroupSizes: []int{2}, Delays: []int{1}, RecoveryDays: 1}, 1); err == nil {
		t.Error("3 days with δ=1, R=1: want an error")
	}
	if _, err := NewPopulation([][]bool{{true, false}}, [][]int32{{1, 1}}); err == nil {
		t.Error("nnz on an inactive day: want an error")
	}
}

// refEvaluate is the model read literally, per (round, configuration), on
// the raw matrices: the ground truth for the fast evaluate.
func refEvaluate(act [][]bool, nnz [][]int32, m PDDMode, gs, delay, R, last int) (lost, total int64, conf float64) {
	anyActive := func(u, from, to int) bool {
		for d := from; d <= to; d++ {
			if act[u][d] {
				return true
			}
		}
		return false
	}
	rounds := 0
	for s := 0; s <= last; s++ {
		d := s + 1
		var cand []int
		nActive := 0
		for u := range act {
			total += int64(nnz[u][s])
			if !act[u][s] {
				continue
			}
			nActive++
			past := 0
			for x := 0; x <= d-2; x++ {
				if act[u][x] {
					past++
				}
			}
			if m.Heuristic() && delay > 0 && d > delay && float64(past) < float64(d-1)/float64(delay) {
				continue
			}
			cand = append(cand, u)
		}
		G := max(1, len(cand)/gs)
		decClients := 0
		var dec int64
		for g := 0; g < G && len(cand) > 0; g++ {
			var members, S []int
			for j := g; j < len(cand); j += G {
				members = append(members, cand[j])
			}
			for _, u := range members {
				if anyActive(u, d, d+delay) {
					S = append(S, u)
				}
			}
			inWindow := 0
			for _, u := range S {
				if R > 0 && anyActive(u, d+delay+1, d+delay+R) {
					inWindow++
				}
			}
			n, th := len(members), len(members)/2+1
			var ok []int
			switch {
			case n < 2:
			case len(S) == n:
				ok = members
			case m.Recovery() && len(S) >= th && inWindow >= th:
				ok = S
			}
			for _, u := range ok {
				dec += int64(nnz[u][s])
				decClients++
			}
		}
		for u := range act {
			lost += int64(nnz[u][s])
		}
		lost -= dec
		if nActive > 0 {
			conf += float64(decClients) / float64(nActive)
			rounds++
		}
	}
	return lost, total, conf / float64(rounds)
}

// TestPDDMatchesReference: on random small populations (identity order),
// every configuration's lost/total nnz and confidence equal the literal
// reading of the model.
func TestPDDMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 30 {
		U, D := 5+rng.IntN(40), 12+rng.IntN(10)
		act := make([][]bool, U)
		nnz := make([][]int32, U)
		for u := range U {
			act[u] = make([]bool, D)
			nnz[u] = make([]int32, D)
			share := rng.Float64()
			for d := range D {
				if rng.Float64() < share {
					act[u][d] = true
					nnz[u][d] = int32(rng.IntN(4))
				}
			}
		}
		p, err := NewPopulation(act, nnz)
		if err != nil {
			t.Fatal(err)
		}
		g := PDDGrid{GroupSizes: []int{1, 2, 3, 7, 100}, Delays: []int{0, 1, 2, 4}, RecoveryDays: trial % 3}
		r, err := p.evaluate(context.Background(), g, 1, identity)
		if err != nil {
			t.Fatal(err)
		}
		for _, pt := range r.Points {
			lost, total, conf := refEvaluate(act, nnz, pt.Mode, pt.GroupSize, pt.Delay, g.RecoveryDays, r.LastRound)
			if pt.LostNNZ != lost || pt.TotalNNZ != total || math.Abs(pt.Confidence-conf) > 1e-9 {
				t.Fatalf("trial %d (U=%d D=%d R=%d) %s gs=%d δ=%d: lost %d/%d conf %.6f, reference %d/%d conf %.6f",
					trial, U, D, g.RecoveryDays, pt.Mode, pt.GroupSize, pt.Delay, pt.LostNNZ, pt.TotalNNZ, pt.Confidence, lost, total, conf)
			}
		}
	}
}

// TestPDDPaperShape: at 20,000 users × 100 days, gs 100, δ 2, recovery with
// the heuristic loses at most 10% of the non-zero counts while PDD with the
// heuristic loses far more (PDD Fig. 5b: 0.60 at 100,000 users). Also
// checks the drawn population against the §4.1 distributions and that a
// seed reproduces it.
func TestPDDPaperShape(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the bundled log and draws 20,000 users")
	}
	ctx := context.Background()
	t0 := time.Now()
	pool, err := LoadQueryPool(ctx, bundled, keywords.Default())
	if err != nil {
		t.Fatal(err)
	}
	const U, D = 20000, 100
	pop, err := GeneratePopulation(ctx, U, D, 1, pool)
	if err != nil {
		t.Fatal(err)
	}
	// active-day share against the Beta mean α/(α+β) (sd 0.197, so the
	// mean of 20,000 users is within ±0.01 with overwhelming probability)
	var activeDays int64
	for u := range U {
		for d := range D {
			if pop.Active(u, d) {
				activeDays++
			}
		}
	}
	share, want := float64(activeDays)/(U*D), PDDActiveAlpha/(PDDActiveAlpha+PDDActiveBeta)
	if math.Abs(share-want) > 0.01 {
		t.Errorf("mean active share %.4f, Beta mean %.4f", share, want)
	}
	again, err := GeneratePopulation(ctx, 200, D, 1, pool)
	if err != nil {
		t.Fatal(err)
	}
	for u := range 200 {
		for d := range D {
			if again.Active(u, d) != pop.Active(u, d) || again.NNZ(u, d) != pop.NNZ(u, d) {
				t.Fatalf("seed 1 does not reproduce user %d day %d", u, d)
			}
		}
	}
	r, err := pop.Evaluate(ctx, PDDGrid{GroupSizes: []int{100}, Delays: []int{2}, RecoveryDays: 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range PDDModes() {
		pt, _ := r.At(m, 100, 2)
		t.Logf("%-19s gs=100 δ=2: MRE %.4f confidence %.4f groups %d lost %d recovered %d (rounds %d..%d)",
			m, pt.MRE, pt.Confidence, pt.Groups, pt.GroupsLost, pt.GroupsRecovered, r.FirstRound, r.LastRound)
	}
	rh, _ := r.At(ModeRecoveryHeuristic, 100, 2)
	ph, _ := r.At(ModePDDHeuristic, 100, 2)
	if rh.MRE > 0.10 {
		t.Errorf("recovery+heuristic MRE %.4f > 0.10", rh.MRE)
	}
	if ph.MRE <= 0.3 {
		t.Errorf("pdd+heuristic MRE %.4f ≤ 0.3 (paper: 0.60)", ph.MRE)
	}
	t.Logf("%d query instances, %d users × %d days, %s", len(pool.inst), U, D, time.Since(t0).Round(time.Millisecond))
}
