package oprf_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/oprf"

	circloprf "github.com/cloudflare/circl/oprf"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/internal/oprftest"
)

// TestVOPRFProof: a batch evaluated under the pinned key verifies and gives
// the same ω as a second client's batch; a service evaluating under another
// key, a tampered proof or a tampered element make oprf.Finalize fail with
// oprf.ErrProof and a message naming the pinned key — no output, no fallback.
func TestVOPRFProof(t *testing.T) {
	seed := make([]byte, 32)
	rand.Read(seed)
	key, err := oprf.DeriveOPRFKey(seed, "2006-03")
	if err != nil {
		t.Fatal(err)
	}
	inputs := [][]byte{oprf.OPRFInput("query", "2006-03", "a"), oprf.OPRFInput("query", "2006-03", "b"), oprf.OPRFInput("query", "2006-03", "a")}
	run := func(pub *circloprf.PublicKey, server *circloprf.PrivateKey, tamper func(*oprf.RandomnessResponse)) ([][]byte, error) {
		b, q, err := oprf.Blind(pub, "2006-03", inputs)
		if err != nil {
			t.Fatal(err)
		}
		resp2 := oprftest.EvaluateOverWire(t, server, q)
		if tamper != nil {
			tamper(resp2)
		}
		return oprf.Finalize(b, resp2)
	}
	w1, err := run(key.Public(), key, nil)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := run(key.Public(), key, nil)
	if err != nil || !bytes.Equal(w1[0], w2[0]) || !bytes.Equal(w1[0], w1[2]) || bytes.Equal(w1[0], w1[1]) {
		t.Fatalf("ω must be a function of the input across clients (%v)", err)
	}
	other, _ := oprf.DeriveOPRFKey(seed, "2006-04")
	if out, err := run(key.Public(), other, nil); !errors.Is(err, oprf.ErrProof) || out != nil ||
		!strings.Contains(err.Error(), "pinned public key") {
		t.Fatalf("service with another key: out=%v err=%v, want oprf.ErrProof", out != nil, err)
	}
	if _, err := run(key.Public(), key, func(r *oprf.RandomnessResponse) { r.Proof[0] ^= 1 }); !errors.Is(err, oprf.ErrProof) {
		t.Fatalf("tampered proof: %v", err)
	}
	if _, err := run(key.Public(), key, func(r *oprf.RandomnessResponse) { r.Elements[0], r.Elements[1] = r.Elements[1], r.Elements[0] }); !errors.Is(err, oprf.ErrProof) {
		t.Fatalf("swapped elements: %v", err)
	}
	if _, err := run(key.Public(), key, func(r *oprf.RandomnessResponse) {
		*r = oprf.RandomnessResponse{Refusal: protocol.Refusal{Closed: true, Error: "epoch 2006-03 is closed"}}
	}); !errors.Is(err, protocol.ErrEpochClosed) {
		t.Fatalf("closed epoch: %v", err)
	}
	// the base-mode key of the same seed is a different key: modes never mix
	base, _ := circloprf.DeriveKey(oprf.OPRFSuite, circloprf.BaseMode, seed, []byte("crowdlog-v1 epoch 2006-03"))
	if _, err := run(key.Public(), base, nil); !errors.Is(err, oprf.ErrProof) {
		t.Fatalf("base-mode key accepted: %v", err)
	}
}

func TestPublicKeyMessages(t *testing.T) {
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	pk, _ := key.Public().MarshalBinary()
	resp := &oprf.PublicKeyResponse{Epoch: "e1", Key: pk}
	b, err := resp.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := oprf.ParsePublicKeyResponse(b)
	if err != nil || got.Epoch != "e1" || !bytes.Equal(got.Key, pk) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if _, err := oprf.ParseOPRFPublicKey(got.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := oprf.ParseOPRFPublicKey(make([]byte, 32)); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("identity public key accepted: %v", err)
	}
	b, _ = (&oprf.PublicKeyResponse{Refusal: protocol.Refusal{Closed: true}}).MarshalBinary()
	if got, err := oprf.ParsePublicKeyResponse(b); err != nil || !got.Closed || got.Error == "" {
		t.Fatalf("closed: %+v %v", got, err)
	}
	q, _ := (&oprf.PublicKeyRequest{Epoch: "e1"}).MarshalBinary()
	if got, err := oprf.ParsePublicKeyRequest(q); err != nil || got.Epoch != "e1" {
		t.Fatalf("request: %+v %v", got, err)
	}
	// version 1 messages are refused
	q[0] = 1
	if _, err := oprf.ParsePublicKeyRequest(q); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("old version accepted: %v", err)
	}
}

// BenchmarkVOPRF: one client round of 100 artifacts (blind, service evaluate
// with proof, verify + finalize), per batch.
func BenchmarkVOPRF(b *testing.B) {
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	inputs := make([][]byte, 100)
	for i := range inputs {
		inputs[i] = oprf.OPRFInput("query", "e", fmt.Sprint("artifact ", i))
	}
	for b.Loop() {
		bl, q, _ := oprf.Blind(key.Public(), "e", inputs)
		resp, _ := oprf.Evaluate(key, q)
		if _, err := oprf.Finalize(bl, resp); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRefusalStatuses: every refusal status survives the wire in both
// response types and turns into an error wrapping its sentinel on the
// client, with the service's message once (not its sentinel text twice).
func TestRefusalStatuses(t *testing.T) {
	for _, c := range []struct {
		f    protocol.Refusal
		want error
	}{
		{protocol.Refusal{Closed: true, Error: protocol.ErrEpochClosed.Error() + ": epoch 2006-03 closed"}, protocol.ErrEpochClosed},
		{protocol.Refusal{Expired: true, Error: protocol.ErrEpochExpired.Error() + ": epoch 20060301T000000Z-24h ended"}, protocol.ErrEpochExpired},
		{protocol.Refusal{Future: true}, protocol.ErrEpochFuture},
		{protocol.Refusal{Error: "invalid epoch name"}, nil},
	} {
		b, err := (&oprf.RandomnessResponse{Refusal: c.f}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err := oprf.ParseRandomnessResponse(b)
		if err != nil {
			t.Fatal(err)
		}
		pb, _ := (&oprf.PublicKeyResponse{Refusal: c.f}).MarshalBinary()
		pgot, err := oprf.ParsePublicKeyResponse(pb)
		if err != nil || pgot.Refusal != got.Refusal {
			t.Fatalf("public key response: %+v %v, want %+v", pgot.Refusal, err, got.Refusal)
		}
		if got.Closed != c.f.Closed || got.Expired != c.f.Expired || got.Future != c.f.Future || got.Error == "" {
			t.Fatalf("%+v round-trips to %+v", c.f, got.Refusal)
		}
		e := got.Err()
		if e == nil || (c.want != nil && !errors.Is(e, c.want)) {
			t.Fatalf("%+v: client error %v, want %v", c.f, e, c.want)
		}
		if c.want != nil && strings.Count(e.Error(), c.want.Error()) != 1 {
			t.Fatalf("sentinel repeated: %q", e)
		}
		if protocol.RefusalOf(e).Closed != c.f.Closed || protocol.RefusalOf(e).Expired != c.f.Expired || protocol.RefusalOf(e).Future != c.f.Future {
			t.Fatalf("protocol.RefusalOf(%v) = %+v", e, protocol.RefusalOf(e))
		}
	}
	if (protocol.Refusal{}).Err() != nil || (protocol.Refusal{}).Refused() {
		t.Fatal("zero protocol.Refusal must not be a refusal")
	}
}

// TestRandomnessRequestTokens: the tokens section is appended as u16 count
// ‖ (u16 len ‖ token)… after the elements (bytes built here by hand), a
// request without tokens encodes without it, and an empty section or an
// empty token is malformed.
func TestRandomnessRequestTokens(t *testing.T) {
	e1, e2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	plain := append(append([]byte{protocol.Version, 2, 'e', '1', 0, 2}, e1...), e2...)
	q := &oprf.RandomnessRequest{Epoch: "e1", Elements: [][]byte{e1, e2}}
	if b, err := q.MarshalBinary(); err != nil || !bytes.Equal(b, plain) {
		t.Fatalf("request without tokens = %x, %v; want %x", b, err, plain)
	}
	q.Tokens = [][]byte{{0xAA, 0xBB, 0xCC}, {0xDD}}
	want := append(append([]byte(nil), plain...), 0, 2, 0, 3, 0xAA, 0xBB, 0xCC, 0, 1, 0xDD)
	b, err := q.MarshalBinary()
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("request with tokens = %x, %v; want %x", b, err, want)
	}
	back, err := oprf.ParseRandomnessRequest(b)
	if err != nil || len(back.Tokens) != 2 || !bytes.Equal(back.Tokens[0], q.Tokens[0]) || !bytes.Equal(back.Tokens[1], q.Tokens[1]) || len(back.Elements) != 2 {
		t.Fatalf("parsed %+v, %v", back, err)
	}
	for name, b := range map[string][]byte{
		"empty section":   append(append([]byte(nil), plain...), 0, 0),
		"empty token":     append(append([]byte(nil), plain...), 0, 1, 0, 0),
		"truncated token": append(append([]byte(nil), plain...), 0, 1, 0, 5, 1),
		"one stray byte":  append(append([]byte(nil), plain...), 9),
	} {
		if _, err := oprf.ParseRandomnessRequest(b); !errors.Is(err, protocol.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}
