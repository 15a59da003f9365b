package blind

import (
	"crypto/ecdh"
	crand "crypto/rand"
	"fmt"
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
			_ = Blind(v, 0, s, g.self[0])
		}
	})
	b.Run("masks", func(b *testing.B) {
		for b.Loop() {
			_ = Blind(v, 0, g.seeds[0], g.self[0])
		}
	})
}

// BenchmarkDeposit is the recovery overhead of one member's submission: its
// self-mask seed and 99 pair seeds Shamir-shared (t = 51) among the group,
// committed (a Merkle root per holder) and sealed to 100 holders. It reports
// the deposit's size per member.
func BenchmarkDeposit(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		g := newGroup(b, n)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			var size int
			for b.Loop() {
				d, err := Deal(g.in, 0, g.seeds[0], g.self[0], g.pubs, Threshold(n), crand.Reader)
				if err != nil {
					b.Fatal(err)
				}
				size = 32 * len(d.Commit.Roots)
				for _, sb := range d.Bundles {
					size += len(sb.Ciphertext)
				}
			}
			b.ReportMetric(float64(size), "deposit-bytes")
		})
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

// BenchmarkClientRound is one member's whole client cost for one round with
// double masking and L = 10,000 keywords: its pair seeds (n−1 X25519 +
// HKDF), its blinded vector (n AES-CTR masks) and its deal (Deal). Only
// member 0's keys are derived, so large groups stay cheap to set up.
func BenchmarkClientRound(b *testing.B) {
	const L = 10000
	v := randVectors(rand.New(rand.NewPCG(1, 1)), 1, L)[0]
	for _, n := range []int{100, 1000} {
		in := Instance{Campaign: "flu", Round: 13000, Group: 3}
		var pubs [][]byte
		var priv0 = func() *ecdh.PrivateKey { k, _ := GenerateKey(); return k }()
		for i := 0; i < n; i++ {
			k := priv0
			if i > 0 {
				k, _ = GenerateKey()
			}
			pubs = append(pubs, k.PublicKey().Bytes())
		}
		var self Seed
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				seeds, err := Seeds(priv0, 0, pubs, in)
				if err != nil {
					b.Fatal(err)
				}
				_ = Blind(v, 0, seeds, self)
				if _, err := Deal(in, 0, seeds, self, pubs, Threshold(n), crand.Reader); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
