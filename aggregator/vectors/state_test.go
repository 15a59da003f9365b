package vectors

import (
	"crypto/ecdh"
	crand "crypto/rand"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/blind"
)

// member is a test client: its key, counts and what it sends.
type testGroup struct {
	in     blind.Instance
	privs  []*ecdh.PrivateKey
	pubs   [][]byte
	vs     [][]uint64
	roster blind.Roster
	boxes  map[int][]blind.SealedBundle
	self   []blind.Seed
}

func newTestGroup(t testing.TB, rng *rand.Rand, n, L int, round int32) *testGroup {
	g := &testGroup{in: blind.Instance{Campaign: "c", Round: round, Group: 1}, boxes: map[int][]blind.SealedBundle{}}
	for i := 0; i < n; i++ {
		k, err := blind.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		g.privs = append(g.privs, k)
		g.pubs = append(g.pubs, k.PublicKey().Bytes())
		v := make([]uint64, L)
		for j := range v {
			v[j] = uint64(rng.IntN(3))
		}
		g.vs = append(g.vs, v)
		var b blind.Seed
		crand.Read(b[:])
		g.self = append(g.self, b)
	}
	g.roster = blind.Roster{Instance: g.in, N: uint16(n), T: uint16(blind.Threshold(n)), Deadline: round + 3,
		RecoverBy: round + 4, Groups: 1, Active: uint32(n + 2), Grouped: uint32(n), L: uint32(L)}
	return g
}

func enc(t testing.TB, m interface{ MarshalBinary() ([]byte, error) }) []byte {
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// deal stores member i's deposit and returns its commitments message (the
// coordinator's control message).
func (g *testGroup) deal(t testing.TB, i int) []byte {
	seeds, err := blind.Seeds(g.privs[i], i, g.pubs, g.in)
	if err != nil {
		t.Fatal(err)
	}
	d, err := blind.Deal(g.in, i, seeds, g.self[i], g.pubs, blind.Threshold(len(g.pubs)), crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range d.Bundles {
		g.boxes[int(sb.To)] = append(g.boxes[int(sb.To)], sb)
	}
	return enc(t, &d.Commit)
}

// submit returns member i's submission bytes.
func (g *testGroup) submit(t testing.TB, i int) []byte {
	seeds, err := blind.Seeds(g.privs[i], i, g.pubs, g.in)
	if err != nil {
		t.Fatal(err)
	}
	return enc(t, &blind.Submission{Instance: g.in, Member: uint16(i), Y: blind.Blind(g.vs[i], i, seeds, g.self[i])})
}

// send applies member i's commitments (control) and then its submission.
func (g *testGroup) send(t testing.TB, p *Partition, i int) Result {
	p.Apply(g.deal(t, i), true)
	return p.Apply(g.submit(t, i), false)
}

func (g *testGroup) answer(t testing.TB, req blind.Request, h int) []byte {
	var opened []*blind.Bundle
	for _, sb := range g.boxes[h] {
		b, err := blind.OpenBundle(g.privs[h], g.in, uint16(h), sb)
		if err != nil {
			t.Fatal(err)
		}
		opened = append(opened, b)
	}
	a, err := blind.MakeAnswer(&req, h, opened)
	if err != nil {
		t.Fatal(err)
	}
	return enc(t, a)
}

// answerAll applies answers of members hs until an outcome appears.
func (g *testGroup) answerAll(t testing.TB, p *Partition, req blind.Request, hs []int) []blind.Outcome {
	for _, h := range hs {
		if out := p.Apply(g.answer(t, req, h), false).Outcomes; len(out) > 0 {
			return out
		}
	}
	return nil
}

func sumOf(vs [][]uint64, keep func(int) bool) []uint64 {
	out := make([]uint64, len(vs[0]))
	for i, v := range vs {
		if keep(i) {
			for k, c := range v {
				out[k] += c
			}
		}
	}
	return out
}

func TestCompleteGroup(t *testing.T) {
	g := newTestGroup(t, rand.New(rand.NewPCG(1, 1)), 6, 40, 100)
	p := NewPartition()
	p.Apply(enc(t, &g.roster), true)
	var res Result
	for i := 5; i >= 0; i-- {
		res = g.send(t, p, i)
		if i > 0 && (len(res.Outcomes) != 0 || len(res.Requests) != 0) {
			t.Fatal("outcome or request before every member submitted")
		}
	}
	// every member submitted: an unmasking request with nobody dropped
	if len(res.Outcomes) != 0 || len(res.Requests) != 1 || len(res.Requests[0].Dropped) != 0 {
		t.Fatalf("after the last submission: %+v", res)
	}
	out := g.answerAll(t, p, res.Requests[0], []int{4, 1, 0, 5, 2, 3})
	if len(out) != 1 || out[0].Status != blind.StatusComplete || out[0].Decrypted != 6 {
		t.Fatalf("outcome %+v", out)
	}
	if want := sumOf(g.vs, func(int) bool { return true }); !reflect.DeepEqual(out[0].Sum, want) {
		t.Fatal("complete sum != Σ V_i")
	}
	if p.Open() != 0 {
		t.Fatal("group still open")
	}
	// a late duplicate is counted, not summed
	p.Apply(g.submit(t, 0), false)
	if p.Stats.Dropped[DropLate] != 1 {
		t.Fatalf("dropped %v", p.Stats.Dropped)
	}
}

// Members dropped at random: each recovered group sum equals the exact sum
// over its submitting members.
func TestRecoveredGroupsEqualSurvivorSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for trial := 0; trial < 8; trial++ {
		n := 4 + rng.IntN(9)
		g := newTestGroup(t, rng, n, 30, 200)
		p := NewPartition()
		p.Apply(enc(t, &g.roster), true)
		nd := 1 + rng.IntN(n-blind.Threshold(n))
		dropped := map[int]bool{}
		for _, d := range rng.Perm(n)[:nd] {
			dropped[d] = true
		}
		for i := 0; i < n; i++ {
			if !dropped[i] {
				if res := g.send(t, p, i); len(res.Outcomes) != 0 || len(res.Requests) != 0 {
					t.Fatal("outcome or request with members missing")
				}
			}
		}
		// the deadline is round+3: tick round+3 keeps waiting, round+4 starts recovery
		if res := p.Apply(enc(t, &blind.Tick{Day: 203}), true); len(res.Requests) != 0 {
			t.Fatal("recovery before the deadline passed")
		}
		res := p.Apply(enc(t, &blind.Tick{Day: 204}), true)
		if len(res.Requests) != 1 || len(res.Requests[0].Dropped) != nd {
			t.Fatalf("trial %d: requests %+v", trial, res.Requests)
		}
		req := res.Requests[0]
		// a late submission after the deadline is not summed
		for i := range dropped {
			p.Apply(g.submit(t, i), false)
			break
		}
		var hs []int
		for _, h := range rng.Perm(n) {
			if !dropped[h] {
				hs = append(hs, h)
			}
		}
		out := g.answerAll(t, p, req, hs)
		if len(out) != 1 || out[0].Status != blind.StatusRecovered || int(out[0].Decrypted) != n-nd {
			t.Fatalf("trial %d: outcomes %+v", trial, out)
		}
		if want := sumOf(g.vs, func(i int) bool { return !dropped[i] }); !reflect.DeepEqual(out[0].Sum, want) {
			t.Fatalf("trial %d: recovered sum != Σ over %d survivors", trial, n-nd)
		}
	}
}

func TestLostGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	// fewer than T submitted: lost at the deadline, no recovery request
	g := newTestGroup(t, rng, 6, 10, 300)
	p := NewPartition()
	p.Apply(enc(t, &g.roster), true)
	g.send(t, p, 0)
	g.send(t, p, 1)
	res := p.Apply(enc(t, &blind.Tick{Day: 304}), true)
	if len(res.Requests) != 0 || len(res.Outcomes) != 1 || res.Outcomes[0].Status != blind.StatusLost || res.Outcomes[0].Sum != nil {
		t.Fatalf("%+v", res)
	}
	// recovery that nobody answers: lost after RecoverBy
	g = newTestGroup(t, rng, 6, 10, 400)
	p.Apply(enc(t, &g.roster), true)
	for i := 0; i < 5; i++ {
		g.send(t, p, i)
	}
	if res := p.Apply(enc(t, &blind.Tick{Day: 404}), true); len(res.Requests) != 1 {
		t.Fatalf("%+v", res)
	}
	res = p.Apply(enc(t, &blind.Tick{Day: 405}), true)
	if len(res.Outcomes) != 1 || res.Outcomes[0].Status != blind.StatusLost {
		t.Fatalf("%+v", res)
	}
}

func TestMalformedCountedAndDropped(t *testing.T) {
	p := NewPartition()
	g := newTestGroup(t, rand.New(rand.NewPCG(4, 4)), 3, 5, 1)
	for _, b := range [][]byte{nil, {1}, {1, 99}, []byte("garbage")} {
		p.Apply(b, false)
	}
	p.Apply(g.submit(t, 0), false) // before its roster: unknown
	bad := &blind.Submission{Instance: g.in, Member: 7, Y: make([]uint64, 5)}
	p.Apply(enc(t, &g.roster), true)
	p.Apply(enc(t, bad), false)
	// a roster, tick or commitments through the relays (not control) is refused
	p.Apply(enc(t, &blind.Tick{Day: 99}), false)
	p.Apply(g.deal(t, 1), false)
	// a submission whose commitments never arrived
	p.Apply(g.submit(t, 2), false)
	if p.Stats.Dropped[DropMalformed] != 4 || p.Stats.Dropped[DropUnknown] != 1 || p.Stats.Dropped[DropBadMember] != 1 ||
		p.Stats.Dropped[DropKind] != 2 || p.Stats.Dropped[DropUncommitted] != 1 {
		t.Fatalf("dropped %v", p.Stats.Dropped)
	}
}

func FuzzApply(f *testing.F) {
	g := newTestGroup(f, rand.New(rand.NewPCG(5, 5)), 3, 4, 1)
	f.Add(enc(f, &g.roster))
	f.Add(g.submit(f, 1))
	f.Add(g.deal(f, 1))
	f.Add(enc(f, &blind.Tick{Day: 9}))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := NewPartition()
		p.Apply(enc(t, &g.roster), true)
		p.Apply(b, false)
		p.Apply(b, true)
		p.Apply(enc(t, &blind.Tick{Day: 100}), true)
	})
}
