package vss

import (
	"errors"
	"math/big"

	"github.com/cloudflare/circl/group"
	"github.com/crowdlog/crowdlog/protocol"
)

// Interpolate returns the polynomial of degree < len(shares) through the
// shares (Lagrange interpolation, all coefficients, not only f(0) as Recover
// does). Shares must have distinct X; errors otherwise or when shares is
// empty. Cost: O(k²) scalar multiplications (~0.1 µs each) and one
// inversion (Montgomery's batch-inversion trick instead of k), done with
// math/big's variable-time extended Euclid (~2 µs instead of ~40 µs for
// constant-time Fermat inversion): the inverted value is a product of
// differences of the x-coordinates only, which are not secret from the
// process that holds the shares (the y-coordinates and coefficients only go
// through constant-time multiplications).
//
// Use: for k shares of one group, Commitment.VerifyPolynomial of the result
// verifies all k at once (the aggregator's check at the threshold). Once it
// passed (or the k shares passed VerifyShares or VerifyShare), the result
// is the committed polynomial f itself (k points fix a polynomial of degree
// k−1), so a later share (x, y) of that group satisfies Feldman's equation
// iff y == f(x) (Polynomial.Contains): the same verdict as VerifyShare for
// a few scalar multiplications instead of a multi-scalar multiplication.
// The soundness of that verdict is the soundness of the check that verified
// f (2^−128 for the batch checks, exact for VerifyShare).
func Interpolate(shares []Share) (Polynomial, error) {
	n := len(shares)
	if n == 0 {
		return Polynomial{}, errors.New("protocol: interpolate needs at least one share")
	}
	// m(X) = Π_i (X − x_i), coefficients m[0..n]
	m := make([]group.Scalar, n+1)
	for i := range m {
		m[i] = protocol.G.NewScalar()
	}
	m[0].SetUint64(1)
	t := protocol.G.NewScalar()
	for i, s := range shares {
		// multiply m (degree i) by (X − x_i)
		for j := i + 1; j >= 1; j-- {
			t.Mul(m[j], s.X)
			m[j].Set(m[j-1])
			m[j].Sub(m[j], t)
		}
		m[0].Mul(m[0], s.X)
		m[0].Neg(m[0])
	}
	// d_i = Π_{j≠i} (x_i − x_j), then their inverses by one inversion
	d := make([]group.Scalar, n)
	for i := range shares {
		d[i] = protocol.G.NewScalar().SetUint64(1)
		for j := range shares {
			if i == j {
				continue
			}
			t.Sub(shares[i].X, shares[j].X)
			if t.IsZero() {
				return Polynomial{}, errors.New("protocol: duplicate share x; deduplicate shares before Interpolate")
			}
			d[i].Mul(d[i], t)
		}
	}
	prefix := make([]group.Scalar, n) // prefix[i] = d_0·…·d_{i−1}
	acc := protocol.G.NewScalar().SetUint64(1)
	for i := range d {
		prefix[i] = acc.Copy()
		acc.Mul(acc, d[i])
	}
	acc = invertVarTime(acc)
	for i := n - 1; i >= 0; i-- {
		inv := protocol.G.NewScalar().Mul(acc, prefix[i]) // 1/d_i
		acc.Mul(acc, d[i])
		d[i] = inv
	}
	// f = Σ_i y_i/d_i · m(X)/(X − x_i); q = m/(X − x_i) by synthetic division
	coeffs := make([]group.Scalar, n)
	for j := range coeffs {
		coeffs[j] = protocol.G.NewScalar()
	}
	q := protocol.G.NewScalar()
	w := protocol.G.NewScalar()
	for i, s := range shares {
		w.Mul(s.Y, d[i])
		q.Set(m[n]) // q_{n−1}
		for j := n - 1; j >= 0; j-- {
			coeffs[j].Add(coeffs[j], t.Mul(w, q))
			if j > 0 { // q_{j−1} = m_j + x_i·q_j
				q.Mul(q, s.X)
				q.Add(q, m[j])
			}
		}
	}
	return Polynomial{coeffs: coeffs}, nil
}

// order is ℓ = 2^252 + 27742317777372353535851937790883648493, the order of
// ristretto255 (RFC 9496 §4).
var order, _ = new(big.Int).SetString("7237005577332262213973186563042994240857116359379907606001950938285454250989", 10)

// invertVarTime returns 1/s mod ℓ in variable time (s non-zero, public).
func invertVarTime(s group.Scalar) group.Scalar {
	le, _ := s.MarshalBinary()
	be := make([]byte, len(le))
	for i, b := range le {
		be[len(le)-1-i] = b
	}
	z := new(big.Int).SetBytes(be)
	z.ModInverse(z, order)
	return protocol.G.NewScalar().SetBigInt(z)
}

// Contains reports whether the share lies on p: y == p(x).
func (p Polynomial) Contains(s Share) bool {
	return p.Eval(s.X).Y.IsEqual(s.Y)
}
