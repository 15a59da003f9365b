package vectors

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/blind"
)

// TestAttackLateSubmitterUnmasked is the slow-member attack on PDD's
// recovery: member 3 deals its shares and sends its vector, but the vector
// reaches the aggregator after the group's deadline (a relay retry, an
// outage). The aggregator drops it as late — yet holds it, as Kafka does —
// and the survivors' answers to the recovery reveal everything about the
// pair masks between the survivors and member 3. The attacker is the
// aggregator after recovery: with the late vector and every seed the
// answers revealed (each combined from the verified shares), it strips
// member 3's pair masks and compares with member 3's true counts. With
// single masking (the protocol before double masking) this recovers the
// vector exactly; with double masking the self mask b_3 was never revealed
// (no holder reveals a dropped member's self-mask share), so the attack
// gets a vector that differs from the truth almost everywhere.
func TestAttackLateSubmitterUnmasked(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 21))
	const n, L, late = 6, 200, 3
	g := newTestGroup(t, rng, n, L, 500)
	p := NewPartition()
	p.Apply(enc(t, &g.roster), true)
	for i := 0; i < n; i++ {
		if i != late {
			g.send(t, p, i)
		}
	}
	p.Apply(g.deal(t, late), true) // it dealt in time…
	res := p.Apply(enc(t, &blind.Tick{Day: 504}), true)
	lateY := g.submit(t, late) // …but its vector arrives after the deadline
	p.Apply(lateY, false)
	if p.Stats.Dropped[DropLate] != 1 || len(res.Requests) != 1 {
		t.Fatalf("late vector not dropped as late (%v) or no request (%+v)", p.Stats.Dropped, res)
	}
	req := res.Requests[0]
	var hs []int
	for _, h := range req.Survivors() {
		hs = append(hs, int(h))
	}
	out := g.answerAll(t, p, req, hs)
	if len(out) != 1 || out[0].Status != blind.StatusRecovered {
		t.Fatalf("outcome %+v", out)
	}
	// the attacker's reconstruction from the aggregator's state: the late
	// vector minus every pair mask whose seed the recovery revealed
	m, _ := blind.Parse(lateY)
	guess := append([]uint64(nil), m.Submission.Y...)
	seeds, _ := blind.Seeds(g.privs[late], late, g.pubs, g.in) // = the revealed s_{i,late}, i ∈ S
	var prg blind.PRG
	for _, i := range hs {
		prg.AddMask(guess, seeds[i], -blind.Sign(late, i))
	}
	equal := 0
	for k := range guess {
		if guess[k] == g.vs[late][k] {
			equal++
		}
	}
	fmt.Printf("ATTACK late-submitter: after a recovery answered by %d survivors, the late member's vector matches the truth in %d of %d slots (exact unmasking would be %d of %d); its self-mask seed revealed: %v\n",
		len(hs), equal, L, L, L, reflect.DeepEqual(guess, g.vs[late]))
	if reflect.DeepEqual(guess, g.vs[late]) || equal > L/10 {
		t.Fatalf("the late member's vector was unmasked (%d of %d slots equal)", equal, L)
	}
}

// TestAttackCorruptShare is the holder that destroys its group's sum: among
// the t+1 holders that answer, the first flips one bit of one share. Before
// commitments, recovery combined the first t shares it got, so the group's
// sum came out wrong with no error. Now every share is checked against its
// dealer's commitment: the corrupt one is skipped, the sum is exact, and
// the holder is named in the outcome.
func TestAttackCorruptShare(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 22))
	const n, L = 7, 120
	g := newTestGroup(t, rng, n, L, 600)
	p := NewPartition()
	p.Apply(enc(t, &g.roster), true)
	for i := 0; i < n-1; i++ { // member 6 drops
		g.send(t, p, i)
	}
	req := p.Apply(enc(t, &blind.Tick{Day: 604}), true).Requests[0]
	T := blind.Threshold(n)
	var out []blind.Outcome
	evil := 2
	for k, h := range []int{evil, 0, 1, 3, 4}[:T+1] {
		b := g.answer(t, req, h)
		if k == 0 {
			m, _ := blind.Parse(b)
			m.Answer.Reveals[len(m.Answer.Reveals)-1].Share.Y[1] ^= 1 << 7
			b, _ = m.Answer.MarshalBinary()
		}
		out = append(out, p.Apply(b, false).Outcomes...)
	}
	want := sumOf(g.vs, func(i int) bool { return i != n-1 })
	exact := len(out) == 1 && reflect.DeepEqual(out[0].Sum, want)
	var named []uint16
	if len(out) == 1 {
		named = out[0].Bad
	}
	fmt.Printf("ATTACK corrupt-share: one flipped share among %d answering holders (t = %d): sum exact %v, bad shares %d, holders named %v\n",
		T+1, T, exact, p.Stats.BadShares, named)
	if !exact || !reflect.DeepEqual(named, []uint16{uint16(evil)}) {
		t.Fatalf("outcome %+v: exact %v, named %v", out, exact, named)
	}
}

// TestAttackOneSurvivorRecovery is the isolating request: an aggregator
// that names every member but one as dropped would receive that member's
// vector alone after unmasking. The aggregator's own state machine never
// issues it, the recovery refuses it, and every honest member refuses to
// answer it.
func TestAttackOneSurvivorRecovery(t *testing.T) {
	const n = 5
	req := blind.Request{Instance: blind.Instance{Campaign: "c", Round: 1}, N: n, T: blind.Threshold(n), Dropped: []uint16{0, 1, 2, 3}}
	answered := 0
	for m := 0; m < n; m++ {
		if _, err := blind.MakeAnswer(&req, m, nil); err == nil {
			answered++
		}
	}
	_, serr := blind.NewRecovery(req, nil)
	// the aggregator's state machine with one submission: lost, no request
	g := newTestGroup(t, rand.New(rand.NewPCG(23, 23)), n, 10, 700)
	p := NewPartition()
	p.Apply(enc(t, &g.roster), true)
	g.send(t, p, 4)
	res := p.Apply(enc(t, &blind.Tick{Day: 704}), true)
	fmt.Printf("ATTACK one-survivor: %d of %d members answered a one-survivor request; recovery refused: %v; aggregator issued %d request(s), outcome %v\n",
		answered, n, serr != nil, len(res.Requests), res.Outcomes[0].Status)
	if answered != 0 || serr == nil || len(res.Requests) != 0 || res.Outcomes[0].Status != blind.StatusLost {
		t.Fatal("a one-survivor recovery went through")
	}
}
