package star

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"testing"

	circloprf "github.com/cloudflare/circl/oprf"
	"github.com/crowdlog/crowdlog/protocol/internal/oprftest"
	"github.com/crowdlog/crowdlog/protocol/oprf"
)

func FuzzParseReport(f *testing.F) {
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	s, _ := DeriveSealing(oprftest.OmegaFor(f, key, "query", "e", "x"), "query", "e", FTu, 3)
	u, _ := NewUserSecret()
	r, _ := s.Seal(&u, "x", "X")
	b, _ := r.MarshalBinary()
	f.Add(b)
	f.Add([]byte{1})
	r.Token = bytes.Repeat([]byte{0xAA}, 162) // with the trailing section
	b, _ = r.MarshalBinary()
	f.Add(b)
	r.Token, r.Presentation = nil, []byte{1, 2, 3}
	b, _ = r.MarshalBinary()
	f.Add(b)
	// version 3: sealed for a pipeline digest, the digest after k
	sp, _ := DeriveSealingIn(oprftest.OmegaFor(f, key, "query", "e", "x"), Context{App: "query", Epoch: "e", Policy: FTu, K: 3, Pipeline: sha256.Sum256([]byte("crowdlog-v1 pipeline\napp=query\noptions=\npolicy=ft-u\nshamir_k=3\n"))})
	rp, _ := sp.Seal(&u, "x", "X")
	b, _ = rp.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReport(b)
		if err != nil {
			return
		}
		out, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseReport(out)
		if err != nil {
			t.Fatalf("re-encoded report does not parse: %v", err)
		}
		if back.Pipeline != r.Pipeline {
			t.Fatalf("pipeline digest changed on re-encoding: %x → %x", r.Pipeline, back.Pipeline)
		}
		if !bytes.Equal(back.Token, r.Token) || !bytes.Equal(back.Presentation, r.Presentation) {
			t.Fatalf("trailer changed on re-encoding: token %x → %x, presentation %x → %x", r.Token, back.Token, r.Presentation, back.Presentation)
		}
		unsigned, err := r.UnsignedBytes()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(out, unsigned) || (len(r.Token) == 0 && len(r.Presentation) == 0) != (len(out) == len(unsigned)) {
			t.Fatalf("UnsignedBytes (%d bytes) is not the encoding (%d bytes) without its trailer", len(unsigned), len(out))
		}
	})
}

func FuzzParsePayload(f *testing.F) {
	p := Payload{Primary: "a", Secondary: "A"}
	b, _ := p.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := ParsePayload(b); err == nil {
			if _, err := p.MarshalBinary(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
