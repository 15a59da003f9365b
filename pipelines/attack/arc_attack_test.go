package attack

import (
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// arcReport seals q's FT_u report as a client holding c's ARC credential
// does (one presentation for the artifact, its tag giving x), with a report
// token of c bound to it.
func (e *tokenEnv) arcReport(c *tokenclient.Client, s *star.Sealing, q, variant string) *star.Report {
	e.t.Helper()
	cred := e.creds[c]
	if cred == nil {
		var err error
		if cred, err = c.Credential(e.ctx, e.epoch); err != nil {
			e.t.Fatalf("ARC credential: %v", err)
		}
		e.creds[c] = cred // one per identity and epoch: kept
	}
	p, err := cred.Present(rand.Reader, s.ARCContext(), 0, 1)
	if err != nil {
		e.t.Fatal(err)
	}
	r, err := s.SealARC(p.Tag(), q, variant)
	if err != nil {
		e.t.Fatal(err)
	}
	if r.Presentation, err = p.MarshalBinary(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.withReportToken(c, r); err != nil {
		e.t.Fatalf("report token: %v", err)
	}
	return r
}

// groupShares is the number of distinct shares (FT_u users) the partition
// holds for the tag of s, pending or opened (opened: -1).
func groupShares(p *aggregator.Partition, s *star.Sealing) int {
	tag := fmt.Sprintf("%x", s.Tag[:])
	for _, g := range p.Pending() {
		if g.Tag == tag {
			return g.Shares
		}
	}
	return -1
}

// TestAttackManySecrets: one enrolled identity tries to count as 50 FT_u
// users of one artifact. With its one ARC credential of the epoch it
// sends 50 reports as the client does (each with a fresh presentation of
// the artifact's context: same tag, same x) and 50 more sealed under 50
// self-chosen user secrets carrying that presentation; the issuer refuses
// it a second credential. The aggregator (real Partition verifying
// presentations under the epoch's ARC key, k = 60 so the group stays
// pending and its count is visible) counts 1 user. Control: without
// tokens (the code before them) the 50 secrets count 50 users.
func TestAttackManySecrets(t *testing.T) {
	const secrets, k = 50, 60
	e := newTokenEnv(t, issuer.Limits{RandomnessTokens: 10, ReportTokens: 2*secrets + 1})
	att := e.identity(true)
	q := "made up many secrets"
	s := e.sealing(q, star.FTu, k)
	p, ctl := e.newPartition(true), e.newPartition(false)
	var opened []protocol.Decrypted
	for i := range secrets {
		r := e.arcReport(att, s, q, fmt.Sprint("arc ", i))
		opened = append(opened, p.ApplyReport(r)...)
		// the same presentation on a report sealed under a secret of its own
		u, _ := star.NewUserSecret()
		r2, err := s.Seal(&u, q, fmt.Sprint("secret ", i))
		if err != nil {
			t.Fatal(err)
		}
		r2.Presentation = r.Presentation
		if err := e.withReportToken(att, r2); err != nil {
			t.Fatal(err)
		}
		opened = append(opened, p.ApplyReport(r2)...)
		r2.Token, r2.Presentation = nil, nil
		ctl.ApplyReport(r2)
	}
	_, errCred := att.Credential(e.ctx, e.epoch) // a second credential: refused
	got, ctlGot := groupShares(p, s), groupShares(ctl, s)
	fmt.Printf("ATTACK many-secrets: one identity with %d secrets added %d to an FT_u count (%d reports accepted, %d dropped bad-presentation; a second ARC credential refused: %v); without tokens: %d\n",
		secrets, got, p.Stats.Reports, p.Stats.Dropped["bad-presentation"], errCred != nil, ctlGot)
	if ctlGot != secrets {
		t.Fatalf("control: without tokens %d secrets counted %d users", secrets, ctlGot)
	}
	if got != 1 || len(opened) != 0 || errCred == nil {
		t.Fatalf("with ARC: %d users counted (opened %d), second credential error %v; want 1 user and a refusal", got, len(opened), errCred)
	}
}

// TestAttackSybilIdentities: STAR's Sybil attack on a victim's unique
// FT_u artifact (k = 5) costs enrolled identities. With k−2 other
// identities (each its own ARC credential and report token) the artifact
// stays closed; one more identity, k−1 in all, opens it: the Sybil cost is
// k−1 enrolled identities. Control: without tokens (the code before issue
// 17) one client with k−1 self-chosen secrets opens it.
func TestAttackSybilIdentities(t *testing.T) {
	const k = 5
	e := newTokenEnv(t, issuer.Limits{RandomnessTokens: 10, ReportTokens: 10})
	q := "made up unique victim query"
	s := e.sealing(q, star.FTu, k)
	ids := e.identities(k)
	victim, sybils := ids[0], ids[1:]
	p := e.newPartition(true)
	var out []protocol.Decrypted
	out = append(out, p.ApplyReport(e.arcReport(victim, s, q, "the victim's original form"))...)
	// the attacker's one identity also adds k secrets' worth: counts once
	for i := range k - 2 {
		out = append(out, p.ApplyReport(e.arcReport(sybils[i], s, q, "sybil"))...)
		if i == 0 {
			for j := range k {
				out = append(out, p.ApplyReport(e.arcReport(sybils[0], s, q, fmt.Sprint("sybil again ", j)))...)
			}
		}
	}
	closedWith := len(out)
	out = append(out, p.ApplyReport(e.arcReport(sybils[k-2], s, q, "sybil"))...)
	victimOpened := false
	for _, d := range out {
		if d.Variant == "the victim's original form" {
			victimOpened = true
		}
	}
	// control: one client, k−1 secrets, no tokens
	ctl := e.newPartition(false)
	u, _ := star.NewUserSecret()
	r, _ := s.Seal(&u, q, "the victim's original form")
	ctlOut := ctl.ApplyReport(r)
	for range k - 1 {
		u, _ := star.NewUserSecret()
		r, _ := s.Seal(&u, q, "sybil")
		ctlOut = append(ctlOut, ctl.ApplyReport(r)...)
	}
	fmt.Printf("ATTACK sybil-identities: a victim's unique FT_u artifact (k=%d) stayed closed with %d other enrolled identities (%d reports opened) and opened with %d (victim's report opened: %v); without tokens: 1 client with %d secrets opened %d reports\n",
		k, k-2, closedWith, k-1, victimOpened, k-1, len(ctlOut))
	if len(ctlOut) != k {
		t.Fatalf("control: one client with k−1 secrets opened %d reports, want %d", len(ctlOut), k)
	}
	if closedWith != 0 {
		t.Fatalf("with k−2 Sybil identities %d reports opened", closedWith)
	}
	if !victimOpened {
		t.Fatal("k−1 Sybil identities did not open the artifact: the test's honest path is broken")
	}
}
