// Package oprftest runs the OPRF over the wire for tests: EvaluateOverWire
// encodes, decodes and evaluates a request as the randomness service would,
// and OmegaFor gives an artifact's ω through blind, evaluate and finalize.
package oprftest

import (
	"testing"

	circloprf "github.com/cloudflare/circl/oprf"
	"github.com/crowdlog/crowdlog/protocol/oprf"
)

// EvaluateOverWire encodes q, decodes it as the service would, evaluates it
// under key and returns the response after its own encode/decode round trip.
func EvaluateOverWire(t testing.TB, key *circloprf.PrivateKey, q *oprf.RandomnessRequest) *oprf.RandomnessResponse {
	t.Helper()
	b, _ := q.MarshalBinary()
	q2, err := oprf.ParseRandomnessRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := oprf.Evaluate(key, q2)
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := resp.MarshalBinary()
	resp2, err := oprf.ParseRandomnessResponse(rb)
	if err != nil {
		t.Fatal(err)
	}
	return resp2
}

func OmegaFor(t testing.TB, key *circloprf.PrivateKey, app, epoch, artifact string) []byte {
	t.Helper()
	fin, req, err := oprf.Blind(key.Public(), epoch, [][]byte{oprf.OPRFInput(app, epoch, artifact)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := oprf.Finalize(fin, EvaluateOverWire(t, key, req))
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}
