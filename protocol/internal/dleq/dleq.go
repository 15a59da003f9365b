// Package dleq is RFC 9497's batched DLEQ proof (§2.2: GenerateProof,
// VerifyProof, ComputeComposites, ComputeCompositesFast) for the
// ristretto255-SHA512 VOPRF (§4.1, mode 0x01), with the sums over public
// values computed by variable-time multi-scalar multiplication
// (github.com/gtank/ristretto255). Proofs are byte for byte those of
// github.com/cloudflare/circl/zk/dleq's ProveBatchWithRandomnessRFC9497 and
// verify exactly when its VerifyBatchRFC9497 does; only the time they take
// differs.
//
// What is variable time and why that is safe: the verifier's inputs (the
// public key, blinded and evaluated elements, the proof (c, s) and the
// composite weights d_i, which are hashes of those) are all public — they
// cross the wire or are derived from what did — so VerifyProof leaks
// nothing by its timing. The prover's composite M = Σ d_i·C_i is likewise
// computed from public values (RFC 9497 §2.2.1: the blinded elements C_i
// and their evaluations D_i, both sent in the clear). Everything that
// touches the private key k or the proof nonce r stays constant time:
// Z = k·M, D_i = k·C_i, t2 = r·G, t3 = r·M, s = r − c·k.
//
// The client side (client.go: Blind, Blinds.VerifyFinalize) and the
// token verifier's FullEvaluate are here too, constant time in the
// blinds and the key.
//
// Elements are 32-byte canonical ristretto255 encodings (RFC 9496 §4.3),
// scalars 32-byte little-endian integers below ℓ (RFC 9497 §4.1).
package dleq

import (
	"crypto"
	_ "crypto/sha512" // the suite's hash
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cloudflare/circl/expander"
	r255 "github.com/gtank/ristretto255"
)

// Sizes of the ristretto255-SHA512 suite (RFC 9497 §4.1), in bytes.
const (
	ElementSize = 32
	ScalarSize  = 32
	ProofSize   = 2 * ScalarSize // c ‖ s (RFC 9497 §2.2.1)
)

// contextString is RFC 9497 §3.1's "OPRFV1-" ‖ I2OSP(mode, 1) ‖ "-" ‖
// identifier for the verifiable mode of ristretto255-SHA512.
const contextString = "OPRFV1-\x01-ristretto255-SHA512"

var (
	seedDST = []byte("Seed-" + contextString)
	h2sDST  = []byte("HashToScalar-" + contextString)
)

var (
	// ErrProof: the proof does not verify (RFC 9497 §2.2.2 VerifyProof
	// returns false).
	ErrProof = errors.New("dleq: proof does not verify")
	// ErrBatch: the batch is empty, longer than 65535, or its two element
	// lists have different lengths.
	ErrBatch = errors.New("dleq: invalid batch shape")
	// ErrEncoding: an element, scalar or proof is not a canonical
	// encoding of the right size, or an element is the identity.
	ErrEncoding = errors.New("dleq: invalid encoding")
)

// DecodeElement decodes a 32-byte canonical ristretto255 encoding (RFC
// 9496 §4.3.1) that is not the identity. Errors wrap ErrEncoding.
func DecodeElement(b []byte) (*r255.Element, error) {
	e := r255.NewElement()
	if len(b) != ElementSize {
		return nil, fmt.Errorf("%w: element of %d bytes, want %d", ErrEncoding, len(b), ElementSize)
	}
	if err := e.Decode(b); err != nil {
		return nil, fmt.Errorf("%w: element: %v", ErrEncoding, err)
	}
	if e.Equal(identity) == 1 {
		return nil, fmt.Errorf("%w: identity element", ErrEncoding)
	}
	return e, nil
}

var identity = r255.NewElement()

// decodeScalar decodes a 32-byte little-endian scalar below ℓ. Errors wrap
// ErrEncoding.
func decodeScalar(b []byte) (*r255.Scalar, error) {
	if len(b) != ScalarSize {
		return nil, fmt.Errorf("%w: scalar of %d bytes, want %d", ErrEncoding, len(b), ScalarSize)
	}
	s := r255.NewScalar()
	if err := s.Decode(b); err != nil {
		return nil, fmt.Errorf("%w: scalar: %v", ErrEncoding, err)
	}
	return s, nil
}

// hashToScalar is the suite's HashToScalar (RFC 9497 §4.1): expand_message_xmd
// with SHA-512 (RFC 9380 §5.3.1) to 64 bytes, reduced mod ℓ.
func hashToScalar(msg []byte) *r255.Scalar {
	u := expander.NewExpanderMD(crypto.SHA512, h2sDST).Expand(msg, 64)
	return r255.NewScalar().FromUniformBytes(u)
}

// weights are the composite weights d_i of RFC 9497 §2.2.1
// ComputeComposites: seed = Hash(I2OSP(len(Bm), 2) ‖ Bm ‖ I2OSP(len(seedDST), 2)
// ‖ seedDST), d_i = HashToScalar(I2OSP(len(seed), 2) ‖ seed ‖ I2OSP(i, 2) ‖
// I2OSP(len(Ci), 2) ‖ Ci ‖ I2OSP(len(Di), 2) ‖ Di ‖ "Composite").
func weights(pk []byte, c, d [][]byte) []*r255.Scalar {
	h := crypto.SHA512.New()
	var l [2]byte
	binary.BigEndian.PutUint16(l[:], uint16(len(pk)))
	h.Write(l[:])
	h.Write(pk)
	binary.BigEndian.PutUint16(l[:], uint16(len(seedDST)))
	h.Write(l[:])
	h.Write(seedDST)
	seed := h.Sum(nil)

	ds := make([]*r255.Scalar, len(c))
	in := make([]byte, 0, 2+len(seed)+2+2+ElementSize+2+ElementSize+len("Composite"))
	for i := range c {
		in = in[:0]
		in = binary.BigEndian.AppendUint16(in, uint16(len(seed)))
		in = append(in, seed...)
		in = binary.BigEndian.AppendUint16(in, uint16(i))
		in = binary.BigEndian.AppendUint16(in, uint16(len(c[i])))
		in = append(in, c[i]...)
		in = binary.BigEndian.AppendUint16(in, uint16(len(d[i])))
		in = append(in, d[i]...)
		in = append(in, "Composite"...)
		ds[i] = hashToScalar(in)
	}
	return ds
}

// challenge is RFC 9497 §2.2.1's c = HashToScalar(I2OSP(len(Bm), 2) ‖ Bm ‖
// … ‖ I2OSP(len(a3), 2) ‖ a3 ‖ "Challenge") over Bm, a0 = M, a1 = Z,
// a2 = t2, a3 = t3.
func challenge(pk []byte, m, z, t2, t3 *r255.Element) *r255.Scalar {
	in := make([]byte, 0, 5*(2+ElementSize)+len("Challenge"))
	in = binary.BigEndian.AppendUint16(in, ElementSize)
	in = append(in, pk...)
	for _, e := range []*r255.Element{m, z, t2, t3} {
		in = binary.BigEndian.AppendUint16(in, ElementSize)
		in = e.Encode(in)
	}
	in = append(in, "Challenge"...)
	return hashToScalar(in)
}

func checkBatch(c, d [][]byte) error {
	if len(c) == 0 || len(c) != len(d) || len(c) > 0xffff {
		return fmt.Errorf("%w: %d and %d elements", ErrBatch, len(c), len(d))
	}
	return nil
}

// Verify is RFC 9497 §2.2.2 VerifyProof(G, pk, C, D, proof) with
// ComputeComposites (§2.2.1): it checks that one k gives pk = k·G and
// D_i = k·C_i for every i. pk and each C_i, D_i are 32-byte element
// encodings, proof is c ‖ s (ProofSize bytes). Variable time in all of
// them (they are public). Errors wrap ErrBatch (shape), ErrEncoding (an
// undecodable or identity element, a non-canonical scalar) or ErrProof.
func Verify(pk []byte, c, d [][]byte, proof []byte) error {
	if err := checkBatch(c, d); err != nil {
		return err
	}
	if len(proof) != ProofSize {
		return fmt.Errorf("%w: proof of %d bytes, want %d", ErrEncoding, len(proof), ProofSize)
	}
	pc, err := decodeScalar(proof[:ScalarSize])
	if err != nil {
		return err
	}
	ps, err := decodeScalar(proof[ScalarSize:])
	if err != nil {
		return err
	}
	n := len(c)
	pts := make([]*r255.Element, 2*n)
	for i := range c {
		if pts[i], err = DecodeElement(c[i]); err != nil {
			return fmt.Errorf("element C[%d]: %w", i, err)
		}
		if pts[n+i], err = DecodeElement(d[i]); err != nil {
			return fmt.Errorf("element D[%d]: %w", i, err)
		}
	}
	return verifyPoints(pk, c, d, pts, pc, ps)
}

// verifyPoints is Verify after decoding: pts holds the n C_i then the n
// D_i, (pc, ps) the proof.
func verifyPoints(pk []byte, c, d [][]byte, pts []*r255.Element, pc, ps *r255.Scalar) error {
	n := len(c)
	b, err := DecodeElement(pk)
	if err != nil {
		return fmt.Errorf("public key: %w", err)
	}
	ds := weights(pk, c, d)
	m := r255.NewElement().VarTimeMultiScalarMult(ds, pts[:n])
	z := r255.NewElement().VarTimeMultiScalarMult(ds, pts[n:])
	t2 := r255.NewElement().VarTimeDoubleScalarBaseMult(pc, b, ps)                                // s·G + c·B
	t3 := r255.NewElement().VarTimeMultiScalarMult([]*r255.Scalar{ps, pc}, []*r255.Element{m, z}) // s·M + c·Z
	if challenge(pk, m, z, t2, t3).Equal(pc) != 1 {
		return ErrProof
	}
	return nil
}

// Prove is RFC 9497 §2.2.1 GenerateProof(k, G, pk, C, D) with
// ComputeCompositesFast and a uniformly random nonce r read from rnd (64
// bytes, reduced mod ℓ). k is the 32-byte private scalar, pk = k·G its
// encoding; C_i are the blinded elements and D_i = k·C_i their
// evaluations, 32-byte encodings. It returns c ‖ s (ProofSize bytes).
// Errors wrap ErrBatch, ErrEncoding, or the reader's error.
func Prove(k, pk []byte, c, d [][]byte, rnd io.Reader) ([]byte, error) {
	var u [64]byte
	if _, err := io.ReadFull(rnd, u[:]); err != nil {
		return nil, fmt.Errorf("dleq: proof nonce: %w", err)
	}
	return ProveWithRandomness(k, pk, c, d, r255.NewScalar().FromUniformBytes(u[:]).Encode(nil))
}

// ProveWithRandomness is Prove with the nonce r given (32 bytes, a scalar
// below ℓ, never reused with the same k): RFC 9497's test vectors give it.
// Only M = Σ d_i·C_i is variable time (over public C_i and d_i); Z = k·M,
// t2 = r·G, t3 = r·M and s = r − c·k are constant time.
func ProveWithRandomness(k, pk []byte, c, d [][]byte, r []byte) ([]byte, error) {
	if err := checkBatch(c, d); err != nil {
		return nil, err
	}
	ks, err := decodeScalar(k)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	rs, err := decodeScalar(r)
	if err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	if len(pk) != ElementSize {
		return nil, fmt.Errorf("%w: public key of %d bytes, want %d", ErrEncoding, len(pk), ElementSize)
	}
	pts := make([]*r255.Element, len(c))
	for i := range c {
		if pts[i], err = DecodeElement(c[i]); err != nil {
			return nil, fmt.Errorf("element C[%d]: %w", i, err)
		}
		if len(d[i]) != ElementSize {
			return nil, fmt.Errorf("%w: element D[%d] of %d bytes, want %d", ErrEncoding, i, len(d[i]), ElementSize)
		}
	}
	return prove(ks, rs, pk, c, d, pts), nil
}

// prove is GenerateProof on decoded C_i (pts) and the encodings c, d.
func prove(k, r *r255.Scalar, pk []byte, c, d [][]byte, pts []*r255.Element) []byte {
	m := r255.NewElement().VarTimeMultiScalarMult(weights(pk, c, d), pts)
	z := r255.NewElement().ScalarMult(k, m)
	t2 := r255.NewElement().ScalarBaseMult(r)
	t3 := r255.NewElement().ScalarMult(r, m)
	cc := challenge(pk, m, z, t2, t3)
	s := r255.NewScalar().Multiply(cc, k)
	s.Subtract(r, s)
	return s.Encode(cc.Encode(make([]byte, 0, ProofSize)))
}

// Evaluate is RFC 9497 §3.3.2 BlindEvaluate over a batch in verifiable
// mode: D_i = k·C_i for each 32-byte blinded element C_i (constant time),
// and the batch's proof (GenerateProof, nonce from rnd). k is the 32-byte
// private scalar and pk = k·G its encoding. Errors wrap ErrBatch,
// ErrEncoding (an undecodable or identity C_i, naming its index) or the
// reader's error.
func Evaluate(k, pk []byte, c [][]byte, rnd io.Reader) (d [][]byte, proof []byte, err error) {
	if err := checkBatch(c, c); err != nil {
		return nil, nil, err
	}
	ks, err := decodeScalar(k)
	if err != nil {
		return nil, nil, fmt.Errorf("private key: %w", err)
	}
	if len(pk) != ElementSize {
		return nil, nil, fmt.Errorf("%w: public key of %d bytes, want %d", ErrEncoding, len(pk), ElementSize)
	}
	var u [64]byte
	if _, err := io.ReadFull(rnd, u[:]); err != nil {
		return nil, nil, fmt.Errorf("dleq: proof nonce: %w", err)
	}
	rs := r255.NewScalar().FromUniformBytes(u[:])
	pts := make([]*r255.Element, len(c))
	d = make([][]byte, len(c))
	buf := make([]byte, 0, ElementSize*len(c))
	for i := range c {
		if pts[i], err = DecodeElement(c[i]); err != nil {
			return nil, nil, &ElementError{Index: i, Err: err}
		}
		off := len(buf)
		buf = r255.NewElement().ScalarMult(ks, pts[i]).Encode(buf)
		d[i] = buf[off:len(buf):len(buf)]
	}
	return d, prove(ks, rs, pk, c, d, pts), nil
}

// ElementError is Evaluate's error for the blinded element at Index.
type ElementError struct {
	Index int
	Err   error // wraps ErrEncoding
}

func (e *ElementError) Error() string { return fmt.Sprintf("element %d: %v", e.Index, e.Err) }

// Unwrap returns Err.
func (e *ElementError) Unwrap() error { return e.Err }
