package oprf

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/cloudflare/circl/oprf"
	"github.com/crowdlog/crowdlog/protocol"
)

func FuzzParseRandomness(f *testing.F) {
	key, _ := oprf.GenerateKey(OPRFSuite, rand.Reader)
	_, q, _ := Blind(key.Public(), "e", [][]byte{[]byte("x"), []byte("y")})
	b, _ := q.MarshalBinary()
	f.Add(b)
	withTokens := &RandomnessRequest{Epoch: q.Epoch, Elements: q.Elements, Tokens: [][]byte{bytes.Repeat([]byte{0xC1}, 162), {1}}}
	b, _ = withTokens.MarshalBinary()
	f.Add(b)
	resp, _ := Evaluate(key, q)
	b, _ = resp.MarshalBinary()
	f.Add(b)
	for _, r := range []protocol.Refusal{{Error: "unknown epoch"}, {Closed: true}, {Expired: true}, {Future: true, Error: "not yet"}} {
		b, _ = (&RandomnessResponse{Refusal: r}).MarshalBinary()
		f.Add(b)
	}
	b, _ = (&PublicKeyRequest{Epoch: "e"}).MarshalBinary()
	f.Add(b)
	pk, _ := key.Public().MarshalBinary()
	b, _ = (&PublicKeyResponse{Epoch: "e", Key: pk}).MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		if q, err := ParseRandomnessRequest(b); err == nil {
			Evaluate(key, q) // invalid elements must be an error, not a panic
			out, err := q.MarshalBinary()
			if err != nil {
				t.Fatalf("parsed request does not re-encode: %v", err)
			}
			if !bytes.Equal(out, b) {
				t.Fatalf("request re-encodes differently (%d tokens)", len(q.Tokens))
			}
		} else if !errors.Is(err, protocol.ErrMalformed) {
			t.Fatalf("request error not wrapping ErrMalformed: %v", err)
		}
		if r, err := ParseRandomnessResponse(b); err == nil {
			out, err := r.MarshalBinary()
			if err != nil {
				t.Fatalf("parsed response does not re-encode: %v", err)
			}
			if !bytes.Equal(out, b) {
				t.Fatal("response re-encodes differently")
			}
			if !r.Refused() {
				bl, _, _ := Blind(key.Public(), "e", [][]byte{[]byte("x")})
				Finalize(bl, r) // wrong counts, bad elements or proofs: an error, not a panic
			}
		}
		if _, err := ParsePublicKeyRequest(b); err != nil && !errors.Is(err, protocol.ErrMalformed) {
			t.Fatalf("error not wrapping ErrMalformed: %v", err)
		}
		if r, err := ParsePublicKeyResponse(b); err == nil && r.Error == "" {
			ParseOPRFPublicKey(r.Key) // must not panic
		}
	})
}
