package vss

import (
	"fmt"
	"testing"
)

// BenchmarkVerifyShares: the batch check (Commitment.VerifyShares) of n
// shares of one commitment, commitment decoded fresh every iteration (as
// the aggregator does once per group). n = k is the aggregator's case at
// the threshold; n = 64 shows the amortization for larger batches. ns/op
// is per batch; ns/share = ns/op ÷ n is the per-report verification cost.
func BenchmarkVerifyShares(b *testing.B) {
	for _, k := range []int{2, 5, 10} {
		for _, n := range []int{k, 64} {
			b.Run(fmt.Sprintf("k=%d/n=%d", k, n), func(b *testing.B) {
				p := randomPoly(k)
				raw := CommitPolynomial(p)
				shares := randomShares(p, n)
				for b.Loop() {
					c, _ := NewCommitment(raw, k)
					if ok, _ := c.VerifyShares(shares); !ok {
						b.Fatal("rejected")
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/share")
			})
		}
	}
}

// BenchmarkVerifyPolynomial: the aggregator's check at the threshold: the
// k shares' interpolated polynomial against the commitment
// (Commitment.VerifyPolynomial, commitment decoded fresh every iteration as
// once per group). check: VerifyPolynomial alone (the verification cost:
// the interpolation also gives f(0), which recovery needs anyway);
// interpolate+check: both. ns/share = ns/op ÷ k.
func BenchmarkVerifyPolynomial(b *testing.B) {
	for _, k := range []int{2, 5, 10} {
		p := randomPoly(k)
		raw := CommitPolynomial(p)
		shares := randomShares(p, k)
		b.Run(fmt.Sprint("k=", k, "/check"), func(b *testing.B) {
			f, _ := Interpolate(shares)
			for b.Loop() {
				c, _ := NewCommitment(raw, k)
				if ok, _ := c.VerifyPolynomial(f); !ok {
					b.Fatal("rejected")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(k), "ns/share")
		})
		b.Run(fmt.Sprint("k=", k, "/interpolate+check"), func(b *testing.B) {
			for b.Loop() {
				c, _ := NewCommitment(raw, k)
				f, _ := Interpolate(shares)
				if ok, _ := c.VerifyPolynomial(f); !ok {
					b.Fatal("rejected")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(k), "ns/share")
		})
	}
}

// BenchmarkVerifyLaterShare: a share arriving after its group recovered:
// y == f(x) against the group's verified polynomial (Polynomial.Contains);
// /interpolate times Interpolate of k shares, which the aggregator runs
// once per group at the threshold.
func BenchmarkVerifyLaterShare(b *testing.B) {
	for _, k := range []int{2, 5, 10} {
		p := randomPoly(k)
		verified := randomShares(p, k)
		later := randomShares(p, 1)[0]
		b.Run(fmt.Sprint("k=", k, "/interpolate"), func(b *testing.B) {
			for b.Loop() {
				if _, err := Interpolate(verified); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprint("k=", k, "/contains"), func(b *testing.B) {
			f, _ := Interpolate(verified)
			for b.Loop() {
				if !f.Contains(later) {
					b.Fatal("rejected")
				}
			}
		})
	}
}
