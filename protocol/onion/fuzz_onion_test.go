package onion

import (
	"bytes"
	"errors"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
)

func FuzzPeel(f *testing.F) {
	kp, _ := GenerateKeyPair(1)
	l, _ := SealLayer(kp.PublicKey(), Hop{Kind: HopKafka, Key: []byte{9, 9}}, []byte("inner"))
	f.Add(l)
	l, _ = SealLayer(kp.PublicKey(), Hop{Kind: HopKafkaPrio3, Key: []byte("campaign")}, []byte("upload"))
	f.Add(l)
	f.Add([]byte{1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		Peel([]*KeyPair{kp}, b) // must not panic
	})
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
	f.Add([]byte{protocol.Version, 0, 1, 'a', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if q, err := ParseRelayKeysRequest(b); err == nil {
			out, err := q.MarshalBinary()
			if err != nil || !bytes.Equal(out, b) {
				t.Fatalf("request re-encodes differently: %v", err)
			}
		} else if !errors.Is(err, protocol.ErrMalformed) {
			t.Fatalf("error not wrapping ErrMalformed: %v", err)
		}
		r, err := ParseRelayKeysResponse(b)
		if err != nil {
			if !errors.Is(err, protocol.ErrMalformed) {
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
