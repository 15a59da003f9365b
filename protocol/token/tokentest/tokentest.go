// Package tokentest mints Privacy Pass tokens for tests and benchmarks of
// the roles that redeem them (randomness service, aggregator), the way the
// issuer does: blind (token.NewRequest), one batch evaluation with its DLEQ
// proof (PrivateKey.Issue), Finalize with the proof checked (RFC 9578 §5).
package tokentest

import (
	"crypto/rand"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/token"
)

// Mint returns one token per nonce under key, of key's kind and epoch, in
// nonce order; it fails the test on any error.
func Mint(t testing.TB, key *token.PrivateKey, nonces ...[32]byte) []*token.Token {
	t.Helper()
	p, blinded, err := token.NewRequest(key.Public(), key.Kind(), key.Epoch(), nonces)
	if err != nil {
		t.Fatal(err)
	}
	ev, proof, err := key.Issue(blinded)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := p.Finalize(ev, proof)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// MintN is Mint with n random nonces.
func MintN(t testing.TB, key *token.PrivateKey, n int) []*token.Token {
	t.Helper()
	nonces := make([][32]byte, n)
	for i := range nonces {
		rand.Read(nonces[i][:])
	}
	return Mint(t, key, nonces...)
}
