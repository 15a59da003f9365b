package oprf_test

import (
	"fmt"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
	"github.com/crowdlog/crowdlog/protocol/oprf"
)

// BenchmarkRandomness is one randomness batch of n elements, n = 16 and
// 100: evaluate is the service's Evaluate (evaluation and the batch's DLEQ
// proof), finalize the client's Finalize (proof check, unblind, hash).
// ns/op is per batch.
func BenchmarkRandomness(b *testing.B) {
	key, err := oprf.DeriveOPRFKey(testvec.FixedBytes("bench seed", 32), "e")
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{16, 100} {
		inputs := make([][]byte, n)
		for i := range inputs {
			inputs[i] = oprf.OPRFInput("query", "e", fmt.Sprint("artifact ", i))
		}
		bl, q, err := oprf.Blind(key.Public(), "e", inputs)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := oprf.Evaluate(key, q)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("evaluate/n=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := oprf.Evaluate(key, q); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("finalize/n=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := oprf.Finalize(bl, resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
