package aggregator

import (
	"crypto/rand"
	"fmt"
	"sort"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// TestAttackJunkPresentations: verification at the threshold against a
// flood of junk under a victim's artifact (FT_u, k = 5, report tokens and
// ARC presentations on, a real Partition under the epoch's keys). The
// attacker knows the artifact (it seals under its tag) and the
// presentation tags of 4 of the 5 honest users. Before those users' reports
// it sends, under each of their tags, 2 reports with junk presentations
// carrying the victim's tag (one with a valid report token of its own
// enrolled identities, one with a forged token); then 20 reports at fresh
// tags with junk presentations and forged tokens and 20 with valid tokens,
// so the group passes k distinct candidate shares again and again. The
// artifact must not open before the 5th honest report and must open at it
// with exactly the honest reports, and each report must cost at most one
// token verification and one ARC verification, a forged token none of the
// latter. Control: a verifier whose failed candidate pre-empts its x
// (every report there dropped with it) never opens the artifact.
func TestAttackJunkPresentations(t *testing.T) {
	j := newJunkScenario(t)
	k, junk, junkValid, junkForged, victims := j.k, j.junk, j.junkValid, j.junkForged, j.victims
	msgs, last, honestIDs := j.msgs, j.last, j.honestIDs
	run := func(control bool) (*Partition, []protocol.Decrypted, []protocol.Decrypted) {
		p := j.partition()
		p.preemptControl = control
		var before []protocol.Decrypted
		for _, m := range msgs {
			before = append(before, p.Apply(m)...)
		}
		return p, before, p.Apply(last)
	}
	p, before, at := run(false)
	var got []string
	for _, d := range at {
		got = append(got, d.Report)
	}
	sort.Strings(got)
	sort.Strings(honestIDs)
	tokenChecks, arcChecks := p.tokenChecks.Load(), p.arcChecks.Load()
	reports := int64(junk + k)
	// a forged token never reaches its ARC check: at most the valid-token
	// junk and the honest reports cost one each
	arcBound := int64(junkValid + k)
	_, ctlBefore, ctlAt := run(true)
	fmt.Printf("ATTACK junk-presentations: %d junk reports under a victim's FT_u artifact (k = %d; %d of them copying %d victims' presentation tags, sent before them) decrypted %d reports before the %dth honest one and did not stop it opening at it (%d of %d honest reports decrypted, 0 junk); cost %d token and %d ARC verifications for %d reports (%d forged tokens: 0 ARC); control (a failed candidate pre-empts its x): %d decrypted\n",
		junk, k, 2*victims, victims, len(before), k, len(got), k, tokenChecks, arcChecks, reports, junkForged, len(ctlBefore)+len(ctlAt))
	if len(ctlBefore)+len(ctlAt) != 0 {
		t.Fatalf("control: a verifier whose failed candidates pre-empt their x decrypted %d reports; the attack should block it", len(ctlBefore)+len(ctlAt))
	}
	if len(before) != 0 {
		t.Fatalf("the artifact opened below k verified users: %d reports decrypted", len(before))
	}
	if fmt.Sprint(got) != fmt.Sprint(honestIDs) {
		t.Fatalf("at the %dth honest report decrypted %v, want the honest %v", k, got, honestIDs)
	}
	if tokenChecks > reports || arcChecks > arcBound {
		t.Fatalf("%d token and %d ARC verifications for %d reports: want at most %d and %d", tokenChecks, arcChecks, reports, reports, arcBound)
	}
}

// junkScenario is the message sequence of TestAttackJunkPresentations:
// msgs (junk copies of the victims' tags, the victims, the flood), then
// last (the kth honest report).
type junkScenario struct {
	k, victims, junk, junkValid, junkForged int
	msgs                                    []Message
	last                                    Message
	honestIDs                               []string
	partition                               func() *Partition
}

func newJunkScenario(t *testing.T) *junkScenario {
	const k, flood, victims = 5, 20, 4
	onionKey, _ := onion.GenerateKeyPair(1)
	reportKey, _ := token.GenerateKey(token.KindReport, "e1")
	arcKey, _ := arc.GenerateKey(rand.Reader)
	s := sealing(t, "victim artifact", star.FTu, k)

	var msgs []Message
	var honestIDs []string
	var junk, junkValid, junkForged int
	add := func(r *star.Report) { msgs = append(msgs, Message{Value: wrap(t, onionKey, r)}) }
	// report seals at arcTag with presentation pres and a token: valid
	// (minted under the epoch's key) or forged (one authenticator bit off)
	report := func(arcTag, pres []byte, valid bool) *star.Report {
		r, err := s.SealARC(arcTag, "victim artifact", "v")
		if err != nil {
			t.Fatal(err)
		}
		payWith(t, reportKey, r)
		if !valid {
			r.Token[len(r.Token)-1] ^= 1
		}
		r.Presentation = pres
		return r
	}
	junkPres := func(arcTag []byte) []byte {
		b := make([]byte, arc.PresentationSize(1))
		rand.Read(b)
		copy(b[3*arc.ElementSize:], arcTag)
		return b
	}
	addJunk := func(arcTag []byte, valid bool) {
		add(report(arcTag, junkPres(arcTag), valid))
		junk++
		if valid {
			junkValid++
		} else {
			junkForged++
		}
	}
	type honest struct{ pres, tag []byte }
	var users []honest
	for range k {
		pres, tag := present(t, credential(t, arcKey), &s)
		users = append(users, honest{pres, tag})
	}
	// copies of the victims' tags first, then the victims, then the flood
	for _, u := range users[:victims] {
		addJunk(u.tag, true)
		addJunk(u.tag, false)
	}
	for _, u := range users[:victims] {
		r := report(u.tag, u.pres, true)
		honestIDs = append(honestIDs, fmt.Sprintf("%x", r.ID))
		add(r)
	}
	for i := range 2 * flood {
		tag := make([]byte, arc.ElementSize)
		rand.Read(tag)
		addJunk(tag, i%2 == 0)
	}
	last := report(users[k-1].tag, users[k-1].pres, true)
	honestIDs = append(honestIDs, fmt.Sprintf("%x", last.ID))
	return &junkScenario{k: k, victims: victims, junk: junk, junkValid: junkValid, junkForged: junkForged,
		msgs: msgs, last: Message{Value: wrap(t, onionKey, last)}, honestIDs: honestIDs,
		partition: func() *Partition {
			p := NewPartition(0, 1, []*onion.KeyPair{onionKey})
			p.ReportKeys = keysOf(reportKey)
			p.ARCKeys = func(string) (*arc.PrivateKey, error) { return arcKey, nil }
			return p
		}}
}
