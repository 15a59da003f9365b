package protocol

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/cloudflare/circl/oprf"
)

func FuzzParseReport(f *testing.F) {
	key, _ := oprf.GenerateKey(OPRFSuite, rand.Reader)
	s, _ := DeriveSealing(omegaFor(f, key, "query", "e", "x"), "query", "e", FTu, 3)
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

func FuzzPeel(f *testing.F) {
	kp, _ := GenerateKeyPair(1)
	l, _ := SealLayer(kp.PublicKey(), Hop{Kind: HopKafka, Key: []byte{9, 9}}, []byte("inner"))
	f.Add(l)
	f.Add([]byte{1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		Peel([]*KeyPair{kp}, b) // must not panic
	})
}

func FuzzParseRandomness(f *testing.F) {
	key, _ := oprf.GenerateKey(OPRFSuite, rand.Reader)
	_, q, _ := Blind(key.Public(), "e", [][]byte{[]byte("x"), []byte("y")})
	b, _ := q.MarshalBinary()
	f.Add(b)
	resp, _ := Evaluate(key, q)
	b, _ = resp.MarshalBinary()
	f.Add(b)
	for _, r := range []Refusal{{Error: "unknown epoch"}, {Closed: true}, {Expired: true}, {Future: true, Error: "not yet"}} {
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
		if _, err := ParsePublicKeyRequest(b); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error not wrapping ErrMalformed: %v", err)
		}
		if r, err := ParsePublicKeyResponse(b); err == nil && r.Error == "" {
			ParseOPRFPublicKey(r.Key) // must not panic
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

func FuzzParseDecrypted(f *testing.F) {
	f.Add([]byte(`{"kind":"item","app":"query","item":"a"}`))
	f.Add([]byte(`{"kind":"closed","partition":1,"partitions":4}`))
	f.Fuzz(func(t *testing.T, b []byte) { ParseDecrypted(b) })
}

// FuzzParseRelayKeys: relay key announcements and requests from the network
// never panic the parser, and what parses re-encodes to the same bytes.
func FuzzParseRelayKeys(f *testing.F) {
	k1, _ := GenerateKeyPair(1)
	k2, _ := GenerateKeyPair(2)
	p, _ := RelayKeysOf("a", []*KeyPair{k2, k1})
	b, _ := p.MarshalBinary()
	f.Add(b)
	b, _ = (&RelayKeysResponse{Error: "busy"}).MarshalBinary()
	f.Add(b)
	b, _ = (&RelayKeysRequest{Relay: "a"}).MarshalBinary()
	f.Add(b)
	f.Add([]byte{Version, 0, 1, 'a', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if q, err := ParseRelayKeysRequest(b); err == nil {
			out, err := q.MarshalBinary()
			if err != nil || !bytes.Equal(out, b) {
				t.Fatalf("request re-encodes differently: %v", err)
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Fatalf("error not wrapping ErrMalformed: %v", err)
		}
		r, err := ParseRelayKeysResponse(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not wrapping ErrMalformed: %v", err)
			}
			return
		}
		out, err := r.MarshalBinary()
		if err != nil {
			t.Fatalf("parsed announcement does not re-encode: %v", err)
		}
		if !bytes.Equal(out, b) {
			t.Fatal("announcement re-encodes differently")
		}
		for _, id := range r.IDs() {
			if _, ok := r.Lookup(id); !ok {
				t.Fatalf("listed id %d not found", id)
			}
		}
	})
}
