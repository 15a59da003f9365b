package dleq

import (
	"crypto"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/cloudflare/circl/expander"
	r255 "github.com/gtank/ristretto255"
)

// The VOPRF client's side of RFC 9497 §3.3.2 (Blind, and Finalize after
// the proof check) for ristretto255-SHA512 on github.com/gtank/ristretto255.
// Everything here touches the secret blinds and is constant time:
// ScalarMult (signed radix-16 with constant-time table lookups), scalar
// multiplication and inversion, and Montgomery's batch inversion (a fixed
// sequence of multiplications whatever the blinds are). Outputs are byte
// for byte those of circl's oprf client (TestClientMatchesCircl, and RFC
// 9497's vectors in protocol/oprf).

var h2gDST = []byte("HashToGroup-" + contextString)

// hashToGroup is the suite's HashToGroup (RFC 9497 §4.1): hash_to_ristretto255
// (RFC 9380 Appendix B) with expand_message_xmd(SHA-512), 64 bytes, DST
// "HashToGroup-" ‖ contextString.
func hashToGroup(input []byte) *r255.Element {
	u := expander.NewExpanderMD(crypto.SHA512, h2gDST).Expand(input, 64)
	return r255.NewElement().FromUniformBytes(u)
}

// Blinds is a client's secret state for one batch between Blind and
// Finalize: the inputs and their blinds.
type Blinds struct {
	inputs [][]byte
	r      []*r255.Scalar
	c      [][]byte        // the blinded elements' encodings
	cPts   []*r255.Element // and the points
}

// Len is the number of inputs.
func (b *Blinds) Len() int { return len(b.inputs) }

// Blind is RFC 9497 §3.3.2 Blind over a batch: for each input a blind r
// (64 bytes of rnd reduced mod ℓ, drawn again when zero), P =
// HashToGroup(input) and the blinded element r·P, 32 bytes each. With
// blinds given (32-byte little-endian scalars, test vectors) rnd is not
// read. Errors wrap ErrBatch (no input, or more than 65535), ErrEncoding
// (a given blind that is not a canonical non-zero scalar; an input that
// hashes to the identity, which RFC 9497 calls InvalidInputError) or
// rnd's error.
func Blind(inputs [][]byte, blinds [][]byte, rnd io.Reader) (*Blinds, [][]byte, error) {
	if len(inputs) == 0 || len(inputs) > 0xffff || (blinds != nil && len(blinds) != len(inputs)) {
		return nil, nil, fmt.Errorf("%w: %d inputs, %d blinds", ErrBatch, len(inputs), len(blinds))
	}
	b := &Blinds{inputs: make([][]byte, len(inputs)), r: make([]*r255.Scalar, len(inputs)), cPts: make([]*r255.Element, len(inputs))}
	out := make([][]byte, len(inputs))
	buf := make([]byte, 0, ElementSize*len(inputs))
	zero := r255.NewScalar()
	for i, in := range inputs {
		b.inputs[i] = append([]byte(nil), in...)
		if blinds != nil {
			s, err := decodeScalar(blinds[i])
			if err != nil {
				return nil, nil, fmt.Errorf("blind %d: %w", i, err)
			}
			if s.Equal(zero) == 1 {
				return nil, nil, fmt.Errorf("%w: blind %d is zero", ErrEncoding, i)
			}
			b.r[i] = s
		} else {
			for {
				var u [64]byte
				if _, err := io.ReadFull(rnd, u[:]); err != nil {
					return nil, nil, fmt.Errorf("dleq: blind: %w", err)
				}
				if s := r255.NewScalar().FromUniformBytes(u[:]); s.Equal(zero) == 0 {
					b.r[i] = s
					break
				}
			}
		}
		p := hashToGroup(in)
		if p.Equal(identity) == 1 {
			return nil, nil, fmt.Errorf("%w: input %d hashes to the identity", ErrEncoding, i)
		}
		off := len(buf)
		b.cPts[i] = r255.NewElement().ScalarMult(b.r[i], p)
		buf = b.cPts[i].Encode(buf)
		out[i] = buf[off:len(buf):len(buf)]
	}
	b.c = out
	return b, out, nil
}

// VerifyFinalize is RFC 9497 §3.3.2 Finalize: it checks the batch's proof
// that the evaluated elements d (32 bytes each, one per input) are k·C_i
// for the k of pk (VerifyProof as Verify, variable time over those public
// values, with the blinded elements already decoded), then unblinds:
// N_i = r_i⁻¹·D_i and output_i = SHA-512(I2OSP(len(input_i), 2) ‖ input_i
// ‖ I2OSP(32, 2) ‖ N_i ‖ "Finalize"), 64 bytes. The n inverses cost one
// inversion and 3(n−1) multiplications (Montgomery's trick); the
// unblinding is constant time in the blinds. Errors wrap ErrBatch (not
// one element per input), ErrEncoding (an undecodable or identity
// element, a non-canonical proof scalar) or ErrProof; no output then.
func (b *Blinds) VerifyFinalize(pk []byte, d [][]byte, proof []byte) ([][]byte, error) {
	if err := checkBatch(b.c, d); err != nil {
		return nil, err
	}
	if len(proof) != ProofSize {
		return nil, fmt.Errorf("%w: proof of %d bytes, want %d", ErrEncoding, len(proof), ProofSize)
	}
	pc, err := decodeScalar(proof[:ScalarSize])
	if err != nil {
		return nil, err
	}
	ps, err := decodeScalar(proof[ScalarSize:])
	if err != nil {
		return nil, err
	}
	n := len(d)
	pts := make([]*r255.Element, 2*n)
	copy(pts, b.cPts)
	for i := range d {
		if pts[n+i], err = DecodeElement(d[i]); err != nil {
			return nil, fmt.Errorf("element D[%d]: %w", i, err)
		}
	}
	if err := verifyPoints(pk, b.c, d, pts, pc, ps); err != nil {
		return nil, err
	}
	return b.unblind(pts[n:]), nil
}

// finalizeUnverified is Finalize's unblinding without the proof check, for
// tests against outputs whose proof they check elsewhere.
func (b *Blinds) finalizeUnverified(d [][]byte) ([][]byte, error) {
	if err := checkBatch(b.c, d); err != nil {
		return nil, err
	}
	pts := make([]*r255.Element, len(d))
	for i := range d {
		e, err := DecodeElement(d[i])
		if err != nil {
			return nil, &ElementError{Index: i, Err: err}
		}
		pts[i] = e
	}
	return b.unblind(pts), nil
}

// unblind returns output_i for the evaluated points z (constant time in
// the blinds).
func (b *Blinds) unblind(z []*r255.Element) [][]byte {
	n := len(b.r)
	// prefix[i] = r_0·…·r_(i−1); then inv = (r_0·…·r_(n−1))⁻¹ walked back.
	prefix := make([]*r255.Scalar, n)
	acc := r255.NewScalar().FromUniformBytes(one64[:])
	zero := r255.NewScalar()
	for i := 0; i < n; i++ {
		prefix[i] = r255.NewScalar().Add(acc, zero)
		acc.Multiply(acc, b.r[i])
	}
	inv := r255.NewScalar().Invert(acc)
	out := make([][]byte, n)
	h := sha512.New()
	var nb [ElementSize]byte
	var l [2]byte
	for i := n - 1; i >= 0; i-- {
		ri := r255.NewScalar().Multiply(inv, prefix[i])
		inv.Multiply(inv, b.r[i])
		r255.NewElement().ScalarMult(ri, z[i]).Encode(nb[:0])
		h.Reset()
		binary.BigEndian.PutUint16(l[:], uint16(len(b.inputs[i])))
		h.Write(l[:])
		h.Write(b.inputs[i])
		binary.BigEndian.PutUint16(l[:], ElementSize)
		h.Write(l[:])
		h.Write(nb[:])
		h.Write([]byte("Finalize"))
		out[i] = h.Sum(nil)
	}
	return out
}

// one64 is the 64-byte little-endian encoding of 1 (FromUniformBytes
// reduces it to the scalar 1).
var one64 = [64]byte{1}

// FullEvaluate is RFC 9497 §3.3.2 (verifiable mode) evaluation without
// blinding, as a token verifier computes an authenticator:
// SHA-512(I2OSP(len(input), 2) ‖ input ‖ I2OSP(32, 2) ‖ k·HashToGroup(input)
// ‖ "Finalize"), 64 bytes, for the 32-byte private scalar k. Constant
// time in k. Errors wrap ErrEncoding (k not a canonical scalar; an input
// that hashes to the identity).
func FullEvaluate(k, input []byte) ([]byte, error) {
	ks, err := decodeScalar(k)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	p := hashToGroup(input)
	if p.Equal(identity) == 1 {
		return nil, fmt.Errorf("%w: input hashes to the identity", ErrEncoding)
	}
	var nb [ElementSize]byte
	r255.NewElement().ScalarMult(ks, p).Encode(nb[:0])
	h := sha512.New()
	var l [2]byte
	binary.BigEndian.PutUint16(l[:], uint16(len(input)))
	h.Write(l[:])
	h.Write(input)
	binary.BigEndian.PutUint16(l[:], ElementSize)
	h.Write(l[:])
	h.Write(nb[:])
	h.Write([]byte("Finalize"))
	return h.Sum(nil), nil
}
