package issuer

import (
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// TestIssuerHoldsOwnKinds: an issuer on the randomness operator's keys
// directory (keydir.GenerateRole; enrollment imported from the attester)
// issues randomness tokens that verify under its key, refuses report
// tokens and ARC credentials (ReasonKind: the aggregator's operator issues
// those) and cannot answer the two-kind keys request alone.
func TestIssuerHoldsOwnKinds(t *testing.T) {
	e := newEnv(t)
	root := t.TempDir()
	rnd, agg, att := filepath.Join(root, "randomness"), filepath.Join(root, "aggregator"), filepath.Join(root, "attester")
	for dir, role := range map[string]string{rnd: keydir.RoleRandomness, agg: keydir.RoleAggregator, att: keydir.RoleAttester} {
		if err := keydir.GenerateRole(dir, role); err != nil {
			t.Fatal(err)
		}
	}
	e.keys = att
	alice := e.identity(true) // enrolled at the attester
	if _, err := keydir.ExportPublic(att, att+".public"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := keydir.ImportPublic(rnd, att+".public"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{rnd, agg} {
		if err := keydir.EnsureIssuerKeys(d, epoch); err != nil {
			t.Fatal(err)
		}
	}
	e.keys = rnd
	s, stop := e.start(Limits{RandomnessTokens: 10, ReportTokens: 10})
	defer stop()
	nc := e.conn()
	if err := e.tokens(nc, alice, token.KindRandomness, 3); err != nil {
		t.Fatalf("randomness tokens at the randomness operator: %v", err)
	}
	// a report-token request blinded under the aggregator's report key
	repKey, err := keydir.LoadTokenKey(agg, token.KindReport, epoch)
	if err != nil {
		t.Fatal(err)
	}
	var nonce [32]byte
	rand.Read(nonce[:])
	_, blinded, err := token.NewRequest(repKey.Public(), token.KindReport, epoch, [][32]byte{nonce})
	if err != nil {
		t.Fatal(err)
	}
	q := &token.IssueRequest{Kind: token.KindReport, Epoch: epoch, Timestamp: now(), Blinded: blinded}
	if err := q.Sign(alice); err != nil {
		t.Fatal(err)
	}
	b, _ := q.MarshalBinary()
	if err := e.ask(nc, b).Err(); err == nil || !strings.Contains(err.Error(), ErrKindNotHeld.Error()) {
		t.Fatalf("report tokens at the randomness operator: %v, want a refusal naming %q", err, ErrKindNotHeld)
	}
	if got := s.RefusedBy(ReasonKind); got != 1 {
		t.Errorf("refused %s = %d, want 1", ReasonKind, got)
	}
	kb, _ := (&token.KeysRequest{Epoch: epoch}).MarshalBinary()
	m, err := nc.RequestWithContext(e.ctx, protocol.IssuerPublicKeySubject, kb)
	if err != nil {
		t.Fatal(err)
	}
	kr, err := token.ParseKeysResponse(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if kr.Err() == nil || !strings.Contains(kr.Err().Error(), "only some") {
		t.Errorf("keys request at a one-kind issuer: %v", kr.Err())
	}
}
