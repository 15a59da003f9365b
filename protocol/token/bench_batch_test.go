package token

import (
	"fmt"
	"testing"
)

// BenchmarkBatch is one batch of n TypeRistretto tokens, n = 16 and 100:
// issue is the issuer's Issue (evaluation and the batch's DLEQ proof),
// finalize the client's Finalize (proof check, unblind, hash). ns/op is per
// batch. docs/benchmarks.md has the numbers before and after the
// variable-time DLEQ (protocol/internal/dleq).
func BenchmarkBatch(b *testing.B) {
	for _, n := range []int{16, 100} {
		key, _ := GenerateKey(KindRandomness, "e")
		p, blinded, err := NewRequest(key.Public(), KindRandomness, "e", randomNonces(b, n))
		if err != nil {
			b.Fatal(err)
		}
		ev, proof, err := key.Issue(blinded)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("issue/n=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, _, err := key.Issue(blinded); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("finalize/n=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				q := *p // Finalize marks its Pending spent; a copy finalizes afresh
				if _, err := q.Finalize(ev, proof); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
