package arc

import (
	"crypto/sha3"
	"fmt"
	"io"
	"math/big"

	"github.com/cloudflare/circl/group"
	"github.com/crowdlog/crowdlog/protocol"
)

// Suite ARCV1-P256 (draft-ietf-privacypass-arc-crypto, "Ciphersuites"):
// P-256 with compressed SEC1 elements (Ne = 33) and big-endian scalars
// (Ns = 32); HashToGroup is P256_XMD:SHA-256_SSWU_RO_ with DST
// "HashToGroup-ARCV1-P256" ‖ info, HashToScalar is hash_to_field with
// expand_message_xmd(SHA-256), L = 48, DST "HashToScalar-ARCV1-P256" ‖ info.
const (
	contextString = "ARCV1-P256"
	// ElementSize is Ne, the size of an encoded P-256 element.
	ElementSize = 33
	// ScalarSize is Ns, the size of an encoded P-256 scalar.
	ScalarSize = 32
)

// g is the ARC group, P-256 with hash-to-curve (RFC 9380).
var g = group.P256

var (
	genG = g.Generator()
	// genH = HashToGroup(SerializeElement(G), "generatorH").
	genH = hashToGroup(mustEncode(g.Generator()), "generatorH")
	// orderN is the group order p.
	orderN, _ = new(big.Int).SetString("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551", 16)
)

func hashToGroup(x []byte, info string) group.Element {
	return g.HashToElement(x, []byte("HashToGroup-"+contextString+info))
}

func hashToScalar(x []byte, info string) group.Scalar {
	return g.HashToScalar(x, []byte("HashToScalar-"+contextString+info))
}

func mustEncode(e group.Element) []byte {
	b, err := encodeElement(e)
	if err != nil {
		panic(err)
	}
	return b
}

// encodeElement is SerializeElement: 33-byte compressed SEC1. The identity
// has no encoding (errors).
func encodeElement(e group.Element) ([]byte, error) {
	if e.IsIdentity() {
		return nil, fmt.Errorf("arc: the identity element has no encoding")
	}
	return g.NewElement().Set(e).MarshalBinaryCompress() // a copy: circl normalizes an element's coordinates when encoding it, and the generators are shared
}

// decodeElement is DeserializeElement: exactly 33 bytes, prefix 0x02 or
// 0x03, x below the field prime and on the curve (the point at infinity has
// no 33-byte encoding). Errors wrap protocol.ErrMalformed.
func decodeElement(b []byte, what string) (group.Element, error) {
	if len(b) != ElementSize || (b[0] != 2 && b[0] != 3) {
		return nil, protocol.Malformed("arc: %s is not a 33-byte compressed P-256 point", what)
	}
	e := g.NewElement()
	if err := e.UnmarshalBinary(b); err != nil {
		return nil, protocol.Malformed("arc: %s is not a point on P-256", what)
	}
	if e.IsIdentity() {
		return nil, protocol.Malformed("arc: %s is the identity", what)
	}
	return e, nil
}

func encodeScalar(s group.Scalar) []byte {
	b, err := s.MarshalBinary()
	if err != nil {
		panic(err)
	}
	return b
}

// decodeScalar is DeserializeScalar: 32 bytes big-endian in [1, p−1].
// Errors wrap protocol.ErrMalformed.
func decodeScalar(b []byte, what string) (group.Scalar, error) {
	if len(b) != ScalarSize {
		return nil, protocol.Malformed("arc: %s of %d bytes, want %d", what, len(b), ScalarSize)
	}
	s := g.NewScalar()
	if err := s.UnmarshalBinary(b); err != nil {
		return nil, protocol.Malformed("arc: %s is not below the P-256 order", what)
	}
	if s.IsZero() {
		return nil, protocol.Malformed("arc: %s is zero", what)
	}
	return s, nil
}

func scalarFromInt(n int) group.Scalar {
	return g.NewScalar().SetUint64(uint64(n))
}

// mul returns s·e as a new element; the generator G takes circl's
// fixed-base path (several times faster than a variable-base
// multiplication).
func mul(e group.Element, s group.Scalar) group.Element {
	if e == genG {
		return g.NewElement().MulGen(s)
	}
	return g.NewElement().Mul(e, s)
}

// add returns a+b as a new element.
func add(a, b group.Element) group.Element { return g.NewElement().Add(a, b) }

// sub returns a−b as a new element.
func sub(a, b group.Element) group.Element {
	return g.NewElement().Add(a, g.NewElement().Neg(b))
}

// msm returns Σ s_i·e_i.
func msm(s []group.Scalar, e []group.Element) group.Element {
	acc := g.Identity()
	for i := range s {
		acc = add(acc, mul(e[i], s[i]))
	}
	return acc
}

// randomness is where a protocol run draws its scalars. The draft's
// reference code draws protocol secrets with G.ScalarField.random(rng)
// (an integer mod p−1) and sigma-protocol nonces with rng.random_scalar()
// (mod p); both read 48 bytes of the generator (draft-irtf-cfrg-sigma-protocols,
// TestDRNG). Production uses readerRandomness; the vector test replays the
// draft's TestDRNG.
type randomness interface {
	// secret returns RandomScalar() of the ARC draft.
	secret() (group.Scalar, error)
	// nonce returns a prover nonce of the sigma protocol.
	nonce() (group.Scalar, error)
}

// readerRandomness draws 48 bytes (ceil(3·256/2/8), "Random Number
// Generation Using Extra Random Bits") and reduces them mod p, redrawing
// zero, for both kinds of scalar.
type readerRandomness struct{ r io.Reader }

func (rr readerRandomness) secret() (group.Scalar, error) {
	for {
		var b [48]byte
		if _, err := io.ReadFull(rr.r, b[:]); err != nil {
			return nil, fmt.Errorf("arc: reading randomness: %w", err)
		}
		s := g.NewScalar().SetBigInt(new(big.Int).SetBytes(b[:]))
		if !s.IsZero() {
			return s, nil
		}
	}
}

func (rr readerRandomness) nonce() (group.Scalar, error) { return rr.secret() }

// shake128 is the SHAKE128 duplex sponge of draft-irtf-cfrg-sigma-protocols
// (poc "SHAKE128"): the first 168-byte block is iv ‖ zeros, absorb appends,
// squeeze returns the first n output bytes of SHAKE128 over everything
// absorbed so far and leaves the state unchanged.
type shake128 struct{ buf []byte }

func newShake128(iv string) *shake128 {
	s := &shake128{buf: make([]byte, 168, 256)}
	copy(s.buf, iv)
	return s
}

func (s *shake128) absorb(b ...[]byte) {
	for _, x := range b {
		s.buf = append(s.buf, x...)
	}
}

func (s *shake128) squeeze(n int) []byte { return sha3.SumSHAKE128(s.buf, n) }
