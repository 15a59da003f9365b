package blind

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkBlind is the PDD bound: one member's blinded vector for a group
// of 100 and L = 10,000 keywords (target ≤ 10 ms). "seeds" includes the 99
// X25519 + HKDF pair seeds; "masks" only the PRG expansion and additions.
func BenchmarkBlind(b *testing.B) {
	const n, L = 100, 10000
	g := newGroup(b, n)
	v := randVectors(rand.New(rand.NewPCG(1, 1)), 1, L)[0]
	b.Run("seeds+masks", func(b *testing.B) {
		for b.Loop() {
			s, err := Seeds(g.privs[0], 0, g.pubs, g.in)
			if err != nil {
				b.Fatal(err)
			}
			_ = Blind(v, 0, s)
		}
	})
	b.Run("masks", func(b *testing.B) {
		for b.Loop() {
			_ = Blind(v, 0, g.seeds[0])
		}
	})
}

// BenchmarkDeposit is the recovery overhead of one member's submission: its
// 99 pair seeds Shamir-shared (t = 51) among 99 holders and sealed.
func BenchmarkDeposit(b *testing.B) {
	g := newGroup(b, 100)
	for b.Loop() {
		if _, err := Deposit(g.in, 0, g.seeds[0], g.pubs, Threshold(100)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSum is the aggregator's inner loop (target ≥ 1 GB/s per core):
// adding one 10,000-keyword vector (80 KB) into a group sum.
func BenchmarkSum(b *testing.B) {
	const L = 10000
	dst := make([]uint64, L)
	src := randVectors(rand.New(rand.NewPCG(1, 1)), 1, L)[0]
	b.SetBytes(8 * L)
	for b.Loop() {
		Sum(dst, src)
	}
}

// BenchmarkParseSubmission is the decode cost the aggregator pays before Sum.
func BenchmarkParseSubmission(b *testing.B) {
	const L = 10000
	y := randVectors(rand.New(rand.NewPCG(1, 1)), 1, L)[0]
	raw, _ := (&Submission{Instance: Instance{Campaign: "c", Round: 1}, Y: y}).MarshalBinary()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}
