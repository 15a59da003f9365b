package star

import (
	"bytes"
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
	r.Token = bytes.Repeat([]byte{0xAA}, 162) // with the trailing section
	b, _ = r.MarshalBinary()
	f.Add(b)
	r.Token, r.Presentation = nil, []byte{1, 2, 3}
	b, _ = r.MarshalBinary()
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
