package token

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
)

func signedRequest(t testing.TB, priv ed25519.PrivateKey) *IssueRequest {
	key, _ := GenerateKey(KindRandomness, "e1")
	_, blinded, err := NewRequest(key.Public(), KindRandomness, "e1", [][32]byte{{1}, {2}})
	if err != nil {
		t.Fatal(err)
	}
	q := &IssueRequest{Kind: KindRandomness, Epoch: "e1", Timestamp: time.UnixMilli(1_800_000_000_123), Blinded: blinded}
	if err := q.Sign(priv); err != nil {
		t.Fatal(err)
	}
	return q
}

func TestIssueRequestSignature(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	q := signedRequest(t, priv)
	if !bytes.Equal(q.Identity, pub) {
		t.Fatal("Sign did not set the identity")
	}
	b, err := q.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// the signature is Ed25519 over the purpose ‖ everything before it
	body := b[:len(b)-64]
	if !ed25519.Verify(pub, append([]byte("crowdlog-v1 issue request\x00"), body...), b[len(b)-64:]) {
		t.Fatal("signature is not over purpose ‖ body")
	}
	back, err := ParseIssueRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := back.VerifySignature(); err != nil {
		t.Fatal(err)
	}
	if !back.Timestamp.Equal(q.Timestamp) || back.Epoch != "e1" || back.Kind != KindRandomness || len(back.Blinded) != 2 {
		t.Fatal("parsed request differs")
	}
	if back.ReplayID() != q.ReplayID() {
		t.Fatal("replay id changes over the wire")
	}
	// every field is covered by the signature
	alter := []func(*IssueRequest){
		func(x *IssueRequest) { x.Epoch = "e2" },
		func(x *IssueRequest) { x.Kind = KindReport },
		func(x *IssueRequest) { x.Timestamp = x.Timestamp.Add(time.Millisecond) },
		func(x *IssueRequest) { x.Blinded = x.Blinded[:1] },
		func(x *IssueRequest) {
			x.Blinded = [][]byte{x.Blinded[0], append([]byte(nil), x.Blinded[1]...)}
			x.Blinded[1][0] ^= 1
		},
		func(x *IssueRequest) { other, _, _ := ed25519.GenerateKey(rand.Reader); x.Identity = other },
	}
	for i, f := range alter {
		c := *back
		f(&c)
		if err := c.VerifySignature(); !errors.Is(err, ErrBadSignature) {
			t.Errorf("alteration %d: %v", i, err)
		}
	}
	arc := &IssueRequest{Kind: KindARC, Epoch: "e1", Timestamp: time.Now(), ARC: []byte("cred req")}
	if err := arc.Sign(priv); err != nil {
		t.Fatal(err)
	}
	ab, _ := arc.MarshalBinary()
	aq, err := ParseIssueRequest(ab)
	if err != nil || aq.VerifySignature() != nil || !bytes.Equal(aq.ARC, []byte("cred req")) {
		t.Fatalf("ARC request round trip: %v", err)
	}
	if (&IssueRequest{Kind: KindRandomness, Epoch: "e1", Identity: pub, Blinded: q.Blinded}).VerifySignature() == nil {
		t.Fatal("unsigned request verifies")
	}
}

func TestIssueResponseRoundTrip(t *testing.T) {
	cases := []*IssueResponse{
		{Kind: KindReport, Evaluated: [][]byte{bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)}, Proof: bytes.Repeat([]byte{3}, 64), Used: 2, Limit: 5},
		{Kind: KindARC, ARC: []byte("cred resp"), Used: 1, Limit: 1},
		{Refusal: protocol.Refusal{Error: BudgetError("e1", KindRandomness, 100, 98).Error()}},
	}
	for i, c := range cases {
		b, err := c.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseIssueResponse(b)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		b2, _ := back.MarshalBinary()
		if !bytes.Equal(b, b2) {
			t.Fatalf("case %d does not round-trip", i)
		}
	}
}

func TestRefusalErrors(t *testing.T) {
	err := (&IssueResponse{Refusal: protocol.Refusal{Error: BudgetError("2026-11-24", KindRandomness, 100, 100).Error()}}).Err()
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("budget refusal: %v", err)
	}
	want := "issuer: over budget: epoch 2026-11-24 allows 100 randomness tokens per identity, 100 already issued"
	if err.Error() != want {
		t.Fatalf("budget refusal reads %q, want %q", err, want)
	}
	if err := (&IssueResponse{Refusal: protocol.Refusal{Error: ErrNotEnrolled.Error()}}).Err(); !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("not enrolled: %v", err)
	}
	if err := (&IssueResponse{Refusal: protocol.Refusal{Error: "issuer temporarily unavailable (counter store); retry"}}).Err(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("unavailable refusal: %v", err)
	}
	if err := (&IssueResponse{Refusal: protocol.Refusal{Error: "something else"}}).Err(); err == nil || errors.Is(err, ErrBudget) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("plain refusal: %v", err)
	}
	if (&IssueResponse{Kind: KindReport}).Err() != nil {
		t.Fatal("ok response is an error")
	}
}

func TestKeysRoundTrip(t *testing.T) {
	q := &KeysRequest{Epoch: "e1"}
	b, _ := q.MarshalBinary()
	if back, err := ParseKeysRequest(b); err != nil || back.Epoch != "e1" {
		t.Fatalf("keys request: %v", err)
	}
	p := &KeysResponse{Epoch: "e1", Randomness: []byte{1, 2}, Report: []byte{3}, ARC: []byte{4, 5}}
	b, _ = p.MarshalBinary()
	back, err := ParseKeysResponse(b)
	if err != nil || !bytes.Equal(back.Report, []byte{3}) || !bytes.Equal(back.ARC, []byte{4, 5}) {
		t.Fatalf("keys response: %v", err)
	}
	if k, _ := back.Key(KindRandomness); !bytes.Equal(k, []byte{1, 2}) {
		t.Fatal("Key(randomness)")
	}
	// key custody split by verifier: one token key may be empty, not both
	for _, p := range []*KeysResponse{{Epoch: "e1", Report: []byte{3}, ARC: []byte{4}}, {Epoch: "e1", Randomness: []byte{1}}} {
		b, err := p.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if back, err := ParseKeysResponse(b); err != nil || !bytes.Equal(back.Randomness, p.Randomness) || !bytes.Equal(back.Report, p.Report) {
			t.Fatalf("one-kind keys response: %v", err)
		}
	}
	if _, err := (&KeysResponse{Epoch: "e1", ARC: []byte{4}}).MarshalBinary(); err == nil {
		t.Error("a keys response without token keys encoded")
	}
	w := protocol.Writer{}
	w.U8(protocol.Version)
	protocol.WriteStatus(&w, protocol.Refusal{})
	w.Bytes8([]byte("e1"))
	w.Bytes8(nil)
	w.Bytes8(nil)
	w.Bytes16(nil)
	if _, err := ParseKeysResponse(w.B); !errors.Is(err, protocol.ErrMalformed) {
		t.Errorf("a keys response without token keys parsed: %v", err)
	}
}

func fuzzRoundTrip[T interface{ MarshalBinary() ([]byte, error) }](t *testing.T, b []byte, parse func([]byte) (T, error)) {
	m, err := parse(b)
	if err != nil {
		if !errors.Is(err, protocol.ErrMalformed) {
			t.Fatalf("error does not wrap ErrMalformed: %v", err)
		}
		return
	}
	out, err := m.MarshalBinary()
	if err != nil {
		t.Fatalf("parsed message does not re-encode: %v", err)
	}
	if !bytes.Equal(out, b) {
		t.Fatalf("parsed message re-encodes differently:\n%x\n%x", b, out)
	}
}

func FuzzParseIssueRequest(f *testing.F) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	b, _ := signedRequest(f, priv).MarshalBinary()
	f.Add(b)
	arc := &IssueRequest{Kind: KindARC, Epoch: "e", Timestamp: time.UnixMilli(5), ARC: []byte("x")}
	arc.Sign(priv)
	b, _ = arc.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzRoundTrip(t, b, ParseIssueRequest)
		if q, err := ParseIssueRequest(b); err == nil {
			q.VerifySignature()
		}
	})
}

func FuzzParseIssueResponse(f *testing.F) {
	for _, c := range []*IssueResponse{
		{Kind: KindReport, Evaluated: [][]byte{{1, 2}}, Proof: []byte{3}, Used: 1, Limit: 2},
		{Kind: KindARC, ARC: []byte("r")},
		{Refusal: protocol.Refusal{Error: "identity not enrolled"}},
		{Refusal: protocol.Refusal{Error: "issuer temporarily unavailable (counter store); retry"}},
	} {
		b, _ := c.MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, b, ParseIssueResponse) })
}

func FuzzParseKeys(f *testing.F) {
	b, _ := (&KeysRequest{Epoch: "e"}).MarshalBinary()
	f.Add(b)
	b, _ = (&KeysResponse{Epoch: "e", Randomness: []byte{1}, Report: []byte{2}}).MarshalBinary()
	f.Add(b)
	b, _ = (&KeysResponse{Refusal: protocol.Refusal{Error: "no"}}).MarshalBinary()
	f.Add(b)
	b, _ = (&KeysResponse{Epoch: "c/1", Prio3Helper: []byte{3}}).MarshalBinary()
	f.Add(b)
	b, _ = (&KeysResponse{Epoch: "c/1", Prio3Leader: []byte{4}}).MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzRoundTrip(t, b, ParseKeysRequest)
		fuzzRoundTrip(t, b, ParseKeysResponse)
	})
}
