package star

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

func arcSealing(t *testing.T, artifact string, policy Policy, k int) Sealing {
	t.Helper()
	s, err := DeriveSealing(LocalOmega("query", "2006-03", artifact), "query", "2006-03", policy, k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestShareXFromARC: x is a function of the ARC tag alone — equal for equal
// tags, different for different ones — and equals its definition
// HashToScalar(arcTag, "crowdlog-v1 arc x") computed here directly.
func TestShareXFromARC(t *testing.T) {
	s := arcSealing(t, "made-up query", FTu, 3)
	a, b := bytes.Repeat([]byte{2}, 33), bytes.Repeat([]byte{3}, 33)
	if !s.ShareXFromARC(a).IsEqual(s.ShareXFromARC(append([]byte(nil), a...))) {
		t.Error("same ARC tag, different x")
	}
	if s.ShareXFromARC(a).IsEqual(s.ShareXFromARC(b)) {
		t.Error("different ARC tags, same x")
	}
	if !s.ShareXFromARC(a).IsEqual(protocol.G.HashToScalar(a, []byte("crowdlog-v1 arc x"))) {
		t.Error("x is not HashToScalar(tag, \"crowdlog-v1 arc x\")")
	}
	h := sha256.Sum256(append([]byte("crowdlog-v1 arc unit"), a...))
	if u := s.UnitIDFromARC(a); !bytes.Equal(u[:], h[:16]) {
		t.Errorf("unit id %x, want SHA-256(label ‖ tag)[:16] = %x", u, h[:16])
	}
	if s.UnitIDFromARC(a) == s.UnitIDFromARC(b) {
		t.Error("different ARC tags, same unit id")
	}
}

// TestSealARC: the report's share has x = ShareXFromARC(tag) and lies on the
// sealing's polynomial (checked against the Feldman commitment with vss);
// the payload carries Unit = UnitIDFromARC(tag).
func TestSealARC(t *testing.T) {
	s := arcSealing(t, "made-up query", FTu, 3)
	tag := bytes.Repeat([]byte{7}, 33)
	r, err := s.SealARC(tag, "made-up query", "Made-Up Query")
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	r, err = ParseReport(b)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Share.X.IsEqual(s.ShareXFromARC(tag)) {
		t.Error("share x is not ShareXFromARC(tag)")
	}
	if err := r.CheckARCShare(tag); err != nil {
		t.Error(err)
	}
	if err := r.CheckARCShare(bytes.Repeat([]byte{8}, 33)); err == nil {
		t.Error("CheckARCShare accepted another tag")
	}
	c, err := vss.NewCommitment(r.Commitment, int(r.K))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.VerifyShare(r.Share); err != nil || !ok {
		t.Errorf("share not on the committed polynomial: ok=%v err=%v", ok, err)
	}
	if !bytes.Equal(r.Commitment, s.Commitment()) {
		t.Error("report commitment is not the sealing's")
	}
	p, err := OpenPayload(s.key, r)
	if err != nil {
		t.Fatal(err)
	}
	if p.Unit != s.UnitIDFromARC(tag) || p.Primary != "made-up query" {
		t.Errorf("payload %+v, want unit %x", p, s.UnitIDFromARC(tag))
	}
	fta := arcSealing(t, "made-up query", FTa, 3)
	if _, err := fta.SealARC(tag, "q", "q"); err == nil {
		t.Error("SealARC on an FT_a sealing did not fail")
	}
	if _, err := s.SealARC(nil, "q", "q"); err == nil {
		t.Error("SealARC without a tag did not fail")
	}
}

// TestARCContext: the context names the release context and the artifact
// tag (different artifacts, policies or k give different contexts) and the
// aggregator recomputes it from the report alone.
func TestARCContext(t *testing.T) {
	s := arcSealing(t, "made-up query", FTu, 3)
	want := append([]byte("crowdlog-v1 arc"), 5)
	want = append(want, "query"...)
	want = append(want, 7)
	want = append(want, "2006-03"...)
	want = append(want, byte(FTu), 0, 3)
	want = append(want, s.Tag[:]...)
	if !bytes.Equal(s.ARCContext(), want) {
		t.Errorf("ARCContext %x, want %x", s.ARCContext(), want)
	}
	for _, o := range []Sealing{arcSealing(t, "another made-up query", FTu, 3), arcSealing(t, "made-up query", FTu, 4)} {
		if bytes.Equal(o.ARCContext(), s.ARCContext()) {
			t.Errorf("sealings with k=%d and tag %x share an ARC context", o.K, o.Tag[:4])
		}
	}
	r, _ := s.SealARC([]byte{1}, "q", "q")
	if !bytes.Equal(r.ARCContext(), s.ARCContext()) {
		t.Error("Report.ARCContext differs from the sealing's")
	}
}

// TestSealARCOneCredential is the FT_u Sybil property end to end: a client
// with one credential that seals an artifact as 50 "users" (50
// presentations) adds one share x and one unit; a second credential adds a
// second; each report's presentation verifies under the report's own
// context and its share is bound to its tag.
func TestSealARCOneCredential(t *testing.T) {
	sk, err := arc.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	credential := func() *arc.Credential {
		secrets, req, _ := arc.NewCredentialRequest(rand.Reader)
		resp, err := sk.Issue(rand.Reader, req)
		if err != nil {
			t.Fatal(err)
		}
		c, err := secrets.Finalize(sk.Public(), req, resp)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	s := arcSealing(t, "made-up query", FTu, 3)
	xs := map[string]bool{}
	for ci, cred := range []*arc.Credential{credential(), credential()} {
		n := 50
		if ci == 1 {
			n = 2
		}
		for i := 0; i < n; i++ {
			p, err := cred.Present(rand.Reader, s.ARCContext(), 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			r, err := s.SealARC(p.Tag(), "made-up query", "made-up query")
			if err != nil {
				t.Fatal(err)
			}
			if r.Presentation, err = p.MarshalBinary(); err != nil {
				t.Fatal(err)
			}
			b, _ := r.MarshalBinary()
			got, err := ParseReport(b)
			if err != nil {
				t.Fatal(err)
			}
			gp, err := arc.ParsePresentation(got.Presentation)
			if err != nil {
				t.Fatal(err)
			}
			if err := sk.VerifyPresentation(gp, got.ARCContext(), 1); err != nil {
				t.Fatalf("credential %d report %d: %v", ci, i, err)
			}
			if err := got.CheckARCShare(gp.Tag()); err != nil {
				t.Fatal(err)
			}
			x, _ := got.Share.X.MarshalBinary()
			xs[string(x)] = true
		}
	}
	if len(xs) != 2 {
		t.Errorf("two credentials gave %d distinct share x, want 2", len(xs))
	}
}
