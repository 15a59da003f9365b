package oprf

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/cloudflare/circl/oprf"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

// TestGoldenRandomness: request, response, public key messages and
// refusals. The DLEQ proof is randomized (Evaluate draws its nonce), so the
// golden file keeps one proof and the test checks that it verifies and that
// every other byte is reproduced.
func TestGoldenRandomness(t *testing.T) {
	sk, err := DeriveOPRFKey(testvec.FixedBytes("oprf seed", 32), "2006-03")
	if err != nil {
		t.Fatal(err)
	}
	pkb, _ := sk.Public().MarshalBinary()
	pub, err := ParseOPRFPublicKey(pkb)
	if err != nil {
		t.Fatal(err)
	}
	inputs := [][]byte{OPRFInput("query", "2006-03", "new york weather"), OPRFInput("query", "2006-03", "google")}
	blinds := make([]oprf.Blind, len(inputs))
	for i := range blinds {
		blinds[i] = protocol.G.HashToScalar(testvec.FixedBytes(fmt.Sprint("blind", i), 32), []byte("golden blind"))
	}
	_, ereq, err := oprf.NewVerifiableClient(OPRFSuite, pub).DeterministicBlind(inputs, blinds)
	if err != nil {
		t.Fatal(err)
	}
	q := &RandomnessRequest{Epoch: "2006-03"}
	for _, e := range ereq.Elements {
		b, _ := e.MarshalBinaryCompress()
		q.Elements = append(q.Elements, b)
	}
	qb, _ := q.MarshalBinary()
	resp, err := Evaluate(sk, q)
	if err != nil {
		t.Fatal(err)
	}
	if old := testvec.LoadGolden(t, "randomness"); old["proof"] != "" && !*testvec.Update {
		resp.Proof = testvec.MustHex(t, old["proof"]) // the golden proof; must verify below
	}
	rb, _ := resp.MarshalBinary()
	ours, _, err := blind(pub, "2006-03", inputs, scalarBytes(t, blinds))
	if err != nil {
		t.Fatal(err)
	}
	for i := range q.Elements {
		if !bytes.Equal(ours.blinded[i], q.Elements[i]) {
			t.Fatalf("blinded element %d differs from circl's", i)
		}
	}
	omegas, err := Finalize(ours, resp)
	if err != nil {
		t.Fatalf("golden proof does not verify: %v", err)
	}
	refusal, _ := (&RandomnessResponse{Refusal: protocol.Refusal{Error: "epoch 1999-01 is in the future"}}).MarshalBinary()
	closed, _ := (&RandomnessResponse{Refusal: protocol.Refusal{Closed: true, Error: "epoch 2006-02 closed"}}).MarshalBinary()
	expired, _ := (&RandomnessResponse{Refusal: protocol.Refusal{Expired: true, Error: "epoch 20060301T000000Z-24h expired"}}).MarshalBinary()
	future, _ := (&RandomnessResponse{Refusal: protocol.Refusal{Future: true, Error: "epoch 20060301T000000Z-24h has not started"}}).MarshalBinary()
	pkq, _ := (&PublicKeyRequest{Epoch: "2006-03"}).MarshalBinary()
	pkr, _ := (&PublicKeyResponse{Epoch: "2006-03", Key: pkb}).MarshalBinary()
	pkClosed, _ := (&PublicKeyResponse{Refusal: protocol.Refusal{Closed: true, Error: "epoch 2006-02 closed"}}).MarshalBinary()
	pkExpired, _ := (&PublicKeyResponse{Refusal: protocol.Refusal{Expired: true, Error: "epoch 20060301T000000Z-24h expired"}}).MarshalBinary()
	testvec.Golden(t, "randomness", map[string]string{
		"public_key": hex.EncodeToString(pkb), "blind0": testvec.ScalarHex(blinds[0]), "blind1": testvec.ScalarHex(blinds[1]),
		"request": hex.EncodeToString(qb), "proof": hex.EncodeToString(resp.Proof), "response": hex.EncodeToString(rb),
		"omega0": hex.EncodeToString(omegas[0]), "omega1": hex.EncodeToString(omegas[1]),
		"response_refused": hex.EncodeToString(refusal), "response_closed": hex.EncodeToString(closed),
		"pubkey_request": hex.EncodeToString(pkq), "pubkey_response": hex.EncodeToString(pkr),
		"pubkey_response_closed": hex.EncodeToString(pkClosed),
		"response_expired":       hex.EncodeToString(expired), "response_future": hex.EncodeToString(future),
		"pubkey_response_expired": hex.EncodeToString(pkExpired),
	})
	if *testvec.Update {
		return
	}
	want := testvec.LoadGolden(t, "randomness")
	for _, name := range []string{"request", "response", "response_refused", "response_closed", "response_expired", "response_future"} {
		var err error
		switch name {
		case "request":
			_, err = ParseRandomnessRequest(testvec.MustHex(t, want[name]))
		default:
			_, err = ParseRandomnessResponse(testvec.MustHex(t, want[name]))
		}
		if err != nil {
			t.Errorf("golden %s does not parse: %v", name, err)
		}
	}
	if p, err := ParsePublicKeyResponse(testvec.MustHex(t, want["pubkey_response"])); err != nil || !bytes.Equal(p.Key, pkb) {
		t.Errorf("golden public key response: %v", err)
	}
	if p, err := ParseRandomnessResponse(testvec.MustHex(t, want["response_expired"])); err != nil || !p.Expired {
		t.Errorf("golden expired response: %+v %v", p, err)
	}
	if p, err := ParsePublicKeyResponse(testvec.MustHex(t, want["pubkey_response_expired"])); err != nil || !p.Expired {
		t.Errorf("golden expired public key response: %+v %v", p, err)
	}
}

// scalarBytes encodes circl scalars (32 bytes each).
func scalarBytes(t *testing.T, s []oprf.Blind) [][]byte {
	t.Helper()
	out := make([][]byte, len(s))
	for i := range s {
		b, err := s[i].MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}
