package token

import "testing"

const benchBatch = 100

// BenchmarkIssue is the issuer's cost per token at batch 100 (evaluation
// plus its share of the one DLEQ proof); ns/op is per token.
func BenchmarkIssue(b *testing.B) {
	key, _ := GenerateKey(KindRandomness, "e")
	_, blinded, err := NewRequest(key.Public(), KindRandomness, "e", randomNonces(b, benchBatch))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i += benchBatch {
		if _, _, err := key.Issue(blinded); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify is a redeemer's cost per token (one hash to group, one
// scalar multiplication, one hash).
func BenchmarkVerify(b *testing.B) {
	key, _ := GenerateKey(KindRandomness, "e")
	toks := issueTokens(b, key, KindRandomness, "e", randomNonces(b, benchBatch))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := key.Verify(toks[i%len(toks)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClient is the client's cost per token at batch 100: NewRequest
// (blind) plus Finalize (batch proof check, unblind, hash); ns/op is per
// token.
func BenchmarkClient(b *testing.B) {
	key, _ := GenerateKey(KindRandomness, "e")
	nonces := randomNonces(b, benchBatch)
	b.ResetTimer()
	for i := 0; i < b.N; i += benchBatch {
		p, blinded, err := NewRequest(key.Public(), KindRandomness, "e", nonces)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer() // the issuer's work is not the client's
		ev, proof, err := key.Issue(blinded)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := p.Finalize(ev, proof); err != nil {
			b.Fatal(err)
		}
	}
}
