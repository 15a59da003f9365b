package attack

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/release/stage"
)

// releasedUsers runs the aggregator's output through the release stage's
// state (one partition, closed) and returns the users count it releases
// for item q (0 when q is not released).
func releasedUsers(t *testing.T, out []protocol.Decrypted, app, epoch, q string) uint64 {
	t.Helper()
	st := stage.NewState()
	for _, d := range out {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		st.Apply(b)
	}
	b, _ := json.Marshal(protocol.Decrypted{Kind: protocol.KindClosed, App: app, Epoch: epoch, Partition: 0, Partitions: 1})
	if _, _, done := st.Apply(b); !done {
		t.Fatal("the release stage did not complete the epoch")
	}
	items, _ := st.Release(app, epoch)
	for _, it := range items {
		if it.Item == q {
			return it.Users
		}
	}
	return 0
}

// TestAttackUnitInflation: one enrolled identity (one ARC credential,
// several report tokens) tries to make a released FT_u artifact show more
// distinct users than there are credentials behind it. Besides its honest
// report it sends forged reports at its own x (the x its presentation tag
// gives, so they pass as repeated impressions) whose sealed unit ids are
// fresh random ones — three while the group is pending, three after it
// opened. With two honest identities the artifact opens at k = 3; the real
// aggregator (presentations verified under the epoch's ARC key) checks
// every decrypted unit id against star.ARCUnitID of the verified tag and
// the release stage counts what comes out: the attacker adds 1 to the
// released users count. Control: a partition that does not bind unit ids
// (no ARC keys, the same reports without token or presentation) releases
// every forged unit as a user.
func TestAttackUnitInflation(t *testing.T) {
	const k, forged = 3, 6
	e := newTokenEnv(t, issuer.Limits{RandomnessTokens: 10, ReportTokens: forged + 2})
	q := "made up inflated query"
	s := e.sealing(q, star.FTu, k)
	ids := e.identities(3)
	honest, att := ids[:2], ids[2]

	p, ctl := e.newPartition(true), e.newPartition(false)
	var out, ctlOut []protocol.Decrypted
	apply := func(r *star.Report) {
		out = append(out, p.ApplyReport(r)...)
		c := *r
		c.Token, c.Presentation = nil, nil
		ctlOut = append(ctlOut, ctl.ApplyReport(&c)...)
	}
	own := e.arcReport(att, s, q, q)
	forge := func(n int) {
		for range n {
			var unit [16]byte
			rand.Read(unit[:])
			r, err := s.SealAt(own.Share.X, unit, q, q)
			if err != nil {
				t.Fatal(err)
			}
			r.Presentation = own.Presentation
			if err := e.withReportToken(att, r); err != nil {
				t.Fatalf("report token: %v", err)
			}
			apply(r)
		}
	}
	apply(e.arcReport(honest[0], s, q, q))
	apply(own)
	forge(forged / 2) // pending: checked when the group opens
	apply(e.arcReport(honest[1], s, q, q))
	forge(forged - forged/2) // opened: checked on arrival

	got := releasedUsers(t, out, s.App, s.Epoch, q)
	ctlGot := releasedUsers(t, ctlOut, s.App, s.Epoch, q)
	fmt.Printf("ATTACK unit-inflation: 1 identity with %d forged unit ids on one FT_u artifact (k=%d, 2 honest identities) released %d users from 3 credentials (%d reports dropped unit-mismatch); unbound unit ids: %d users\n",
		forged, k, got, p.Stats.Dropped["unit-mismatch"], ctlGot)
	if ctlGot != 3+forged {
		t.Fatalf("control: unbound unit ids released %d users, want %d (every forged unit counted)", ctlGot, 3+forged)
	}
	if got != 3 || p.Stats.Dropped["unit-mismatch"] != forged {
		t.Fatalf("with ARC: %d users released, %d unit-mismatch drops; want 3 users (one per credential) and %d drops", got, p.Stats.Dropped["unit-mismatch"], forged)
	}
}
