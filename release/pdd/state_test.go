package pdd

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

func testList(t testing.TB, n int) *keywords.List {
	t.Helper()
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString("kw")
		b.WriteByte(byte('a' + i/26))
		b.WriteByte(byte('a' + i%26))
		b.WriteByte('\n')
	}
	l, err := keywords.Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// client is one synthetic client of a round: its own counts and whether
// its vector reached the aggregator.
type client struct {
	counts    []uint64
	submitted bool
}

// group is a synthetic group: its members and its final status.
type group struct {
	id      uint32
	members []client
	status  blind.Status
}

// roster returns the roster of group g of a round.
func roster(list *keywords.List, campaign string, round int32, g uint32, n int, groups, active, grouped uint32) blind.Roster {
	return blind.Roster{Instance: blind.Instance{Campaign: campaign, Round: round, Group: g},
		N: uint16(n), T: uint16(blind.Threshold(n)), Deadline: round + 2, RecoverBy: round + 3,
		Groups: groups, Active: active, Grouped: grouped, L: uint32(list.Len()), ListHash: list.Hash()}
}

// outcome is what the aggregator emits for g: the sum of the submitted
// members' vectors (none when lost).
func outcome(t testing.TB, list *keywords.List, campaign string, round int32, g group, groups, active, grouped uint32) []byte {
	t.Helper()
	o := blind.Outcome{Roster: roster(list, campaign, round, g.id, len(g.members), groups, active, grouped), Status: g.status}
	if g.status != blind.StatusLost {
		o.Sum = make([]uint64, list.Len())
		for _, c := range g.members {
			if c.submitted {
				o.Decrypted++
				for i, v := range c.counts {
					o.Sum[i] += v
				}
			}
		}
	}
	b, err := o.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// synthRound makes groups of random clients: group k has status statuses[k];
// recovered groups have 1..n−T dropped members, lost groups drop members
// below the threshold.
func synthRound(rng *rand.Rand, L int, statuses []blind.Status) []group {
	var gs []group
	for k, st := range statuses {
		n := 3 + rng.IntN(6)
		g := group{id: uint32(100 + 7*k), status: st}
		drop := 0
		switch st {
		case blind.StatusRecovered:
			drop = 1 + rng.IntN(n-blind.Threshold(n))
		case blind.StatusLost:
			drop = n - blind.Threshold(n) + 1
		}
		for i := 0; i < n; i++ {
			c := client{counts: make([]uint64, L), submitted: i >= drop}
			for j := range c.counts {
				if rng.IntN(3) == 0 {
					c.counts[j] = uint64(1 + rng.IntN(4))
				}
			}
			g.members = append(g.members, c)
		}
		gs = append(gs, g)
	}
	return gs
}

func TestStateCompletesRoundWithMixedGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	list := testList(t, 40)
	const campaign, round = "flu", int32(13210) // 2006-03-03
	gs := synthRound(rng, list.Len(), []blind.Status{blind.StatusComplete, blind.StatusRecovered, blind.StatusLost,
		blind.StatusComplete, blind.StatusRecovered, blind.StatusLost, blind.StatusComplete})
	groups := uint32(len(gs))
	var grouped uint32
	for _, g := range gs {
		grouped += uint32(len(g.members))
	}
	active := grouped + 9 // some active clients were not grouped

	// Ground truth from the clients: the counts of every client whose
	// vector was submitted in a group that was not lost.
	want := make([]uint64, list.Len())
	var decrypted, complete, recovered, lost uint32
	for _, g := range gs {
		switch g.status {
		case blind.StatusComplete:
			complete++
		case blind.StatusRecovered:
			recovered++
		case blind.StatusLost:
			lost++
			continue
		}
		for _, c := range g.members {
			if c.submitted {
				decrypted++
				for i, v := range c.counts {
					want[i] += v
				}
			}
		}
	}

	s := NewState(list)
	var msgs [][]byte
	for _, g := range gs {
		msgs = append(msgs, outcome(t, list, campaign, round, g, groups, active, grouped))
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	last := msgs[len(msgs)-1]
	var feed [][]byte
	for _, m := range msgs[:len(msgs)-1] {
		feed = append(feed, m, m) // every outcome re-emitted once
	}
	other := testList(t, 41) // a campaign monitoring another list
	feed = append(feed,
		[]byte("garbage"), nil,
		outcome(t, other, campaign, round, gs[0], groups, active, grouped),  // wrong L and hash
		outcome(t, list, campaign, round+1, gs[0], groups, active, grouped), // next round, incomplete
	)
	wrongHash := blind.Outcome{Roster: roster(list, campaign, round, 999, 3, groups, active, grouped), Status: blind.StatusLost}
	wrongHash.Roster.ListHash[0] ^= 1
	b, _ := wrongHash.MarshalBinary()
	feed = append(feed, b)
	tick, _ := (&blind.Tick{Day: 5}).MarshalBinary()
	feed = append(feed, tick)
	for i, m := range feed {
		if _, done := s.Apply(m); done {
			t.Fatalf("message %d completed the round before its last group", i)
		}
	}
	r, done := s.Apply(last)
	if !done {
		t.Fatal("the last group did not complete the round")
	}
	if r.Campaign != campaign || r.Round != round || r.Day.String() != "2006-03-03" {
		t.Fatalf("round %s/%d day %s", r.Campaign, r.Round, r.Day)
	}
	if r.Active != active || r.Grouped != grouped || r.Groups != groups || r.Complete != complete ||
		r.Recovered != recovered || r.Lost != lost || r.Decrypted != decrypted {
		t.Fatalf("round %+v; want active %d grouped %d groups %d complete %d recovered %d lost %d decrypted %d",
			r, active, grouped, groups, complete, recovered, lost, decrypted)
	}
	if conf := float64(decrypted) / float64(active); r.Confidence != conf {
		t.Fatalf("confidence %v, want %d/%d = %v", r.Confidence, decrypted, active, conf)
	}
	if len(r.Counts) != list.Len() {
		t.Fatalf("%d counts for L = %d", len(r.Counts), list.Len())
	}
	for i := range want {
		if r.Counts[i] != want[i] {
			t.Fatalf("count of keyword %d = %d, want %d", i, r.Counts[i], want[i])
		}
	}
	// A re-emit after the release does not release again.
	if _, done := s.Apply(last); done {
		t.Fatal("released twice")
	}
	wantDrops := map[string]int64{DropDuplicate: int64(len(msgs) - 1), DropMalformed: 2, DropListMismatch: 2,
		DropKind: 1, DropLate: 1}
	for k, v := range wantDrops {
		if s.Dropped[k] != v {
			t.Errorf("dropped %s = %d, want %d (all: %v)", k, s.Dropped[k], v, s.Dropped)
		}
	}
	if len(s.Dropped) != len(wantDrops) {
		t.Errorf("dropped %v, want only %v", s.Dropped, wantDrops)
	}
	if s.Open() != 1 {
		t.Errorf("%d open rounds, want 1 (round+1)", s.Open())
	}
}

func TestStateRosterMismatchAndConflict(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	list := testList(t, 5)
	gs := synthRound(rng, list.Len(), []blind.Status{blind.StatusComplete, blind.StatusComplete})
	s := NewState(list)
	if _, done := s.Apply(outcome(t, list, "c", 1, gs[0], 2, 20, 15)); done {
		t.Fatal("done after one group of two")
	}
	// group 2 claims another group count / activity: dropped
	for _, m := range [][]byte{outcome(t, list, "c", 1, gs[1], 1, 20, 15), outcome(t, list, "c", 1, gs[1], 2, 21, 15),
		outcome(t, list, "c", 1, gs[1], 2, 20, 14)} {
		if _, done := s.Apply(m); done {
			t.Fatal("a mismatched roster completed the round")
		}
	}
	// same instance as group 1, other content
	alt := gs[0]
	alt.status = blind.StatusLost
	s.Apply(outcome(t, list, "c", 1, alt, 2, 20, 15))
	// a round announcing zero groups
	s.Apply(outcome(t, list, "c", 2, gs[1], 0, 20, 15))
	if s.Dropped[DropRoster] != 4 || s.Dropped[DropConflict] != 1 {
		t.Fatalf("dropped %v", s.Dropped)
	}
	r, done := s.Apply(outcome(t, list, "c", 1, gs[1], 2, 20, 15))
	if !done || r.Complete != 2 || r.Lost != 0 {
		t.Fatalf("round %+v done %v: the first version of group 1 must be kept", r, done)
	}
}

func TestStateImplausibleSumCountsAsLost(t *testing.T) {
	list := testList(t, 3)
	s := NewState(list)
	s.MaxCount = 10
	mk := func(g uint32, decrypted uint16, sum []uint64) []byte {
		o := blind.Outcome{Roster: roster(list, "c", 7, g, 4, 2, 8, 8), Status: blind.StatusComplete, Decrypted: decrypted, Sum: sum}
		if decrypted < 4 {
			o.Status = blind.StatusRecovered
		}
		b, _ := o.MarshalBinary()
		return b
	}
	s.Apply(mk(0, 3, []uint64{30, 0, 1}))            // at the bound: kept
	r, done := s.Apply(mk(1, 4, []uint64{0, 41, 0})) // 41 > 4·10: a client did not clip, or a corrupt sum
	if !done {
		t.Fatal("round not complete")
	}
	if r.Lost != 1 || r.Recovered != 1 || r.Decrypted != 3 || r.Counts[0] != 30 || r.Counts[1] != 0 || r.Counts[2] != 1 {
		t.Fatalf("round %+v", r)
	}
	if s.Dropped[DropImplausible] != 1 {
		t.Fatalf("dropped %v", s.Dropped)
	}
	// Without a clip only wrap-around garbage (> Decrypted·2^32) is rejected.
	s = NewState(list)
	s.Apply(mk(0, 3, []uint64{3 << 32, 0, 0}))
	r, _ = s.Apply(mk(1, 4, []uint64{0, math.MaxUint64 - 5, 0}))
	if r.Lost != 1 || r.Counts[0] != 3<<32 {
		t.Fatalf("without a clip: round %+v", r)
	}
}

func TestStateAllLostAndNoActive(t *testing.T) {
	list := testList(t, 4)
	s := NewState(list)
	o := blind.Outcome{Roster: roster(list, "c", 0, 0, 2, 1, 0, 0), Status: blind.StatusLost}
	b, _ := o.MarshalBinary()
	r, done := s.Apply(b)
	if !done || r.Confidence != 0 || r.Decrypted != 0 || r.Lost != 1 || len(r.Counts) != 4 {
		t.Fatalf("round %+v done %v", r, done)
	}
	for _, c := range r.Counts {
		if c != 0 {
			t.Fatalf("counts %v of a lost round", r.Counts)
		}
	}
}

func TestStateCampaignsAreIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	list := testList(t, 6)
	gs := synthRound(rng, list.Len(), []blind.Status{blind.StatusComplete, blind.StatusComplete})
	s := NewState(list)
	s.Apply(outcome(t, list, "a", 3, gs[0], 2, 50, 40))
	s.Apply(outcome(t, list, "b", 3, gs[0], 1, 60, 40)) // b has one group: done
	r, done := s.Apply(outcome(t, list, "a", 3, gs[1], 2, 50, 40))
	if !done || r.Campaign != "a" || r.Groups != 2 {
		t.Fatalf("round %+v done %v", r, done)
	}
	if s.Open() != 0 || s.Accepted != 3 {
		t.Fatalf("open %d accepted %d", s.Open(), s.Accepted)
	}
}

func TestReleaseExactNamesNonZeroCounts(t *testing.T) {
	list := testList(t, 5)
	r := Round{Campaign: "c", Round: 13210, Day: 13210, Active: 4, Decrypted: 3, Groups: 1, Complete: 1,
		Confidence: 0.75, Counts: []uint64{0, 7, 0, 1, 0}}
	row, err := Release(r, list, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if row.Day.Format("2006-01-02") != "2006-03-03" || row.Epsilon != 0 || len(row.Counts) != 2 ||
		row.Counts[0].Keyword != list.Words[1] || row.Counts[0].Count != 7 || row.Counts[1].Keyword != list.Words[3] {
		t.Fatalf("row %+v", row)
	}
	r.Counts = r.Counts[:4]
	if _, err := Release(r, list, 0, 0); err == nil {
		t.Fatal("a round of the wrong length was released")
	}
	r.Counts = []uint64{1 << 63, 0, 0, 0, 0}
	if _, err := Release(r, list, 0, 0); err == nil {
		t.Fatal("a count above 2^63−1 was released")
	}
}

// TestNoiseUnbiasedWithScale draws noisy counts of known truths and checks
// that the noise is centred on 0 with mean absolute value b = MaxCount/ε.
// The mechanism rounds a Laplace(b) draw to an integer, which changes
// E|X| by less than 0.1 at b = 5. Tolerances are 6 standard errors: the
// mean of n Lap(b) draws has standard deviation b·sqrt(2/n), |X| has
// standard deviation b, so a false failure has probability < 1e-8.
func TestNoiseUnbiasedWithScale(t *testing.T) {
	const (
		n        = 20000
		epsilon  = 2.0
		maxCount = 10
		b        = float64(maxCount) / epsilon
	)
	counts := make([]uint64, n)
	for i := range counts {
		counts[i] = uint64(i % 50) // zeros included: every entry is noised
	}
	noisy, err := Noisy(counts, epsilon, maxCount)
	if err != nil {
		t.Fatal(err)
	}
	var sum, abs float64
	var unchangedZeros int
	for i, v := range noisy {
		d := float64(v) - float64(counts[i])
		sum += d
		abs += math.Abs(d)
		if counts[i] == 0 && v == 0 {
			unchangedZeros++
		}
	}
	mean, mad := sum/n, abs/n
	if tol := 6 * b * math.Sqrt(2.0/n); math.Abs(mean) > tol {
		t.Fatalf("mean noise %.4f, want 0 ± %.4f", mean, tol)
	}
	if tol := 6*b/math.Sqrt(n) + 0.1; math.Abs(mad-b) > tol {
		t.Fatalf("mean |noise| %.4f, want b = %.1f ± %.4f", mad, b, tol)
	}
	// P(round(Lap(5)) = 0) = 1 − e^{−0.1} ≈ 0.095: most zero counts move.
	if zeros := n / 50; unchangedZeros > zeros/2 {
		t.Fatalf("%d of %d zero counts stayed 0: zeros are not noised", unchangedZeros, zeros)
	}
	t.Logf("b %.1f: mean %.4f mad %.4f", b, mean, mad)

	for _, bad := range []struct {
		eps float64
		max int64
	}{{0, 10}, {-1, 10}, {math.Inf(1), 10}, {math.NaN(), 10}, {1, 0}} {
		if _, err := Noisy(counts[:1], bad.eps, bad.max); err == nil {
			t.Errorf("Noisy(ε=%v, max=%d): no error", bad.eps, bad.max)
		}
	}
}

func TestReleaseNoisyRecordsEpsilon(t *testing.T) {
	list := testList(t, 300)
	r := Round{Campaign: "c", Round: 1, Day: 1, Groups: 1, Complete: 1, Counts: make([]uint64, 300)}
	row, err := Release(r, list, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if row.Epsilon != 1 || row.MaxCount != 3 {
		t.Fatalf("epsilon %v max count %d", row.Epsilon, row.MaxCount)
	}
	// Lap(3) rounded is 0 with probability 1 − e^{−1/6} ≈ 0.15: about 255
	// of 300 all-zero keywords get a row.
	if len(row.Counts) < 200 || len(row.Counts) > 295 {
		t.Fatalf("%d of 300 noisy zero counts released, want about 255", len(row.Counts))
	}
}

func FuzzApply(f *testing.F) {
	list := testList(f, 3)
	good := blind.Outcome{Roster: roster(list, "c", 5, 1, 2, 2, 3, 2), Status: blind.StatusComplete, Decrypted: 2, Sum: []uint64{1, 2, 3}}
	b, _ := good.MarshalBinary()
	f.Add(b)
	good.Status, good.Sum, good.Decrypted = blind.StatusLost, nil, 0
	b, _ = good.MarshalBinary()
	f.Add(b)
	f.Add([]byte{1, 5})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := NewState(list)
		s.MaxCount = 10
		for i := 0; i < 2; i++ { // twice: the second is a duplicate or late
			if r, done := s.Apply(b); done {
				if len(r.Counts) != list.Len() {
					t.Fatalf("round with %d counts", len(r.Counts))
				}
				if _, err := Release(r, list, 0, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
