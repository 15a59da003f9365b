package vss

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"

	r255 "github.com/bwesterb/go-ristretto"
	"github.com/cloudflare/circl/group"
	"github.com/crowdlog/crowdlog/protocol"
)

// Feldman commitments (Feldman, FOCS 1987) to an artifact's Shamir
// polynomial f(x) = a_0 + a_1·x + … + a_{k−1}·x^{k−1}: C_i = a_i·G on
// ristretto255, G the standard generator. The a_i are derived from ω
// (derivePolynomial), so every honest client of one artifact in one epoch
// computes the same commitment; a share (x, y) is valid iff
// y·G == Σ x^i·C_i (VerifyShare one at a time, VerifyShares in a batch), and
// k shares are all valid iff the polynomial through them has coefficients
// a_i with a_i·G == C_i (VerifyPolynomial, batched; what the aggregator runs
// at the threshold).
//
// What it reveals: C_i = a_i·G hides a_i under the discrete-log assumption,
// and a_0 = f(0) is a hash output (uniform), so a holder of k−1 shares and
// the commitment still cannot compute the AEAD key. The commitment is as
// unlinkable as the tag: both are functions of ω, which only clients that
// know the artifact can obtain from the randomness service.
//
// Wire choice: every report carries the full vector (k×32 bytes: 160 bytes
// at k = 5, one padding class below 1 KiB up to k ≈ 20). A hash-only variant
// would need the vector from somewhere else; the aggregator instead hashes
// the vector it receives (CommitmentHash) to key its state.

// CommitmentSize returns the encoded size of a commitment for threshold k.
func CommitmentSize(k int) int { return k * protocol.ElementSize }

// CommitPolynomial returns C_0 ‖ … ‖ C_{k−1}, each a compressed 32-byte
// ristretto255 element.
func CommitPolynomial(p Polynomial) []byte {
	out := make([]byte, 0, CommitmentSize(len(p.coeffs)))
	e := protocol.G.NewElement()
	for _, a := range p.coeffs {
		e.MulGen(a)
		b, _ := e.MarshalBinaryCompress()
		out = append(out, b...)
	}
	return out
}

// CommitmentHash is SHA-256("crowdlog-v1 commitment" ‖ commitment): the
// aggregator keeps shares apart by (tag, CommitmentHash), so reports with
// different polynomials under one tag never mix.
func CommitmentHash(commitment []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte("crowdlog-v1 commitment"))
	h.Write(commitment)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// Commitment is a decoded Feldman commitment. Points are decoded once, on
// first use, and kept: VerifySecret needs only C_0; the other checks decode
// all k points (~6 µs each) and, when they use a multi-scalar
// multiplication, build each point's table (~3 µs each), then reuse them.
// Not safe for concurrent use (the aggregator holds one per group, on one
// goroutine).
type Commitment struct {
	raw    []byte
	k      int
	points []*r255.Point // C_0 … C_{k−1}; nil until decoded
	tables []*nafTable   // odd multiples of each C_i; nil until needed
	c0     *r255.Point
}

// NewCommitment wraps an encoded commitment of threshold k. Errors when the
// length is not k×32 bytes; invalid points are reported by the Verify
// methods.
func NewCommitment(raw []byte, k int) (*Commitment, error) {
	if k < 1 || k > MaxK || len(raw) != CommitmentSize(k) {
		return nil, protocol.Malformed("commitment of %d bytes for k=%d, want %d", len(raw), k, CommitmentSize(k))
	}
	return &Commitment{raw: raw, k: k}, nil
}

// decodePoint decodes commitment point i (RFC 9496 §4.3.1: non-canonical
// encodings are refused, as circl's UnmarshalBinary does).
func (c *Commitment) decodePoint(i int) (*r255.Point, error) {
	var buf [protocol.ElementSize]byte
	copy(buf[:], c.raw[i*protocol.ElementSize:(i+1)*protocol.ElementSize])
	p := new(r255.Point)
	if !p.SetBytes(&buf) {
		return nil, protocol.Malformed("commitment point %d is not a ristretto255 encoding", i)
	}
	return p, nil
}

// decode decodes all k points once.
func (c *Commitment) decode() error {
	if c.points != nil {
		return nil
	}
	points := make([]*r255.Point, c.k)
	for i := range points {
		p, err := c.decodePoint(i)
		if err != nil {
			return err
		}
		points[i] = p
	}
	c.points, c.c0 = points, points[0]
	return nil
}

// decodeTables decodes all k points and builds their tables once.
func (c *Commitment) decodeTables() error {
	if c.tables != nil {
		return nil
	}
	if err := c.decode(); err != nil {
		return err
	}
	tables := make([]*nafTable, c.k)
	for i, p := range c.points {
		tables[i] = newNAFTable(p)
	}
	c.tables = tables
	return nil
}

// toR255 converts a circl ristretto255 scalar (canonical little-endian
// encoding, RFC 9496) to the go-ristretto scalar the multiplications use.
func toR255(s group.Scalar) r255.Scalar {
	var out r255.Scalar
	b, _ := s.MarshalBinary()
	var buf [protocol.ScalarSize]byte
	copy(buf[:], b)
	out.SetBytes(&buf)
	return out
}

// VerifySecret reports whether s·G == C_0, i.e. s is the committed f(0).
// Cost: one fixed-base multiplication (~20 µs) plus decoding C_0 once.
// Errors when C_0 is not a valid encoding.
func (c *Commitment) VerifySecret(s group.Scalar) (bool, error) {
	if c.c0 == nil {
		p, err := c.decodePoint(0)
		if err != nil {
			return false, err
		}
		c.c0 = p
	}
	sc := toR255(s)
	var lhs r255.Point
	lhs.ScalarMultBase(&sc)
	return lhs.Equals(c.c0), nil
}

// VerifyShare reports whether y·G == Σ_{i<k} x^i·C_i (Feldman, FOCS 1987):
// the right side as one multi-scalar multiplication (msm.go; variable time,
// its scalars x^i are not secret), the left as one constant-time fixed-base
// multiplication. Deterministic. Errors (ErrMalformed) when a
// commitment point is not a valid encoding: every share then fails. For
// several shares of one commitment VerifyShares is cheaper per share.
func (c *Commitment) VerifyShare(s Share) (bool, error) {
	if err := c.decodeTables(); err != nil {
		return false, err
	}
	x := toR255(s.X)
	pow := make([]r255.Scalar, c.k)
	pow[0].SetOne()
	for i := 1; i < c.k; i++ {
		pow[i].Mul(&pow[i-1], &x)
	}
	rhs := multiScalarMult(c.tables, pow)
	y := toR255(s.Y)
	var lhs r255.Point
	lhs.ScalarMultBase(&y)
	return lhs.Equals(&rhs), nil
}

// BatchWeightBits is the size of VerifyShares' random weights, hence its
// soundness: a batch holding at least one bad share passes with probability
// at most 2^−BatchWeightBits.
const BatchWeightBits = 128

// VerifyShares reports whether every share satisfies Feldman's equation
// y·G == Σ_{j<k} x^j·C_j, with one randomized check for the whole batch:
// the small-exponents test of Bellare, Garay and Rabin ("Fast batch
// verification for modular exponentiation and digital signatures",
// EUROCRYPT 1998, LNCS 1403, pp. 236–250). It draws independent weights
// r_i, uniform in [0, 2^128), from crypto/rand after the batch is fixed,
// and checks
//
//	(Σ_i r_i·y_i)·G == Σ_j (Σ_i r_i·x_i^j)·C_j
//
// with one constant-time fixed-base multiplication (left, it depends on the
// secret y_i) and one k-point multi-scalar multiplication (right; its
// scalars depend only on the public x_i and the one-time weights, msm.go):
// the cost of about two single multiplications for the whole batch, instead
// of k+1 per share.
//
// Security argument. Completeness: valid shares make both sides equal for
// every choice of r, so an honest batch always passes. Soundness: write
// e_i = y_i − f(x_i) for the committed f (G has prime order ℓ, so C_j = a_j·G
// fixes a_j, and share i is valid iff e_i = 0). The check is
// (Σ_i r_i·e_i)·G == 0, i.e. Σ_i r_i·e_i ≡ 0 (mod ℓ). If some e_m ≠ 0, then
// for any fixed values of the other weights at most one r_m mod ℓ satisfies
// it, and r_m takes 2^128 < ℓ distinct values mod ℓ, each with probability
// 2^−128: a bad batch passes with probability at most 2^−128, however its
// shares were chosen, as long as they were chosen before the weights (they
// are: the weights are drawn here, after the shares arrived, and never
// reused). ristretto255 being prime-order matters: on plain edwards25519 a
// small-order component added to y_i·G could cancel out under some weights.
//
// An empty batch passes. Errors (ErrMalformed) when a commitment point is
// not a valid encoding. A failing batch does not say which share is bad:
// check them one by one with VerifyShare.
func (c *Commitment) VerifyShares(shares []Share) (bool, error) {
	if err := c.decodeTables(); err != nil {
		return false, err
	}
	if len(shares) == 0 {
		return true, nil
	}
	// crypto/rand.Read never returns an error (Go 1.24+ crashes instead)
	weights := make([]byte, len(shares)*BatchWeightBits/8)
	rand.Read(weights)
	// coef[j] = Σ_i r_i·x_i^j, ysum = Σ_i r_i·y_i
	coef := make([]r255.Scalar, c.k)
	var ysum, r, p, tmp r255.Scalar
	for i, s := range shares {
		var buf [protocol.ScalarSize]byte
		copy(buf[:], weights[i*BatchWeightBits/8:(i+1)*BatchWeightBits/8])
		r.SetBytes(&buf)
		y := toR255(s.Y)
		ysum.Add(&ysum, tmp.Mul(&r, &y))
		x := toR255(s.X)
		p.Set(&r)
		for j := 0; j < c.k; j++ {
			coef[j].Add(&coef[j], &p)
			if j+1 < c.k {
				p.Mul(&p, &x)
			}
		}
	}
	rhs := multiScalarMult(c.tables, coef)
	var lhs r255.Point
	lhs.ScalarMultBase(&ysum)
	return lhs.Equals(&rhs), nil
}

// VerifyPolynomial reports whether f is the committed polynomial, i.e.
// a_j·G == C_j for every coefficient a_j of f, with one randomized check:
// the same small-exponents test as VerifyShares, applied to the k
// coefficients instead of the shares. It draws weights ρ_j uniform in
// [0, 2^128) from crypto/rand and checks
//
//	(Σ_j ρ_j·a_j)·G == Σ_j ρ_j·C_j
//
// with one constant-time fixed-base multiplication (left: the a_j are
// secret) and one k-point multi-scalar multiplication whose scalars are the
// 128-bit weights only (right; half the doublings of VerifyShares, whose
// scalars are full size). Soundness: if some a_m differs from the committed
// coefficient, the check passes only when Σ_j ρ_j·(a_j − a*_j) ≡ 0 (mod ℓ),
// which for fixed other weights holds for at most one of the 2^128 values
// of ρ_m: probability at most 2^−128 (the argument of VerifyShares).
//
// Use with Interpolate: k shares with distinct x are all valid (each
// satisfies Feldman's equation) iff the polynomial through them is the
// committed one, since k points fix a polynomial of degree k−1. So
// VerifyPolynomial(Interpolate(shares)) batch-verifies exactly k shares and
// also yields f(0) and the f that later shares are checked against
// (Polynomial.Contains). For k ≤ DirectCheckMaxK each coefficient is
// checked alone instead (verifyCoefficients: exact, and cheaper there).
// Errors when f does not have k coefficients, or (ErrMalformed) when a
// commitment point is not a valid encoding.
func (c *Commitment) VerifyPolynomial(f Polynomial) (bool, error) {
	if len(f.coeffs) != c.k {
		return false, fmt.Errorf("protocol: polynomial with %d coefficients against a commitment with k=%d; interpolate exactly k shares", len(f.coeffs), c.k)
	}
	if c.k <= DirectCheckMaxK {
		return c.verifyCoefficients(f)
	}
	return c.verifyCoefficientsBatch(f)
}

// verifyCoefficientsBatch is VerifyPolynomial's small-exponents test.
func (c *Commitment) verifyCoefficientsBatch(f Polynomial) (bool, error) {
	if err := c.decodeTables(); err != nil {
		return false, err
	}
	weights := make([]byte, c.k*BatchWeightBits/8)
	rand.Read(weights)
	rho := make([]r255.Scalar, c.k)
	var asum, tmp r255.Scalar
	for j := range rho {
		var buf [protocol.ScalarSize]byte
		copy(buf[:], weights[j*BatchWeightBits/8:(j+1)*BatchWeightBits/8])
		rho[j].SetBytes(&buf)
		a := toR255(f.coeffs[j])
		asum.Add(&asum, tmp.Mul(&rho[j], &a))
	}
	rhs := multiScalarMult(c.tables, rho)
	var lhs r255.Point
	lhs.ScalarMultBase(&asum)
	return lhs.Equals(&rhs), nil
}

// DirectCheckMaxK is the largest k for which VerifyPolynomial checks each
// coefficient with its own constant-time fixed-base multiplication (about
// k × 22 µs here) instead of the batch (about 40 µs for the doublings and the
// fixed-base multiplication plus 15 µs per point): the measured crossover
// lies between k = 3 and 4.
const DirectCheckMaxK = 3

// verifyCoefficients checks a_j·G == C_j for every j, deterministically.
func (c *Commitment) verifyCoefficients(f Polynomial) (bool, error) {
	if err := c.decode(); err != nil {
		return false, err
	}
	ok := true
	for j, a := range f.coeffs {
		sc := toR255(a)
		var lhs r255.Point
		lhs.ScalarMultBase(&sc)
		ok = lhs.Equals(c.points[j]) && ok // no early exit: constant time in f
	}
	return ok, nil
}

// CheckCommitmentSize validates a report's commitment length against k.
func CheckCommitmentSize(b []byte, k int) error {
	if len(b) != CommitmentSize(k) {
		return fmt.Errorf("%w: commitment of %d bytes for k=%d, want %d", protocol.ErrMalformed, len(b), k, CommitmentSize(k))
	}
	return nil
}
