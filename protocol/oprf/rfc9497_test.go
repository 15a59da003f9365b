package oprf

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/cloudflare/circl/oprf"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

// TestRFC9497Vectors runs RFC 9497's ristretto255-SHA512 VOPRF vectors
// (testdata/rfc9497-ristretto255-sha512-voprf.json) through the calls
// crowdlog makes: DeriveKey with OPRFSuite/OPRFMode, a verifiable client's
// blind (with the RFC's blinds), the server's evaluation elements, and our
// Finalize wrapper (wire decoding + DLEQ proof check + unblinding) on the
// RFC's evaluation elements and proof, which must give the RFC's outputs.
func TestRFC9497Vectors(t *testing.T) {
	var v struct {
		Seed, KeyInfo, SkSm, PkSm string
		Vectors                   []struct {
			Batch                                                   int
			Blind, BlindedElement, EvaluationElement, Input, Output string
			Proof                                                   struct{ Proof, R string }
		}
	}
	testvec.ReadJSON(t, "testdata/rfc9497-ristretto255-sha512-voprf.json", &v)
	sk, err := oprf.DeriveKey(OPRFSuite, OPRFMode, testvec.MustHex(t, v.Seed), testvec.MustHex(t, v.KeyInfo))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := sk.MarshalBinary(); hex.EncodeToString(got) != v.SkSm {
		t.Fatalf("skSm = %x, RFC %s", got, v.SkSm)
	}
	pkb, _ := sk.Public().MarshalBinary()
	if hex.EncodeToString(pkb) != v.PkSm {
		t.Fatalf("pkSm = %x, RFC %s", pkb, v.PkSm)
	}
	pub, err := ParseOPRFPublicKey(pkb)
	if err != nil {
		t.Fatal(err)
	}
	for i, tv := range v.Vectors {
		inputs := testvec.HexList(t, tv.Input)
		var blinds []oprf.Blind
		for _, b := range testvec.HexList(t, tv.Blind) {
			s := protocol.G.NewScalar()
			if err := s.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			blinds = append(blinds, s)
		}
		_, ereq, err := oprf.NewVerifiableClient(OPRFSuite, pub).DeterministicBlind(inputs, blinds)
		if err != nil {
			t.Fatal(err)
		}
		q := &RandomnessRequest{Epoch: "rfc"}
		for j, e := range ereq.Elements {
			b, _ := e.MarshalBinaryCompress()
			if want := testvec.HexList(t, tv.BlindedElement)[j]; !bytes.Equal(b, want) {
				t.Fatalf("vector %d: blinded element %d = %x, RFC %x", i, j, b, want)
			}
			q.Elements = append(q.Elements, b)
		}
		// our server wrapper: same evaluation elements (its proof is randomized)
		resp, err := Evaluate(sk, q)
		if err != nil {
			t.Fatal(err)
		}
		rfcEval := testvec.HexList(t, tv.EvaluationElement)
		for j := range rfcEval {
			if !bytes.Equal(resp.Elements[j], rfcEval[j]) {
				t.Fatalf("vector %d: evaluation element %d = %x, RFC %x", i, j, resp.Elements[j], rfcEval[j])
			}
		}
		// our client wrapper on the RFC's answer: proof verifies, outputs match
		rfcResp := &RandomnessResponse{Elements: rfcEval, Proof: testvec.MustHex(t, tv.Proof.Proof)}
		b, err := rfcResp.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if rfcResp, err = ParseRandomnessResponse(b); err != nil {
			t.Fatal(err)
		}
		ours, oq, err := blind(pub, "rfc", inputs, testvec.HexList(t, tv.Blind))
		if err != nil {
			t.Fatal(err)
		}
		for j := range q.Elements {
			if !bytes.Equal(oq.Elements[j], q.Elements[j]) {
				t.Fatalf("vector %d: our blinded element %d = %x, RFC %x", i, j, oq.Elements[j], q.Elements[j])
			}
		}
		out, err := Finalize(ours, rfcResp)
		if err != nil {
			t.Fatalf("vector %d: RFC proof rejected: %v", i, err)
		}
		for j, want := range testvec.HexList(t, tv.Output) {
			if !bytes.Equal(out[j], want) {
				t.Fatalf("vector %d: output %d = %x, RFC %x", i, j, out[j], want)
			}
		}
		// and a tampered proof is refused
		bad := *rfcResp
		bad.Proof = append([]byte(nil), rfcResp.Proof...)
		bad.Proof[0] ^= 1
		if _, err := Finalize(ours, &bad); err == nil {
			t.Fatalf("vector %d: tampered proof accepted", i)
		}
	}
}
