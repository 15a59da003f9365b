package token

import (
	"crypto/rand"
	"crypto/rsa"
	"testing"

	"github.com/cloudflare/circl/blindsign/blindrsa"
)

// The blind RSA benchmarks measure the alternative crowdlog did not take:
// RFC 9578 §6 publicly verifiable tokens (type 0x0002,
// RSABSSA-SHA384-PSS-Deterministic, RFC 9474, 2048-bit key), one RSA
// private operation per token at the issuer and no batching. Compare with
// BenchmarkIssue, BenchmarkVerify and BenchmarkClient (docs/decisions.md).

func rsaSetup(b *testing.B) (*rsa.PrivateKey, blindrsa.Client, []byte) {
	sk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	c, err := blindrsa.NewClient(blindrsa.SHA384PSSDeterministic, &sk.PublicKey)
	if err != nil {
		b.Fatal(err)
	}
	// token_input of a type 0x0002 token: type ‖ nonce ‖ challenge digest ‖ key id
	msg := make([]byte, 2+3*32)
	rand.Read(msg)
	return sk, c, msg
}

// BenchmarkBlindRSAIssue is the issuer's cost per token (BlindSign: one
// RSA-2048 private operation, which circl checks by verifying it).
func BenchmarkBlindRSAIssue(b *testing.B) {
	sk, c, msg := rsaSetup(b)
	blinded, _, err := c.Blind(rand.Reader, msg)
	if err != nil {
		b.Fatal(err)
	}
	signer := blindrsa.NewSigner(sk)
	b.ResetTimer()
	for b.Loop() {
		if _, err := signer.BlindSign(blinded); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBlindRSAVerify is a redeemer's cost per token (RSA-PSS verify
// with the public key).
func BenchmarkBlindRSAVerify(b *testing.B) {
	sk, c, msg := rsaSetup(b)
	blinded, st, _ := c.Blind(rand.Reader, msg)
	bs, _ := blindrsa.NewSigner(sk).BlindSign(blinded)
	sig, err := c.Finalize(st, bs)
	if err != nil {
		b.Fatal(err)
	}
	v, _ := blindrsa.NewVerifier(blindrsa.SHA384PSSDeterministic, &sk.PublicKey)
	b.ResetTimer()
	for b.Loop() {
		if err := v.Verify(msg, sig); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBlindRSAClient is the client's cost per token: Blind plus
// Finalize (which verifies the signature).
func BenchmarkBlindRSAClient(b *testing.B) {
	sk, c, msg := rsaSetup(b)
	signer := blindrsa.NewSigner(sk)
	b.ResetTimer()
	for b.Loop() {
		blinded, st, err := c.Blind(rand.Reader, msg)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		bs, _ := signer.BlindSign(blinded)
		b.StartTimer()
		if _, err := c.Finalize(st, bs); err != nil {
			b.Fatal(err)
		}
	}
}
