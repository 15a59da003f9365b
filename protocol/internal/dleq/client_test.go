package dleq

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/cloudflare/circl/oprf"
	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

// TestClientRFC9497Vectors: Blind with the RFC's blinds gives its blinded
// elements, and Finalize on its evaluation elements its outputs, byte for
// byte (RFC 9497 Appendix A.1.2, ristretto255-SHA512 VOPRF).
func TestClientRFC9497Vectors(t *testing.T) {
	var v struct {
		Vectors []struct {
			Blind, BlindedElement, EvaluationElement, Input, Output string
		}
	}
	testvec.ReadJSON(t, "../../oprf/testdata/rfc9497-ristretto255-sha512-voprf.json", &v)
	for i, tv := range v.Vectors {
		b, blinded, err := Blind(testvec.HexList(t, tv.Input), testvec.HexList(t, tv.Blind), nil)
		if err != nil {
			t.Fatal(err)
		}
		for j, want := range testvec.HexList(t, tv.BlindedElement) {
			if !bytes.Equal(blinded[j], want) {
				t.Fatalf("vector %d: blinded element %d = %x, RFC %x", i, j, blinded[j], want)
			}
		}
		out, err := b.finalizeUnverified(testvec.HexList(t, tv.EvaluationElement))
		if err != nil {
			t.Fatal(err)
		}
		for j, want := range testvec.HexList(t, tv.Output) {
			if !bytes.Equal(out[j], want) {
				t.Fatalf("vector %d: output %d = %x, RFC %x", i, j, out[j], want)
			}
		}
	}
}

// TestClientMatchesCircl: for random batches (sizes 1, 2, 7, 64) and
// random blinds, Blind and Finalize give what circl's verifiable client
// gives with the same blinds.
func TestClientMatchesCircl(t *testing.T) {
	sk, err := oprf.GenerateKey(oprf.SuiteRistretto255, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv := oprf.NewVerifiableServer(oprf.SuiteRistretto255, sk)
	cli := oprf.NewVerifiableClient(oprf.SuiteRistretto255, sk.Public())
	for _, n := range []int{1, 2, 7, 64} {
		inputs := make([][]byte, n)
		blinds := make([]oprf.Blind, n)
		blindBytes := make([][]byte, n)
		for i := range inputs {
			inputs[i] = []byte{byte(i), byte(n), 0xc1}
			blinds[i] = g.RandomScalar(rand.Reader)
			blindBytes[i] = enc(t, blinds[i])
		}
		fin, req, err := cli.DeterministicBlind(inputs, blinds)
		if err != nil {
			t.Fatal(err)
		}
		b, blinded, err := Blind(inputs, blindBytes, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range req.Elements {
			if !bytes.Equal(enc(t, e), blinded[i]) {
				t.Fatalf("n=%d: blinded element %d differs from circl's", n, i)
			}
		}
		ev, err := srv.Evaluate(req)
		if err != nil {
			t.Fatal(err)
		}
		want, err := cli.Finalize(fin, ev)
		if err != nil {
			t.Fatal(err)
		}
		d := make([][]byte, n)
		for i, e := range ev.Elements {
			d[i] = enc(t, e)
		}
		got, err := b.finalizeUnverified(d)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("n=%d: output %d differs from circl's", n, i)
			}
		}
		// random blinds round-trip to the same outputs as circl's evaluation
		b2, blinded2, err := Blind(inputs, nil, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		ev2, proof2, err := Evaluate(enc(t, sk), enc(t, sk.Public()), blinded2, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		got2, err := b2.VerifyFinalize(enc(t, sk.Public()), ev2, proof2)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if !bytes.Equal(got2[i], want[i]) {
				t.Fatalf("n=%d: output %d with random blinds differs", n, i)
			}
		}
		bad := append([]byte(nil), proof2...)
		bad[0] ^= 1
		if _, err := b2.VerifyFinalize(enc(t, sk.Public()), ev2, bad); !errors.Is(err, ErrProof) && !errors.Is(err, ErrEncoding) {
			t.Fatalf("n=%d: tampered proof: %v", n, err)
		}
	}
}

// TestFullEvaluateMatchesCircl: FullEvaluate equals circl's verifiable
// server's FullEvaluate and the RFC's outputs.
func TestFullEvaluateMatchesCircl(t *testing.T) {
	sk, err := oprf.GenerateKey(oprf.SuiteRistretto255, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv := oprf.NewVerifiableServer(oprf.SuiteRistretto255, sk)
	for i := range 50 {
		in := bytes.Repeat([]byte{byte(i)}, i)
		want, err := srv.FullEvaluate(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := FullEvaluate(enc(t, sk), in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("input %x: FullEvaluate differs from circl's", in)
		}
	}
	var v struct {
		SkSm    string
		Vectors []struct{ Input, Output string }
	}
	testvec.ReadJSON(t, "../../oprf/testdata/rfc9497-ristretto255-sha512-voprf.json", &v)
	for i, tv := range v.Vectors {
		outs := testvec.HexList(t, tv.Output)
		for j, in := range testvec.HexList(t, tv.Input) {
			got, err := FullEvaluate(testvec.MustHex(t, v.SkSm), in)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, outs[j]) {
				t.Fatalf("vector %d: output %d = %x, RFC %x", i, j, got, outs[j])
			}
		}
	}
}
