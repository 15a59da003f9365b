package protocol

import (
	"crypto/sha256"
	"fmt"

	"github.com/cloudflare/circl/group"
)

// Feldman commitments (Feldman, FOCS 1987) to an artifact's Shamir
// polynomial f(x) = a_0 + a_1·x + … + a_{k−1}·x^{k−1}: C_i = a_i·G on
// ristretto255, G the standard generator. The a_i are derived from ω
// (derivePolynomial), so every honest client of one artifact in one epoch
// computes the same commitment; the aggregator checks a share (x, y) with
// y·G == Σ x^i·C_i and a recovered secret s with s·G == C_0.
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
func CommitmentSize(k int) int { return k * elementSize }

// commitPolynomial returns C_0 ‖ … ‖ C_{k−1}, each a compressed 32-byte
// ristretto255 element.
func commitPolynomial(p Polynomial) []byte {
	out := make([]byte, 0, CommitmentSize(len(p.coeffs)))
	e := G.NewElement()
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

// Commitment is a decoded Feldman commitment. Points are decoded lazily:
// VerifySecret needs only C_0, VerifyShare all k.
type Commitment struct {
	raw    []byte
	k      int
	points []group.Element // nil until decoded
	c0     group.Element
}

// NewCommitment wraps an encoded commitment of threshold k. Errors when the
// length is not k×32 bytes; invalid points are reported by the Verify
// methods.
func NewCommitment(raw []byte, k int) (*Commitment, error) {
	if k < 1 || k > MaxK || len(raw) != CommitmentSize(k) {
		return nil, malformed("commitment of %d bytes for k=%d, want %d", len(raw), k, CommitmentSize(k))
	}
	return &Commitment{raw: raw, k: k}, nil
}

func (c *Commitment) decode() error {
	if c.points != nil {
		return nil
	}
	pts := make([]group.Element, c.k)
	for i := range pts {
		pts[i] = G.NewElement()
		if err := pts[i].UnmarshalBinary(c.raw[i*elementSize : (i+1)*elementSize]); err != nil {
			return malformed("commitment point %d: %v", i, err)
		}
	}
	c.points, c.c0 = pts, pts[0]
	return nil
}

// VerifySecret reports whether s·G == C_0, i.e. s is the committed f(0).
// Cost: one fixed-base multiplication (~20 µs) plus decoding C_0 once.
// Errors when C_0 is not a valid encoding.
func (c *Commitment) VerifySecret(s group.Scalar) (bool, error) {
	if c.c0 == nil {
		e := G.NewElement()
		if err := e.UnmarshalBinary(c.raw[:elementSize]); err != nil {
			return false, malformed("commitment point 0: %v", err)
		}
		c.c0 = e
	}
	return G.NewElement().MulGen(s).IsEqual(c.c0), nil
}

// VerifyShare reports whether y·G == Σ_{i<k} x^i·C_i (Feldman's check), by
// Horner's rule in the group: k−1 variable-base multiplications by x and one
// fixed-base multiplication. Errors when a commitment point is not a valid
// encoding (every share then fails).
func (c *Commitment) VerifyShare(s Share) (bool, error) {
	if err := c.decode(); err != nil {
		return false, err
	}
	acc := c.points[c.k-1].Copy()
	for i := c.k - 2; i >= 0; i-- {
		acc.Mul(acc, s.X)
		acc.Add(acc, c.points[i])
	}
	return G.NewElement().MulGen(s.Y).IsEqual(acc), nil
}

// checkCommitmentSize validates a report's commitment length against k.
func checkCommitmentSize(b []byte, k int) error {
	if len(b) != CommitmentSize(k) {
		return fmt.Errorf("%w: commitment of %d bytes for k=%d, want %d", ErrMalformed, len(b), k, CommitmentSize(k))
	}
	return nil
}
