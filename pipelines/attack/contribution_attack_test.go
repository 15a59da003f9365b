package attack

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/release/policy"
)

// TestAttackContributionBound: dp-gsu's proof needs each user to add at
// most m distinct artifacts, each at most 1 to its count. One enrolled
// identity with the budgets `crowdlog run` gives under dp-gsu (m report
// and m randomness tokens, pol.Limit()) sends m + 5 reports of distinct
// artifacts, the last 5 without a token (the issuer refuses them) or with
// an earlier report's token; and one artifact twice (two ARC
// presentations of its context, two report tokens). The aggregator (real
// Partition, k = 60 so groups stay pending and their counts visible)
// accepts m reports and counts the repeated artifact once. Control:
// without tokens the m + 5 reports are all accepted and the artifact sent
// under two self-chosen secrets counts 2.
func TestAttackContributionBound(t *testing.T) {
	const k = 60
	pol, err := policy.New(policy.Params{Kind: policy.DPGSU, Epsilon: math.Ln10, D: 20, Users: 1000})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := pol.Limit()
	e := newTokenEnv(t, issuer.Limits{RandomnessTokens: m, ReportTokens: m})
	att := e.identity(true)
	p, ctl := e.newPartition(true), e.newPartition(false)
	cred, err := att.Credential(e.ctx, e.epoch)
	if err != nil {
		t.Fatal(err)
	}
	var first []byte
	refused := 0
	for i, q := range madeUp("made up contribution", m+5) {
		s := e.sealing(q, star.FTu, k)
		pr, err := cred.Present(rand.Reader, s.ARCContext(), 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.SealARC(pr.Tag(), q, q)
		if err != nil {
			t.Fatal(err)
		}
		if r.Presentation, err = pr.MarshalBinary(); err != nil {
			t.Fatal(err)
		}
		u, _ := star.NewUserSecret()
		c, err := s.Seal(&u, q, q)
		if err != nil {
			t.Fatal(err)
		}
		ctl.ApplyReport(c)
		if err := e.withReportToken(att, r); err != nil {
			if i < m || !errors.Is(err, token.ErrBudget) {
				t.Fatalf("report token %d of %d: %v", i+1, m, err)
			}
			refused++
			p.ApplyReport(r) // without a token
			r.Token = first  // with another report's token
			p.ApplyReport(r)
			continue
		}
		if first == nil {
			first = r.Token
		}
		p.ApplyReport(r)
	}
	// the same artifact twice, by a second identity with its own budget
	att2 := e.identity(true)
	q := "made up contribution repeated"
	s := e.sealing(q, star.FTu, k)
	p2, ctl2 := e.newPartition(true), e.newPartition(false)
	for i := range 2 {
		p2.ApplyReport(e.arcReport(att2, s, q, fmt.Sprint("again ", i)))
		u, _ := star.NewUserSecret()
		c, err := s.Seal(&u, q, q)
		if err != nil {
			t.Fatal(err)
		}
		ctl2.ApplyReport(c)
	}
	twice, ctlTwice := groupShares(p2, s), groupShares(ctl2, s)
	fmt.Printf("ATTACK contribution-bound: dp-gsu m=%d, one identity sent %d reports of distinct artifacts: %d accepted (%d report tokens refused; dropped %d no-token, %d bad-token); the same artifact twice added %d to its count; without tokens: %d of %d accepted, the artifact twice added %d\n",
		m, m+5, p.Stats.Reports, refused, p.Stats.Dropped["no-token"], p.Stats.Dropped["bad-token"], twice, ctl.Stats.Reports, m+5, ctlTwice)
	if ctl.Stats.Reports != int64(m+5) || ctlTwice != 2 {
		t.Fatalf("control: without tokens %d of %d accepted and the repeated artifact counted %d", ctl.Stats.Reports, m+5, ctlTwice)
	}
	if p.Stats.Reports != int64(m) || refused != 5 || twice != 1 {
		t.Fatalf("with tokens: %d reports accepted (%d refused, drops %v), repeated artifact counted %d; want %d, 5 and 1", p.Stats.Reports, refused, p.Stats.Dropped, twice, m)
	}
}
