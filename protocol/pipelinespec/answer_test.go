package pipelinespec

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
)

func TestSignedAnswer(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	specs := []Spec{{App: "query", Policy: "ft-u", ShamirK: 5}}
	nonce := bytes.Repeat([]byte{7}, NonceSize)
	in := SignedAnswer{Process: "p1", Nonce: nonce, Context: "none/query/e1", Pipelines: []string{specs[0].Canonical()},
		Counts: Counts{Admitted: 12, Refused: map[string]int64{"late": 2, "pipeline-mismatch": 3}}}
	b, err := SignAnswer(key, in)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseSignedAnswer(b)
	if err != nil {
		t.Fatal(err)
	}
	if a.Process != "p1" || a.Context != in.Context || a.Withheld || a.Counts.Admitted != 12 || a.Counts.Refused["late"] != 2 ||
		a.Counts.Refused["pipeline-mismatch"] != 3 || len(a.Specs) != 1 || a.Specs[0].Digest() != specs[0].Digest() {
		t.Fatalf("parsed %+v", a)
	}
	if err := a.Verify(pub); err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(other); !errors.Is(err, ErrSignature) {
		t.Fatalf("other key: %v", err)
	}
	if !a.Answers(nonce, in.Context) || a.Answers(bytes.Repeat([]byte{8}, NonceSize), in.Context) || a.Answers(nonce, "none/query/e2") || a.Answers(nil, in.Context) {
		t.Fatal("Answers does not compare the nonce and the context")
	}
	// an admitted count changed in transit no longer verifies
	i := bytes.Index(b, []byte{0, 0, 0, 0, 0, 0, 0, 12})
	forged := bytes.Clone(b)
	forged[i+7] = 99
	f, err := ParseSignedAnswer(forged)
	if err != nil {
		t.Fatal(err)
	}
	if f.Counts.Admitted != 99 || !errors.Is(f.Verify(pub), ErrSignature) {
		t.Fatalf("forged count %d verified", f.Counts.Admitted)
	}
	// a SignedPipelines signature does not verify as an answer (domains)
	sp, _ := SignPipelines(key, "p1", specs)
	if _, err := ParseSignedAnswer(sp); !errors.Is(err, ErrMalformed) {
		t.Fatalf("SignedPipelines as an answer: %v", err)
	}
	unsorted := bytes.Clone(b)
	j := bytes.Index(unsorted, []byte("late"))
	copy(unsorted[j:], "zate")
	for _, bad := range [][]byte{nil, b[:len(b)-1], append(bytes.Clone(b), 0), {1, 2, 0, 0}, unsorted} {
		if _, err := ParseSignedAnswer(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseSignedAnswer(%x…): %v, want ErrMalformed", bad[:min(8, len(bad))], err)
		}
	}
	for _, bad := range []SignedAnswer{{Nonce: make([]byte, NonceSize+1)}, {Counts: Counts{Admitted: -1}}, {Counts: Counts{Refused: map[string]int64{"": 1}}}} {
		if _, err := SignAnswer(key, bad); err == nil {
			t.Errorf("SignAnswer(%+v) signed", bad)
		}
	}
	// withheld, no nonce, every definition
	e, err := SignAnswer(key, SignedAnswer{Process: "p2", Withheld: true})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := ParseSignedAnswer(e); err != nil || !a.Withheld || len(a.Specs) != 0 || a.Verify(pub) != nil || a.Answers(nil, "") {
		t.Fatalf("empty: %v", err)
	}
}

// FuzzParseSignedAnswer: the client's decoder of an aggregator's signed
// answer never panics, and what it accepts encodes to the same body.
func FuzzParseSignedAnswer(f *testing.F) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	b, _ := SignAnswer(key, SignedAnswer{Process: "p", Nonce: make([]byte, NonceSize), Context: "none/query/e",
		Pipelines: []string{Spec{App: "query", Policy: "ft-u", ShamirK: 5}.Canonical()}, Counts: Counts{Admitted: 3, Refused: map[string]int64{"late": 1}}})
	f.Add(b)
	e, _ := SignAnswer(key, SignedAnswer{Withheld: true})
	f.Add(e)
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseSignedAnswer(b)
		if err != nil {
			return
		}
		if len(a.Specs) != len(a.Pipelines) || len(a.body)+ed25519.SignatureSize != len(b) {
			t.Fatalf("parsed %d specs of %d texts, body %d of %d bytes", len(a.Specs), len(a.Pipelines), len(a.body), len(b))
		}
		re, err := a.encode()
		if err != nil {
			t.Fatalf("parsed answer does not encode: %v", err)
		}
		if !bytes.Equal(re, a.body) {
			t.Fatalf("re-encoded %x, parsed %x", re, a.body)
		}
	})
}

// BenchmarkSignAnswer: what an aggregator process spends per request on
// protocol.PipelineSubject to sign its answer (one definition, two
// refusal reasons).
func BenchmarkSignAnswer(b *testing.B) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	a := SignedAnswer{Process: "0123456789abcdef", Nonce: make([]byte, NonceSize), Context: "none/query/2026-11",
		Pipelines: []string{Spec{App: "query", Policy: "ft-u", ShamirK: 5}.Canonical()},
		Counts:    Counts{Admitted: 12345, Refused: map[string]int64{"late": 2, "pipeline-mismatch": 3}}}
	for b.Loop() {
		if _, err := SignAnswer(key, a); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSignAnswerBound: the bare Ed25519 signature of the same
// bytes, BenchmarkSignAnswer's bound.
func BenchmarkSignAnswerBound(b *testing.B) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	msg := make([]byte, 200)
	for b.Loop() {
		ed25519.Sign(key, msg)
	}
}
