package blind

import (
	"crypto/ecdh"
	crand "crypto/rand"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

type group struct {
	in    Instance
	privs []*ecdh.PrivateKey
	pubs  [][]byte
	seeds [][]Seed
	self  []Seed // b_i
}

func newGroup(t testing.TB, n int) *group {
	g := &group{in: Instance{Campaign: "flu", Round: 13000, Group: 3}}
	for i := 0; i < n; i++ {
		k, err := GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		g.privs = append(g.privs, k)
		g.pubs = append(g.pubs, k.PublicKey().Bytes())
	}
	for i := 0; i < n; i++ {
		s, err := Seeds(g.privs[i], i, g.pubs, g.in)
		if err != nil {
			t.Fatal(err)
		}
		g.seeds = append(g.seeds, s)
		var b Seed
		crand.Read(b[:])
		g.self = append(g.self, b)
	}
	return g
}

func randVectors(rng *rand.Rand, n, L int) [][]uint64 {
	vs := make([][]uint64, n)
	for i := range vs {
		vs[i] = make([]uint64, L)
		for k := range vs[i] {
			if rng.IntN(4) == 0 {
				vs[i][k] = uint64(rng.IntN(5))
			}
		}
	}
	return vs
}

func TestPairSeedSymmetric(t *testing.T) {
	g := newGroup(t, 4)
	for i := 0; i < 4; i++ {
		for j := 0; j < 4; j++ {
			if i != j && g.seeds[i][j] != g.seeds[j][i] {
				t.Fatalf("s_%d%d != s_%d%d", i, j, j, i)
			}
		}
	}
	other := g.in
	other.Round++
	s, _ := PairSeed(g.privs[0], g.pubs[1], other)
	if s == g.seeds[0][1] {
		t.Fatal("seed does not depend on the round")
	}
}

// PDD eq. (2)-(3): the blinded vectors of a whole group sum to Σ V_i, and one
// blinded vector alone is not V_i.
func TestBlindedSumEqualsSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n, L = 7, 300
	g := newGroup(t, n)
	vs := randVectors(rng, n, L)
	want := make([]uint64, L)
	got := make([]uint64, L)
	for i := 0; i < n; i++ {
		y := Blind(vs[i], i, g.seeds[i], g.self[i])
		if reflect.DeepEqual(y, vs[i]) {
			t.Fatal("blinding left the vector unchanged")
		}
		Sum(got, y)
		var p PRG
		p.AddMask(got, g.self[i], -1) // the aggregator's unmasking of b_i
		for k, c := range vs[i] {
			want[k] += c
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("Σ (Y_i − PRG(b_i)) != Σ V_i")
	}
}

func TestShamirSeed(t *testing.T) {
	var s Seed
	for k := range s {
		s[k] = byte(0xf0 + k)
	}
	xs := []uint16{1, 2, 3, 4, 5, 6}
	sh, err := shareSeeds([]Seed{s}, xs, 4, crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	got, err := CombineSeed([]SeedShare{sh[0][5], sh[0][1], sh[0][3], sh[0][0]}, 4)
	if err != nil || got != s {
		t.Fatalf("combine 4 of 6: %x %v", got, err)
	}
	if _, err := CombineSeed(sh[0][:3], 4); !errors.Is(err, ErrThreshold) {
		t.Fatalf("3 of threshold 4: %v", err)
	}
	// duplicates do not count twice
	if _, err := CombineSeed([]SeedShare{sh[0][0], sh[0][0], sh[0][1], sh[0][2]}, 4); !errors.Is(err, ErrThreshold) {
		t.Fatalf("duplicate shares counted: %v", err)
	}
}

// deal runs every member's Deal and returns the coordinator's mailbox
// (holder → sealed bundles) and the commitments.
func (g *group) deal(t testing.TB, members []int) (map[int][]SealedBundle, map[uint16]*Commitments) {
	n := len(g.pubs)
	mailbox := map[int][]SealedBundle{}
	commits := map[uint16]*Commitments{}
	for _, i := range members {
		d, err := Deal(g.in, i, g.seeds[i], g.self[i], g.pubs, Threshold(n), crand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range d.Bundles {
			mailbox[int(sb.To)] = append(mailbox[int(sb.To)], sb)
		}
		cb, _ := d.Commit.MarshalBinary()
		m, err := Parse(cb)
		if err != nil {
			t.Fatal(err)
		}
		commits[uint16(i)] = m.Commit
	}
	return mailbox, commits
}

// answer is holder h's answer to req through the wire encoding.
func (g *group) answer(t testing.TB, req *Request, h int, mailbox map[int][]SealedBundle) *Answer {
	var opened []*Bundle
	for _, sb := range mailbox[h] {
		b, err := OpenBundle(g.privs[h], g.in, uint16(h), sb)
		if err != nil {
			t.Fatal(err)
		}
		opened = append(opened, b)
	}
	a, err := MakeAnswer(req, h, opened)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := a.MarshalBinary()
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return m.Answer
}

// recoverGroup runs one instance with the given members dropped and the
// given survivors answering, through the wire encodings, and returns the
// corrected sum.
func recoverGroup(t *testing.T, g *group, vs [][]uint64, dropped []uint16, answering []int) ([]uint64, error) {
	n := len(g.pubs)
	T := Threshold(n)
	isDropped := map[int]bool{}
	for _, d := range dropped {
		isDropped[int(d)] = true
	}
	sum := make([]uint64, len(vs[0]))
	var surv []int
	for i := 0; i < n; i++ {
		if isDropped[i] {
			continue
		}
		surv = append(surv, i)
		sub := &Submission{Instance: g.in, Member: uint16(i), Y: Blind(vs[i], i, g.seeds[i], g.self[i])}
		b, _ := sub.MarshalBinary()
		m, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		Sum(sum, m.Submission.Y)
	}
	mailbox, commits := g.deal(t, surv)
	req := Request{Instance: g.in, N: n, T: T, Dropped: dropped}
	rec, err := NewRecovery(req, commits)
	if err != nil {
		return nil, err
	}
	for _, h := range answering {
		a := g.answer(t, &req, h, mailbox)
		for _, rv := range a.Reveals {
			if isDropped[int(rv.From)] || (rv.J != rv.From && !isDropped[int(rv.J)]) {
				t.Fatalf("answer reveals a share of a dropped self mask or a survivor pair (%d,%d)", rv.From, rv.J)
			}
		}
		if good, bad := rec.Add(a); bad != 0 || good == 0 {
			t.Fatalf("holder %d: %d good, %d bad shares", h, good, bad)
		}
	}
	if !rec.Ready() {
		return nil, ErrThreshold
	}
	if err := rec.Correct(sum); err != nil {
		return nil, err
	}
	return sum, nil
}

// With members dropped at random, the recovered sum equals the exact sum
// over the submitting members, whichever t survivors answer.
func TestRecoveryEqualsSurvivorSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n, L = 9, 200
	g := newGroup(t, n)
	for trial := 0; trial < 20; trial++ {
		vs := randVectors(rng, n, L)
		perm := rng.Perm(n)
		nd := rng.IntN(n - Threshold(n) + 1) // keep ≥ t survivors; none dropped is an unmasking too
		var dropped []uint16
		isDropped := map[int]bool{}
		for _, d := range perm[:nd] {
			isDropped[d] = true
		}
		for i := 0; i < n; i++ {
			if isDropped[i] {
				dropped = append(dropped, uint16(i))
			}
		}
		// exactly t survivors answer (a random subset)
		var surv []int
		for _, i := range perm[nd:] {
			surv = append(surv, i)
		}
		answering := surv[:Threshold(n)]
		got, err := recoverGroup(t, g, vs, dropped, answering)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		want := make([]uint64, L)
		for i := 0; i < n; i++ {
			if !isDropped[i] {
				for k, c := range vs[i] {
					want[k] += c
				}
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: recovered sum != Σ over %d survivors", trial, n-nd)
		}
	}
}

// Fewer than t answering survivors is not enough to unmask.
func TestRecoveryNeedsThreshold(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	g := newGroup(t, 9)
	vs := randVectors(rng, 9, 50)
	// t = 5; 2 dropped; only 4 survivors answer: 4 < 5 shares of each seed
	if _, err := recoverGroup(t, g, vs, []uint16{0, 1}, []int{2, 3, 4, 5}); !errors.Is(err, ErrThreshold) {
		t.Fatalf("recovery with 4 < t answers: %v", err)
	}
}

// A recovery that would leave one survivor (or fewer than t) is refused by
// the server and by every honest member, so it can never reveal an
// individual member's vector.
func TestRecoveryOneSurvivorRefused(t *testing.T) {
	g := newGroup(t, 4)
	req := Request{Instance: g.in, N: 4, T: Threshold(4), Dropped: []uint16{0, 1, 2}}
	if _, err := NewRecovery(req, nil); !errors.Is(err, ErrRefused) {
		t.Fatalf("server accepted a one-survivor recovery: %v", err)
	}
	if _, err := MakeAnswer(&req, 3, nil); !errors.Is(err, ErrRefused) {
		t.Fatalf("member answered a one-survivor recovery: %v", err)
	}
	// a forged threshold does not help
	req.T = 1
	if err := req.Check(3, 4); !errors.Is(err, ErrRefused) {
		t.Fatalf("member accepted t=1: %v", err)
	}
	// two members: t = 2, one dropped leaves one survivor
	g2 := newGroup(t, 2)
	req2 := Request{Instance: g2.in, N: 2, T: Threshold(2), Dropped: []uint16{1}}
	if err := req2.Check(0, 2); !errors.Is(err, ErrRefused) {
		t.Fatalf("pair recovery accepted: %v", err)
	}
}

func TestWireRoundTrip(t *testing.T) {
	in := Instance{Campaign: "c-1", Round: -3, Group: 7}
	ro := Roster{Instance: in, N: 10, T: 6, Deadline: 5, RecoverBy: 6, Groups: 3, Active: 40, Grouped: 31, L: 4}
	ro.ListHash[0] = 9
	msgs := []interface{ MarshalBinary() ([]byte, error) }{
		&Submission{Instance: in, Member: 3, Y: []uint64{1, 1 << 63, 0, 5}},
		&Answer{Instance: in, Member: 2, Reveals: []Reveal{{From: 1, J: 4, Share: SeedShare{X: 3, Y: [3]uint64{1, 2, 3}},
			Nonce: [NonceSize]byte{7}, Index: 2, Proof: [][32]byte{{1}, {2}}}, {From: 1, J: 1}}},
		&Commitments{Instance: in, Member: 1, Roots: [][32]byte{{1}, {2}, {3}}},
		&ro,
		&Tick{Day: 13001},
		&Outcome{Roster: ro, Status: StatusRecovered, Decrypted: 8, Sum: []uint64{4, 3, 2, 1}},
		&Outcome{Roster: ro, Status: StatusLost},
	}
	for _, m := range msgs {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Parse(b)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		rv := reflect.ValueOf(got)
		found := false
		for f := 0; f < rv.NumField(); f++ {
			if !rv.Field(f).IsNil() {
				found = true
				if !reflect.DeepEqual(rv.Field(f).Interface(), m) {
					t.Fatalf("%T round trip: %+v", m, rv.Field(f).Interface())
				}
			}
		}
		if !found {
			t.Fatalf("%T parsed to nothing", m)
		}
		for cut := 0; cut < len(b); cut++ {
			if _, err := Parse(b[:cut]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%T truncated at %d: %v", m, cut, err)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	in := Instance{Campaign: "c", Round: 1, Group: 2}
	s, _ := (&Submission{Instance: in, Member: 1, Y: []uint64{1, 2}}).MarshalBinary()
	a, _ := (&Answer{Instance: in, Member: 1, Reveals: []Reveal{{From: 0, J: 2, Share: SeedShare{X: 2}, Proof: [][32]byte{{3}}}}}).MarshalBinary()
	c, _ := (&Commitments{Instance: in, Member: 1, Roots: [][32]byte{{1}, {2}}}).MarshalBinary()
	r, _ := (&Roster{Instance: in, N: 3, T: 2, L: 2}).MarshalBinary()
	tk, _ := (&Tick{Day: 3}).MarshalBinary()
	o, _ := (&Outcome{Roster: Roster{Instance: in, N: 3, T: 2, L: 2}, Status: StatusComplete, Decrypted: 3, Sum: []uint64{1, 2}}).MarshalBinary()
	for _, b := range [][]byte{s, a, r, tk, o, c} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not wrapping ErrMalformed: %v", err)
			}
			return
		}
		var enc []byte
		switch {
		case m.Submission != nil:
			enc, _ = m.Submission.MarshalBinary()
		case m.Answer != nil:
			enc, _ = m.Answer.MarshalBinary()
		case m.Roster != nil:
			enc, _ = m.Roster.MarshalBinary()
		case m.Tick != nil:
			enc, _ = m.Tick.MarshalBinary()
		case m.Outcome != nil:
			enc, _ = m.Outcome.MarshalBinary()
		case m.Commit != nil:
			enc, _ = m.Commit.MarshalBinary()
		default:
			t.Fatal("parsed to nothing")
		}
		if string(enc) != string(b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzOpenBundle(f *testing.F) {
	g := newGroup(f, 3)
	dep, _ := Deal(g.in, 0, g.seeds[0], g.self[0], g.pubs, 2, crand.Reader)
	f.Add(dep.Bundles[1].Ciphertext)
	f.Fuzz(func(t *testing.T, ct []byte) {
		_, err := OpenBundle(g.privs[1], g.in, 1, SealedBundle{From: 0, To: 1, Ciphertext: ct})
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error not wrapping ErrMalformed: %v", err)
		}
	})
}

// Double masking (Bonawitz et al. §4): a member declared dropped whose
// vector reaches the aggregator anyway stays masked by its self mask, even
// with every seed the recovery revealed; a survivor's vector alone is
// never revealed either.
func TestLateVectorStaysMasked(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const n, L = 6, 100
	g := newGroup(t, n)
	vs := randVectors(rng, n, L)
	late := 2
	mailbox, commits := g.deal(t, []int{0, 1, 2, 3, 4, 5}) // the late member dealt too
	req := Request{Instance: g.in, N: n, T: Threshold(n), Dropped: []uint16{uint16(late)}}
	rec, err := NewRecovery(req, commits)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range req.Survivors() {
		rec.Add(g.answer(t, &req, int(h), mailbox))
	}
	if !rec.Ready() {
		t.Fatal("not ready with every survivor answering")
	}
	// everything the aggregator learned: every revealed share, combined
	yLate := Blind(vs[late], late, g.seeds[late], g.self[late])
	guess := append([]uint64(nil), yLate...)
	var p PRG
	for _, i := range req.Survivors() {
		s, err := rec.combine([2]uint16{i, uint16(late)})
		if err != nil {
			t.Fatal(err)
		}
		p.AddMask(guess, s, -Sign(late, int(i)))
	}
	if reflect.DeepEqual(guess, vs[late]) {
		t.Fatal("the late vector was unmasked from the recovery's seeds")
	}
	if _, ok := rec.shares[[2]uint16{uint16(late), uint16(late)}]; ok {
		t.Fatal("a share of the dropped member's self-mask seed was revealed")
	}
}

// Robust recovery: one holder's corrupted share among t+1 is detected by the
// commitments, skipped, and its holder named; the sum is exact.
func TestCorruptShareSkipped(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const n, L = 7, 64
	g := newGroup(t, n)
	vs := randVectors(rng, n, L)
	dropped := []uint16{6}
	surv := []int{0, 1, 2, 3, 4, 5}
	mailbox, commits := g.deal(t, surv)
	req := Request{Instance: g.in, N: n, T: Threshold(n), Dropped: dropped}
	rec, err := NewRecovery(req, commits)
	if err != nil {
		t.Fatal(err)
	}
	sum := make([]uint64, L)
	want := make([]uint64, L)
	for _, i := range surv {
		Sum(sum, Blind(vs[i], i, g.seeds[i], g.self[i]))
		Sum(want, vs[i])
	}
	// t = 4; holders 0..4 answer (t+1); holder 1 flips one bit of one share
	for _, h := range []int{0, 1, 2, 3, 4} {
		a := g.answer(t, &req, h, mailbox)
		if h == 1 {
			a.Reveals[0].Share.Y[0] ^= 1
		}
		rec.Add(a)
	}
	if bad := rec.Bad(); len(bad) != 1 || bad[0] != [2]int{1, 1} {
		t.Fatalf("bad holders %v, want holder 1 with 1 share", bad)
	}
	if err := rec.Correct(sum); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sum, want) {
		t.Fatal("sum with a corrupted share skipped != Σ over survivors")
	}
}
