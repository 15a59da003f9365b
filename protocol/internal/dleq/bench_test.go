package dleq

import (
	"crypto/rand"
	"fmt"
	"testing"

	circldleq "github.com/cloudflare/circl/zk/dleq"
)

// BenchmarkVerify compares Verify with circl's VerifyBatchRFC9497 (decoding
// included for both) at batches of 16 and 100; ns/op is per batch.
func BenchmarkVerify(b *testing.B) {
	for _, n := range []int{16, 100} {
		bt := newBatch(b, n)
		proof := enc(b, bt.circlPrf)
		b.Run(fmt.Sprintf("vartime/n=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := Verify(bt.pkb, bt.cb, bt.db, proof); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("circl/n=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if !circlVerify(bt.pkb, bt.cb, bt.db, proof) {
					b.Fatal("rejected")
				}
			}
		})
	}
}

// BenchmarkEvaluate compares Evaluate (D_i = k·C_i and the proof, decoding
// and encoding included) with circl's evaluation plus
// ProveBatchRFC9497 on decoded elements; ns/op is per batch.
func BenchmarkEvaluate(b *testing.B) {
	for _, n := range []int{16, 100} {
		bt := newBatch(b, n)
		b.Run(fmt.Sprintf("vartime/n=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, _, err := Evaluate(bt.kb, bt.pkb, bt.cb, rand.Reader); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("circl/n=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				ds := make([][]byte, n)
				for j := range bt.cb {
					c := g.NewElement()
					if err := c.UnmarshalBinary(bt.cb[j]); err != nil {
						b.Fatal(err)
					}
					ds[j], _ = g.NewElement().Mul(c, bt.k).MarshalBinaryCompress()
				}
				if _, err := (circldleq.Prover{Params: circlParams}).ProveBatchRFC9497(bt.k, bt.pk, bt.ce, bt.de, rand.Reader); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
