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

// TestIssuerHoldsOwnKinds: an issuer on the aggregator's operator's keys
// directory (keydir.GenerateRole; enrollment imported from the attester)
// issues report tokens that verify under its key, refuses randomness
// tokens (ReasonKind: the randomness operator issues those, on
// protocol.IssuerRandomnessSubject) and publishes keys without the
// randomness-token key.
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
	if _, _, err := keydir.ImportPublic(agg, att+".public"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{rnd, agg} {
		if err := keydir.EnsureIssuerKeys(d, epoch); err != nil {
			t.Fatal(err)
		}
	}
	e.keys = agg
	s, stop := e.start(Limits{RandomnessTokens: 10, ReportTokens: 10})
	defer stop()
	nc := e.conn()
	if err := e.tokens(nc, alice, token.KindReport, 2); err != nil {
		t.Fatalf("report tokens at the aggregator's operator: %v", err)
	}
	// a randomness-token request blinded under the randomness operator's key
	rndKey, err := keydir.LoadTokenKey(rnd, token.KindRandomness, epoch)
	if err != nil {
		t.Fatal(err)
	}
	var nonce [32]byte
	rand.Read(nonce[:])
	_, blinded, err := token.NewRequest(rndKey.Public(), token.KindRandomness, epoch, [][32]byte{nonce})
	if err != nil {
		t.Fatal(err)
	}
	q := &token.IssueRequest{Kind: token.KindRandomness, Epoch: epoch, Timestamp: now(), Blinded: blinded}
	if err := q.Sign(alice); err != nil {
		t.Fatal(err)
	}
	b, _ := q.MarshalBinary()
	if err := e.ask(nc, b).Err(); err == nil || !strings.Contains(err.Error(), ErrKindNotHeld.Error()) {
		t.Fatalf("randomness tokens at the aggregator's operator: %v, want a refusal naming %q", err, ErrKindNotHeld)
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
	if err != nil || kr.Err() != nil {
		t.Fatalf("keys: %v %v", err, kr.Err())
	}
	if len(kr.Randomness) != 0 || len(kr.Report) == 0 || len(kr.ARC) == 0 {
		t.Errorf("keys of the aggregator's issuer: randomness %d, report %d, ARC %d bytes; want 0, >0, >0", len(kr.Randomness), len(kr.Report), len(kr.ARC))
	}
	if _, err := keydir.LoadTokenKey(agg, token.KindRandomness, epoch); err == nil {
		t.Error("the aggregator's directory loads a randomness-token key")
	}
}
