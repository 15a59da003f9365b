package star

import (
	"crypto/rand"
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
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReport(b)
		if err != nil {
			return
		}
		out, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseReport(out); err != nil {
			t.Fatalf("re-encoded report does not parse: %v", err)
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
