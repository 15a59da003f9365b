package vss

import (
	"errors"
	"fmt"

	"github.com/cloudflare/circl/group"
	"github.com/crowdlog/crowdlog/protocol"
)

// ErrThreshold is returned by Recover when fewer than k distinct shares are
// given.
var ErrThreshold = errors.New("protocol: fewer than k distinct shares")

// Share is one point (X, Y) of a Shamir polynomial over the ristretto255
// scalar field (Shamir 1979; CrowdLogging §3.1, STAR §4). X is never zero.
type Share struct {
	X, Y group.Scalar
}

// Polynomial is a degree k−1 polynomial f with f(0) = the sealed secret.
// Coefficients are derived deterministically from the OPRF output ω, so every
// client holding the same artifact in the same epoch builds the same f
// (STAR §4: "randomness-derived" shares).
type Polynomial struct {
	coeffs []group.Scalar // coeffs[0] is the secret
}

// DerivePolynomial builds f of degree k−1 with coefficients
// HashToScalar(ω ‖ i) (domain "crowdlog-v1 poly"); measured: circl's
// RandomScalar ignores its reader on ristretto255, so this is done by hand.
func DerivePolynomial(omega []byte, k int) Polynomial {
	dst := []byte("crowdlog-v1 poly")
	c := make([]group.Scalar, k)
	for i := range c {
		msg := append(append([]byte{}, omega...), byte(i>>8), byte(i))
		c[i] = protocol.G.HashToScalar(msg, dst)
	}
	return Polynomial{coeffs: c}
}

// Secret returns f(0).
func (p Polynomial) Secret() group.Scalar { return p.coeffs[0].Copy() }

// Eval returns the share (x, f(x)) by Horner's rule.
func (p Polynomial) Eval(x group.Scalar) Share {
	y := protocol.G.NewScalar()
	for i := len(p.coeffs) - 1; i >= 0; i-- {
		y.Mul(y, x)
		y.Add(y, p.coeffs[i])
	}
	return Share{X: x.Copy(), Y: y}
}

// Recover interpolates f(0) from exactly the first k shares (Lagrange at 0).
// Shares must have distinct, non-zero X; duplicates make it fail with an
// error instead of panicking. Errors with ErrThreshold when len(shares) < k.
// A wrong share yields a wrong secret silently: callers check it with the
// AEAD (see Opener). Cost: k inversions of ~30 µs.
func Recover(shares []Share, k int) (group.Scalar, error) {
	if k < 1 {
		return nil, fmt.Errorf("protocol: threshold k=%d, must be at least 1", k)
	}
	if len(shares) < k {
		return nil, fmt.Errorf("%w: have %d, need %d", ErrThreshold, len(shares), k)
	}
	s := shares[:k]
	secret := protocol.G.NewScalar()
	num := protocol.G.NewScalar()
	den := protocol.G.NewScalar()
	diff := protocol.G.NewScalar()
	term := protocol.G.NewScalar()
	for i := range s {
		if s[i].X.IsZero() {
			return nil, errors.New("protocol: share with x = 0")
		}
		num.SetUint64(1)
		den.SetUint64(1)
		for j := range s {
			if i == j {
				continue
			}
			num.Mul(num, s[j].X)
			diff.Sub(s[j].X, s[i].X)
			if diff.IsZero() {
				return nil, errors.New("protocol: duplicate share x; deduplicate shares before Recover")
			}
			den.Mul(den, diff)
		}
		den.Inv(den)
		term.Mul(num, den)
		term.Mul(term, s[i].Y)
		secret.Add(secret, term)
	}
	return secret, nil
}

// MaxK is the largest supported threshold.
const MaxK = 1024

// MarshalBinary encodes f as its k coefficients, f(0) first, each a
// canonical 32-byte ristretto255 scalar: k×32 bytes. It is how a recovered
// group's verified polynomial enters an aggregator snapshot.
func (p Polynomial) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, len(p.coeffs)*protocol.ScalarSize)
	for _, c := range p.coeffs {
		e, err := c.MarshalBinary()
		if err != nil {
			return nil, err
		}
		b = append(b, e...)
	}
	return b, nil
}

// UnmarshalPolynomial decodes MarshalBinary's encoding: a non-empty
// multiple of 32 bytes, each a canonical scalar. Errors wrap
// protocol.ErrMalformed.
func UnmarshalPolynomial(b []byte) (Polynomial, error) {
	if len(b) == 0 || len(b)%protocol.ScalarSize != 0 {
		return Polynomial{}, fmt.Errorf("%w: polynomial of %d bytes (want a non-empty multiple of %d)", protocol.ErrMalformed, len(b), protocol.ScalarSize)
	}
	c := make([]group.Scalar, len(b)/protocol.ScalarSize)
	for i := range c {
		c[i] = protocol.G.NewScalar()
		if err := c[i].UnmarshalBinary(b[i*protocol.ScalarSize : (i+1)*protocol.ScalarSize]); err != nil {
			return Polynomial{}, fmt.Errorf("%w: polynomial coefficient %d: %v", protocol.ErrMalformed, i, err)
		}
	}
	return Polynomial{coeffs: c}, nil
}
