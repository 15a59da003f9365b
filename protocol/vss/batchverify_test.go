package vss

import (
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"testing"

	r255 "github.com/bwesterb/go-ristretto"
	"github.com/cloudflare/circl/group"
	"github.com/crowdlog/crowdlog/protocol"
)

// feldmanNaive is the ground truth: Feldman's equation y·G == Σ x^j·C_j
// computed with circl's own decoding and one constant-time multiplication
// per term, independent of msm.go.
func feldmanNaive(t testing.TB, commit []byte, k int, s Share) bool {
	t.Helper()
	rhs := protocol.G.Identity()
	pow := protocol.G.NewScalar().SetUint64(1)
	for j := 0; j < k; j++ {
		c := protocol.G.NewElement()
		if err := c.UnmarshalBinary(commit[j*protocol.ElementSize : (j+1)*protocol.ElementSize]); err != nil {
			t.Fatal(err)
		}
		rhs.Add(rhs, protocol.G.NewElement().Mul(c, pow))
		pow.Mul(pow, s.X)
	}
	return protocol.G.NewElement().MulGen(s.Y).IsEqual(rhs)
}

func randomPoly(k int) Polynomial {
	omega := make([]byte, 64)
	rand.Read(omega)
	return DerivePolynomial(omega, k)
}

func randomShares(p Polynomial, n int) []Share {
	out := make([]Share, n)
	for i := range out {
		out[i] = p.Eval(protocol.G.RandomNonZeroScalar(rand.Reader))
	}
	return out
}

func one() group.Scalar { return protocol.G.NewScalar().SetUint64(1) }

// TestMultiScalarMult: Σ s_j·P_j from msm.go equals the sum of circl's
// single multiplications, for random, zero, small and maximal scalars.
func TestMultiScalarMult(t *testing.T) {
	minusOne := protocol.G.NewScalar().Neg(one())
	for _, n := range []int{1, 2, 3, 5, 10, 17} {
		for trial := 0; trial < 4; trial++ {
			var tables []*nafTable
			var scalars []r255.Scalar
			want := protocol.G.Identity()
			for j := 0; j < n; j++ {
				p := protocol.G.RandomElement(rand.Reader)
				var s group.Scalar
				switch (j + trial) % 5 {
				case 0:
					s = protocol.G.NewScalar()
				case 1:
					s = protocol.G.NewScalar().SetUint64(uint64(mrand.IntN(40)))
				case 2:
					s = minusOne
				default:
					s = protocol.G.RandomScalar(rand.Reader)
				}
				want.Add(want, protocol.G.NewElement().Mul(p, s))
				b, _ := p.MarshalBinaryCompress()
				var buf [32]byte
				copy(buf[:], b)
				var rp r255.Point
				if !rp.SetBytes(&buf) {
					t.Fatal("circl encoding refused by go-ristretto")
				}
				tables = append(tables, newNAFTable(&rp))
				scalars = append(scalars, toR255(s))
			}
			got := multiScalarMult(tables, scalars)
			wb, _ := want.MarshalBinaryCompress()
			if string(got.Bytes()) != string(wb) {
				t.Fatalf("n=%d trial %d: multi-scalar multiplication differs from the sum of single ones", n, trial)
			}
		}
	}
}

// TestVerifyShares: honest batches pass; one bad share at any position
// fails the batch; VerifyShare agrees with the naive check share by share.
func TestVerifyShares(t *testing.T) {
	for _, k := range []int{1, 2, 5, 10} {
		for _, n := range []int{1, k, 3 * k} {
			t.Run(fmt.Sprintf("k=%d/n=%d", k, n), func(t *testing.T) {
				p := randomPoly(k)
				raw := CommitPolynomial(p)
				c, err := NewCommitment(raw, k)
				if err != nil {
					t.Fatal(err)
				}
				shares := randomShares(p, n)
				if ok, err := c.VerifyShares(shares); !ok || err != nil {
					t.Fatalf("honest batch rejected (%v)", err)
				}
				for m := range shares {
					bad := append([]Share(nil), shares...)
					bad[m] = Share{X: bad[m].X, Y: protocol.G.NewScalar().Add(bad[m].Y, one())}
					if feldmanNaive(t, raw, k, bad[m]) {
						t.Fatal("tampered share satisfies Feldman's equation")
					}
					if ok, _ := c.VerifyShares(bad); ok {
						t.Fatalf("batch with a bad share at position %d of %d passed", m, n)
					}
					if ok, _ := c.VerifyShare(bad[m]); ok {
						t.Fatal("VerifyShare accepted the tampered share")
					}
					if ok, _ := c.VerifyShare(shares[m]); !ok {
						t.Fatal("VerifyShare rejected an honest share")
					}
				}
			})
		}
	}
	// empty batch; undecodable commitment
	p := randomPoly(3)
	c, _ := NewCommitment(CommitPolynomial(p), 3)
	if ok, err := c.VerifyShares(nil); !ok || err != nil {
		t.Fatalf("empty batch: %v %v", ok, err)
	}
	junk := make([]byte, CommitmentSize(3))
	for i := range junk {
		junk[i] = 0xff
	}
	cj, _ := NewCommitment(junk, 3)
	if ok, err := cj.VerifyShares(randomShares(p, 3)); ok || !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("junk commitment: %v %v", ok, err)
	}
}

// TestVerifySharesCancelling: two bad shares whose errors cancel (y_1 + δ,
// y_2 − δ) pass an unweighted sum check (all weights 1) but not the
// randomized one.
func TestVerifySharesCancelling(t *testing.T) {
	const k = 4
	p := randomPoly(k)
	raw := CommitPolynomial(p)
	c, _ := NewCommitment(raw, k)
	shares := randomShares(p, k)
	delta := protocol.G.RandomNonZeroScalar(rand.Reader)
	shares[1].Y = protocol.G.NewScalar().Add(shares[1].Y, delta)
	shares[2].Y = protocol.G.NewScalar().Sub(shares[2].Y, delta)
	// the unweighted sum Σ y_i·G == Σ_j (Σ_i x_i^j)·C_j still holds
	ysum, lhs := protocol.G.NewScalar(), protocol.G.Identity()
	for _, s := range shares {
		ysum.Add(ysum, s.Y)
	}
	for j := 0; j < k; j++ {
		cj := protocol.G.NewElement()
		cj.UnmarshalBinary(raw[j*protocol.ElementSize : (j+1)*protocol.ElementSize])
		e := protocol.G.NewScalar()
		for _, s := range shares {
			pow := one()
			for i := 0; i < j; i++ {
				pow.Mul(pow, s.X)
			}
			e.Add(e, pow)
		}
		lhs.Add(lhs, protocol.G.NewElement().Mul(cj, e))
	}
	if !protocol.G.NewElement().MulGen(ysum).IsEqual(lhs) {
		t.Fatal("test setup: errors should cancel in the unweighted sum")
	}
	for i := 0; i < 20; i++ {
		if ok, _ := c.VerifyShares(shares); ok {
			t.Fatal("cancelling bad shares passed the randomized batch check")
		}
	}
}

// TestVerifySharesRandomized: random thresholds, batch sizes and
// corruptions (changed y, changed x, a share of another polynomial, a
// swapped y); the batch verdict equals the AND of the naive per-share
// checks, and VerifyShare equals the naive check.
func TestVerifySharesRandomized(t *testing.T) {
	rounds := 60
	if testing.Short() {
		rounds = 15
	}
	for round := 0; round < rounds; round++ {
		k := 1 + mrand.IntN(8)
		n := 1 + mrand.IntN(12)
		p := randomPoly(k)
		raw := CommitPolynomial(p)
		c, _ := NewCommitment(raw, k)
		shares := randomShares(p, n)
		other := randomPoly(k)
		for i := range shares {
			if mrand.IntN(4) != 0 {
				continue
			}
			switch mrand.IntN(4) {
			case 0:
				shares[i].Y = protocol.G.RandomScalar(rand.Reader)
			case 1:
				shares[i].X = protocol.G.NewScalar().Add(shares[i].X, one())
			case 2:
				shares[i] = other.Eval(shares[i].X)
			case 3:
				j := mrand.IntN(n)
				shares[i].Y, shares[j].Y = shares[j].Y, shares[i].Y
			}
		}
		want := true
		for _, s := range shares {
			naive := feldmanNaive(t, raw, k, s)
			want = want && naive
			if ok, err := c.VerifyShare(s); ok != naive || err != nil {
				t.Fatalf("round %d: VerifyShare %v, naive %v (%v)", round, ok, naive, err)
			}
		}
		if ok, err := c.VerifyShares(shares); ok != want || err != nil {
			t.Fatalf("round %d (k=%d, n=%d): batch %v, naive %v (%v)", round, k, n, ok, want, err)
		}
	}
}

// TestInterpolate: k shares give back the polynomial's coefficients (as
// derivePolynomial made them); Contains agrees with the naive Feldman
// check; duplicate x is an error.
func TestInterpolate(t *testing.T) {
	for _, k := range []int{1, 2, 5, 10} {
		p := randomPoly(k)
		raw := CommitPolynomial(p)
		got, err := Interpolate(randomShares(p, k))
		if err != nil {
			t.Fatal(err)
		}
		for j := range p.coeffs {
			if !got.coeffs[j].IsEqual(p.coeffs[j]) {
				t.Fatalf("k=%d: coefficient %d differs", k, j)
			}
		}
		for _, s := range append(randomShares(p, 3), randomShares(randomPoly(k), 3)...) {
			if got.Contains(s) != feldmanNaive(t, raw, k, s) {
				t.Fatalf("k=%d: Contains disagrees with Feldman's equation", k)
			}
		}
	}
	p := randomPoly(3)
	s := randomShares(p, 3)
	s[2] = s[0]
	if _, err := Interpolate(s); err == nil {
		t.Fatal("duplicate x interpolated")
	}
	if _, err := Interpolate(nil); err == nil {
		t.Fatal("no shares interpolated")
	}
}

// TestVerifyPolynomial: the interpolation of k shares passes the
// coefficient-side batch check iff every share satisfies the naive Feldman
// equation; a tampered coefficient fails; a polynomial of the wrong degree
// is an error.
func TestVerifyPolynomial(t *testing.T) {
	for round := 0; round < 60; round++ {
		k := 1 + round%10
		p := randomPoly(k)
		raw := CommitPolynomial(p)
		c, _ := NewCommitment(raw, k)
		if ok, err := c.VerifyPolynomial(p); !ok || err != nil {
			t.Fatalf("k=%d: committed polynomial rejected (%v)", k, err)
		}
		shares := randomShares(p, k)
		if round%3 != 0 { // tamper one share at a random position
			m := mrand.IntN(k)
			switch round % 3 {
			case 1:
				shares[m].Y = protocol.G.NewScalar().Add(shares[m].Y, one())
			case 2:
				shares[m] = randomPoly(k).Eval(shares[m].X)
			}
		}
		want := true
		for _, s := range shares {
			want = want && feldmanNaive(t, raw, k, s)
		}
		f, err := Interpolate(shares)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.VerifyPolynomial(f); ok != want || err != nil {
			t.Fatalf("round %d (k=%d): polynomial check %v, naive %v (%v)", round, k, ok, want, err)
		}
		if want && !f.Secret().IsEqual(p.Secret()) {
			t.Fatal("verified polynomial has another f(0)")
		}
		// a tampered coefficient of the committed polynomial
		q := Polynomial{coeffs: append([]group.Scalar(nil), p.coeffs...)}
		j := mrand.IntN(k)
		q.coeffs[j] = protocol.G.NewScalar().Add(q.coeffs[j], one())
		if ok, _ := c.VerifyPolynomial(q); ok {
			t.Fatalf("k=%d: coefficient %d tampered, check passed", k, j)
		}
	}
	c, _ := NewCommitment(CommitPolynomial(randomPoly(3)), 3)
	if _, err := c.VerifyPolynomial(randomPoly(2)); err == nil {
		t.Fatal("polynomial of degree 1 checked against k=3")
	}
	// undecodable points: an error on both paths (k ≤ DirectCheckMaxK and above)
	for _, k := range []int{DirectCheckMaxK, DirectCheckMaxK + 2} {
		junk := make([]byte, CommitmentSize(k))
		for i := range junk {
			junk[i] = 0xff
		}
		cj, _ := NewCommitment(junk, k)
		if ok, err := cj.VerifyPolynomial(randomPoly(k)); ok || !errors.Is(err, protocol.ErrMalformed) {
			t.Fatalf("k=%d junk commitment: %v %v", k, ok, err)
		}
	}
}
