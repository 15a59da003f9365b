package star

import (
	"crypto/rand"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

// FuzzOpenSealedPayload fuzzes the payload parser behind the AEAD: the
// fuzzed bytes are sealed as a report's plaintext under the sealing's real
// key and associated data, so every input reaches ParsePayload through
// OpenPayload. Nothing may panic; what parses must re-encode to the same
// bytes.
func FuzzOpenSealedPayload(f *testing.F) {
	s, err := DeriveSealing(testvec.FixedBytes("omega", 64), "query", "2006-03", FTa, 1)
	if err != nil {
		f.Fatal(err)
	}
	var u UserSecret
	p := Payload{Primary: "a", Secondary: "b", Unit: s.UnitID(&u)}
	b, _ := p.MarshalBinary()
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, pt []byte) {
		r, err := s.Seal(&u, "x", "")
		if err != nil {
			t.Fatal(err)
		}
		if r.Ciphertext, err = sealAEAD(rand.Reader, s.key, r.associatedData(), pt); err != nil {
			t.Fatal(err)
		}
		got, err := OpenPayload(s.key, r)
		if err != nil {
			return
		}
		again, err := got.MarshalBinary()
		if err != nil {
			t.Fatalf("parsed payload does not re-encode: %v", err)
		}
		if string(again) != string(pt) {
			t.Fatalf("payload %x parsed and re-encoded as %x", pt, again)
		}
	})
}
