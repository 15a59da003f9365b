package arc

import (
	"crypto/sha256"
	"crypto/sha3"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
	"math/bits"

	"filippo.io/bigmod"
	"filippo.io/nistec"
	"github.com/crowdlog/crowdlog/protocol"
)

// This file is the one that knows the group. Points are nistec's
// projective P-256 points; scalars are bigmod naturals mod the group
// order p (constant time). Two kinds of arithmetic:
//
//   - constant time (mul, nistec's ScalarMult / ScalarBaseMult, bigmod):
//     everything that touches a secret — the client's m1, r1, r2 and
//     presentation blinds, the issuer's key and b, every prover nonce;
//   - variable time (msmVarTime, hashToGroup's field arithmetic): only
//     public scalars and points — the verifier's recomputation of a sigma
//     commitment from the proof's responses and challenge, the bit
//     commitments' sum, and hash-to-curve of public contexts.

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

// element is a P-256 point. Operations return new points and never modify
// their arguments (the generators are shared).
type element = *nistec.P256Point

// scalar is an integer mod the group order, always reduced and sized for
// orderMod.
type scalar = *bigmod.Nat

var (
	// orderN is the group order p (the draft's name; n in SEC 1).
	orderN, _ = new(big.Int).SetString("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551", 16)
	orderMod  = mustModulus(orderN.Bytes())
	// orderMinus2 is the exponent of Fermat inversion mod p.
	orderMinus2 = new(big.Int).Sub(orderN, big.NewInt(2)).Bytes()
	// wideMod is 2^392 − 1, a modulus above every 48-byte value: wide
	// inputs are loaded under it and then reduced mod p.
	wideMod = mustModulus(append([]byte{0xff}, make49ff()...))

	genG = nistec.NewP256Point().SetGenerator()
	// genH = HashToGroup(SerializeElement(G), "generatorH").
	genH = hashToGroup(genG.BytesCompressed(), "generatorH")

	// encodings of the fixed generators (label()).
	genGEnc = genG.BytesCompressed()
	genHEnc = genH.BytesCompressed()
	// tableH holds the odd multiples H, 3H, …, (2^(hWindow−1)−1)·H for
	// msmVarTime.
	tableH = oddMultiples(genH, hWindow)
)

func make49ff() []byte {
	b := make([]byte, 48)
	for i := range b {
		b[i] = 0xff
	}
	return b
}

func mustModulus(b []byte) *bigmod.Modulus {
	m, err := bigmod.NewModulus(b)
	if err != nil {
		panic(err)
	}
	return m
}

// ---- scalars (constant time) ----

func newScalar() scalar { return bigmod.NewNat().ExpandFor(orderMod) }

func scalarFromInt(n int) scalar {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	return scalarWide(b[:])
}

// scalarWide reduces a big-endian integer of at most 48 bytes mod p.
func scalarWide(b []byte) scalar {
	w, err := bigmod.NewNat().SetBytes(b, wideMod)
	if err != nil {
		panic(err) // at most 48 bytes, below 2^392 − 1
	}
	return bigmod.NewNat().Mod(w, orderMod)
}

func scCopy(a scalar) scalar       { return newScalar().Add(a, orderMod) }
func scAdd(a, b scalar) scalar     { return scCopy(a).Add(b, orderMod) }
func scSub(a, b scalar) scalar     { return scCopy(a).Sub(b, orderMod) }
func scMul(a, b scalar) scalar     { return scCopy(a).Mul(b, orderMod) }
func scNeg(a scalar) scalar        { return newScalar().Sub(a, orderMod) }
func scIsZero(a scalar) bool       { return a.IsZero() == 1 }
func scEqual(a, b scalar) bool     { return a.Equal(b) == 1 }
func scInv(a scalar) scalar        { return newScalar().Exp(a, orderMinus2, orderMod) } // a^(p−2); 0 for 0
func encodeScalar(s scalar) []byte { return s.Bytes(orderMod) }
func hashToScalar(x []byte, info string) scalar {
	return scalarWide(expandMessageXMD(x, []byte("HashToScalar-"+contextString+info), 48))
}

// parseScalar is a 32-byte big-endian scalar below p (zero allowed).
func parseScalar(b []byte) (scalar, bool) {
	if len(b) != ScalarSize {
		return nil, false
	}
	s, err := bigmod.NewNat().SetBytes(b, orderMod)
	return s, err == nil
}

// decodeScalar is DeserializeScalar: 32 bytes big-endian in [1, p−1].
// Errors wrap protocol.ErrMalformed.
func decodeScalar(b []byte, what string) (scalar, error) {
	if len(b) != ScalarSize {
		return nil, protocol.Malformed("arc: %s of %d bytes, want %d", what, len(b), ScalarSize)
	}
	s, ok := parseScalar(b)
	if !ok {
		return nil, protocol.Malformed("arc: %s is not below the P-256 order", what)
	}
	if scIsZero(s) {
		return nil, protocol.Malformed("arc: %s is zero", what)
	}
	return s, nil
}

// ---- elements ----

func identity() element { return nistec.NewP256Point() }

func isIdentity(e element) bool { return e.IsInfinity() == 1 }

func equal(a, b element) bool { return a.Equal(b) == 1 }

func copyElement(e element) element { return nistec.NewP256Point().Set(e) }

func mustEncode(e element) []byte {
	b, err := encodeElement(e)
	if err != nil {
		panic(err)
	}
	return b
}

// encodeElement is SerializeElement: 33-byte compressed SEC1. The identity
// has no encoding (errors).
func encodeElement(e element) ([]byte, error) {
	switch {
	case e == genG:
		return genGEnc, nil
	case e == genH && genHEnc != nil:
		return genHEnc, nil
	case isIdentity(e):
		return nil, fmt.Errorf("arc: the identity element has no encoding")
	}
	return e.BytesCompressed(), nil
}

// decodeElement is DeserializeElement: exactly 33 bytes, prefix 0x02 or
// 0x03, x below the field prime and on the curve (the point at infinity has
// no 33-byte encoding). Errors wrap protocol.ErrMalformed.
func decodeElement(b []byte, what string) (element, error) {
	if len(b) != ElementSize || (b[0] != 2 && b[0] != 3) {
		return nil, protocol.Malformed("arc: %s is not a 33-byte compressed P-256 point", what)
	}
	e, err := nistec.NewP256Point().SetBytes(b)
	if err != nil {
		return nil, protocol.Malformed("arc: %s is not a point on P-256", what)
	}
	if isIdentity(e) {
		return nil, protocol.Malformed("arc: %s is the identity", what)
	}
	return e, nil
}

// mul returns s·e as a new element in constant time (the generator G
// takes nistec's fixed-base table, H its comb table, comb.go). For secret
// scalars.
func mul(e element, s scalar) element {
	k := encodeScalar(s)
	switch e {
	case genG:
		r, _ := nistec.NewP256Point().ScalarBaseMult(k)
		return r
	case genH:
		r := identity()
		combH().mulAdd(r, k)
		return r
	}
	r, _ := nistec.NewP256Point().ScalarMult(e, k)
	return r
}

// add returns a+b as a new element.
func add(a, b element) element { return nistec.NewP256Point().Add(a, b) }

// sub returns a−b as a new element.
func sub(a, b element) element {
	return nistec.NewP256Point().Add(a, nistec.NewP256Point().Negate(b))
}

// ---- variable-time multi-scalar multiplication (public inputs only) ----

const (
	// varWindow is the wNAF width for points met once: digits ±1, ±3, …,
	// ±15 over a table of 8 odd multiples.
	varWindow = 5
	// hWindow is the wNAF width for H, whose table is built once.
	hWindow = 7
)

// oddMultiples returns P, 3P, …, (2^(w−1)−1)·P.
func oddMultiples(p element, w uint) []element {
	n := 1 << (w - 2)
	t := make([]element, n)
	t[0] = copyElement(p)
	p2 := nistec.NewP256Point().Double(p)
	for i := 1; i < n; i++ {
		t[i] = nistec.NewP256Point().Add(t[i-1], p2)
	}
	return t
}

// wnaf returns the width-w non-adjacent form of the 32-byte big-endian k,
// least significant digit first. Variable time.
func wnaf(k []byte, w uint) []int8 {
	var d [5]uint64 // little-endian limbs, one spare for the carry
	for i := 0; i < 4; i++ {
		d[i] = binary.BigEndian.Uint64(k[24-8*i:])
	}
	out := make([]int8, 0, 258)
	mask := uint64(1)<<w - 1
	half := uint64(1) << (w - 1)
	for d != [5]uint64{} {
		var digit int64
		if d[0]&1 == 1 {
			m := d[0] & mask
			if m >= half {
				digit = int64(m) - int64(mask+1)
				// d += 2^w − m
				var c uint64
				d[0], c = bits.Add64(d[0], mask+1-m, 0)
				for i := 1; i < 5 && c != 0; i++ {
					d[i], c = bits.Add64(d[i], 0, c)
				}
			} else {
				digit = int64(m)
				d[0] -= m // m ≤ d[0]'s low bits: no borrow
			}
		}
		out = append(out, int8(digit))
		for i := 0; i < 4; i++ {
			d[i] = d[i]>>1 | d[i+1]<<63
		}
		d[4] >>= 1
	}
	return out
}

// msmVarTime returns Σ s_i·e_i in variable time (Straus's interleaving
// with wNAF digits: one shared chain of doublings). Only for public
// scalars and points: its running time depends on them. G takes nistec's
// fixed-base multiplication, H a table built once.
func msmVarTime(s []scalar, e []element) element {
	type term struct {
		naf   []int8
		table []element
	}
	terms := make([]term, 0, len(s))
	acc := identity()
	maxLen := 0
	for i := range s {
		k := encodeScalar(s[i])
		switch e[i] {
		case genG:
			g, _ := nistec.NewP256Point().ScalarBaseMult(k)
			acc.Add(acc, g)
			continue
		case genH:
			terms = append(terms, term{wnaf(k, hWindow), tableH})
		default:
			terms = append(terms, term{wnaf(k, varWindow), oddMultiples(e[i], varWindow)})
		}
		if l := len(terms[len(terms)-1].naf); l > maxLen {
			maxLen = l
		}
	}
	r := identity()
	neg := nistec.NewP256Point()
	started := false
	for j := maxLen - 1; j >= 0; j-- {
		if started {
			r.Double(r)
		}
		for _, t := range terms {
			if j >= len(t.naf) || t.naf[j] == 0 {
				continue
			}
			if d := t.naf[j]; d > 0 {
				r.Add(r, t.table[d/2])
			} else {
				r.Add(r, neg.Negate(t.table[(-d)/2]))
			}
			started = true
		}
	}
	return r.Add(r, acc)
}

// ---- hash-to-curve (RFC 9380, P256_XMD:SHA-256_SSWU_RO_) ----

// hashToGroup is HashToGroup(x, info): hash_to_curve with DST
// "HashToGroup-ARCV1-P256" ‖ info. Inputs are public (contexts, G).
func hashToGroup(x []byte, info string) element {
	return hashToCurve(x, []byte("HashToGroup-"+contextString+info))
}

// expandMessageXMD is expand_message_xmd with SHA-256 (RFC 9380 §5.3.1).
func expandMessageXMD(msg, dst []byte, n int) []byte {
	if len(dst) > 255 {
		h := sha256.Sum256(append([]byte("H2C-OVERSIZE-DST-"), dst...))
		dst = h[:]
	}
	ell := (n + 31) / 32
	if ell > 255 || n > 65535 {
		panic("arc: expand_message_xmd output too long")
	}
	dstPrime := append(append([]byte(nil), dst...), byte(len(dst)))
	h := sha256.New()
	h.Write(make([]byte, 64))
	h.Write(msg)
	h.Write([]byte{byte(n >> 8), byte(n), 0})
	h.Write(dstPrime)
	b0 := h.Sum(nil)
	out := make([]byte, 0, ell*32)
	prev := make([]byte, 32)
	for i := 1; i <= ell; i++ {
		var x [32]byte
		for j := range x {
			x[j] = b0[j] ^ prev[j]
		}
		if i == 1 {
			x = [32]byte(b0)
		}
		h.Reset()
		h.Write(x[:])
		h.Write([]byte{byte(i)})
		h.Write(dstPrime)
		prev = h.Sum(nil)
		out = append(out, prev...)
	}
	return out[:n]
}

// hashToCurve is hash_to_curve: two field elements from
// expand_message_xmd (L = 48 each), the simplified SWU map of each, their
// sum (P-256's cofactor is 1).
func hashToCurve(msg, dst []byte) element {
	u := expandMessageXMD(msg, dst, 96)
	u0, u1 := feFromWide(u[:48]), feFromWide(u[48:])
	q0, q1 := sswuPoint(&u0), sswuPoint(&u1)
	return q0.Add(q0, q1)
}

// sswuPoint is map_to_curve_simple_swu(u) (RFC 9380 §6.6.2) in variable
// time, for public u only: x1 = B·(tv2+1) / (A·(−tv2 or Z)) with tv1 =
// Z·u², tv2 = tv1² + tv1 (one math/big inversion), then y from nistec's
// point decompression, whose square root is its constant-time assembly:
// (x1, y) when g(x1) is a square, else (x2 = tv1·x1, y), with sgn0(y) =
// sgn0(u) picked by the compressed prefix (0x02 even y, 0x03 odd). The
// same point as sswu's straight-line form (TestHashToCurveMatchesCircl).
func sswuPoint(u *fe) element {
	var tv1, tv2, tv3, tv4 fe
	feSqr(&tv1, u)
	feMul(&tv1, &feZ, &tv1)
	feSqr(&tv2, &tv1)
	feAdd(&tv2, &tv2, &tv1)
	feAdd(&tv3, &tv2, &feOne)
	feMul(&tv3, &feB, &tv3)
	if feIsZero(&tv2) {
		tv4 = feZ
	} else {
		feNeg(&tv4, &tv2)
	}
	feMul(&tv4, &feA, &tv4)
	var b [33]byte
	feBytes(b[1:], &tv4)
	d := new(big.Int).SetBytes(b[1:])
	d.ModInverse(d, feQB)
	feBytes(b[1:], &tv3)
	x := new(big.Int).SetBytes(b[1:])
	x.Mul(x, d).Mod(x, feQB)
	b[0] = 2 | byte(feSgn0(u))
	x.FillBytes(b[1:])
	if p, err := nistec.NewP256Point().SetBytes(b[:]); err == nil {
		return p
	}
	feBytes(b[1:], &tv1)
	x.Mul(x, new(big.Int).SetBytes(b[1:])).Mod(x, feQB)
	x.FillBytes(b[1:])
	p, err := nistec.NewP256Point().SetBytes(b[:])
	if err != nil {
		panic("arc: map_to_curve left the curve") // unreachable: g(x1) or g(x2) is a square
	}
	return p
}

// hashToCurveStraight is hashToCurve over sswu's straight-line form (the
// reference for sswuPoint in tests).
func hashToCurveStraight(msg, dst []byte) element {
	u := expandMessageXMD(msg, dst, 96)
	u0, u1 := feFromWide(u[:48]), feFromWide(u[48:])
	x0, y0, d0 := sswu(&u0)
	x1, y1, d1 := sswu(&u1)
	// one inversion for both denominators
	var inv, t fe
	feMul(&t, &d0, &d1)
	feInvert(&inv, &t)
	var i0, i1 fe
	feMul(&i0, &inv, &d1)
	feMul(&i1, &inv, &d0)
	feMul(&x0, &x0, &i0)
	feMul(&x1, &x1, &i1)
	q0, q1 := affinePoint(&x0, &y0), affinePoint(&x1, &y1)
	return q0.Add(q0, q1)
}

func affinePoint(x, y *fe) element {
	b := make([]byte, 65)
	b[0] = 4
	feBytes(b[1:33], x)
	feBytes(b[33:], y)
	p, err := nistec.NewP256Point().SetBytes(b)
	if err != nil {
		panic("arc: map_to_curve left the curve") // unreachable
	}
	return p
}

// sswu is map_to_curve_simple_swu (RFC 9380 §6.6.2, the straight-line
// form of appendix F.2 with sqrt_ratio for q ≡ 3 mod 4): it returns
// (x numerator, y, x denominator); Z = −10, A = −3.
func sswu(u *fe) (x, y, xd fe) {
	var tv1, tv2, tv3, tv4, tv5, tv6 fe
	feSqr(&tv1, u)
	feMul(&tv1, &feZ, &tv1)
	feSqr(&tv2, &tv1)
	feAdd(&tv2, &tv2, &tv1)
	feAdd(&tv3, &tv2, &feOne)
	feMul(&tv3, &feB, &tv3)
	if feIsZero(&tv2) {
		tv4 = feZ
	} else {
		feNeg(&tv4, &tv2)
	}
	feMul(&tv4, &feA, &tv4)
	feSqr(&tv2, &tv3)
	feSqr(&tv6, &tv4)
	feMul(&tv5, &feA, &tv6)
	feAdd(&tv2, &tv2, &tv5)
	feMul(&tv2, &tv2, &tv3)
	feMul(&tv6, &tv6, &tv4)
	feMul(&tv5, &feB, &tv6)
	feAdd(&tv2, &tv2, &tv5)
	feMul(&x, &tv1, &tv3)
	isQR, y1 := sqrtRatio(&tv2, &tv6)
	feMul(&y, &tv1, u)
	feMul(&y, &y, &y1)
	if isQR {
		x = tv3
		y = y1
	}
	if feSgn0(u) != feSgn0(&y) {
		feNeg(&y, &y)
	}
	return x, y, tv4
}

// sqrtRatio is sqrt_ratio(u, v) for q ≡ 3 mod 4 (RFC 9380 appendix
// F.2.1.2).
func sqrtRatio(u, v *fe) (bool, fe) {
	var tv1, tv2, tv3, y1, y2 fe
	feSqr(&tv1, v)
	feMul(&tv2, u, v)
	feMul(&tv1, &tv1, &tv2)
	feExp(&y1, &tv1, &feC1)
	feMul(&y1, &y1, &tv2)
	feMul(&y2, &y1, &feC2)
	feSqr(&tv3, &y1)
	feMul(&tv3, &tv3, v)
	if *feCanonical(&tv3) == *feCanonical(u) {
		return true, y1
	}
	return false, y2
}

// ---- the P-256 base field, 4×64-bit Montgomery form (for hash-to-curve) ----

// fe is an element of GF(q), q = 2^256 − 2^224 + 2^192 + 2^96 − 1, in
// Montgomery form (x·2^256 mod q), little-endian limbs, fully reduced.
type fe [4]uint64

var (
	feQ   = fe{0xffffffffffffffff, 0x00000000ffffffff, 0, 0xffffffff00000001}
	feQB  = new(big.Int).SetBytes([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	feR2  = feFromBig(new(big.Int).Lsh(big.NewInt(1), 512), false) // R² mod q, not Montgomery
	feR3  = feFromBig(new(big.Int).Lsh(big.NewInt(1), 768), false) // R³ mod q, not Montgomery
	feOne = feFromBig(big.NewInt(1), true)
	feZ   = feFromBig(big.NewInt(-10), true)
	feA   = feFromBig(big.NewInt(-3), true)
	feB   = feFromBig(mustHex("5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604b"), true)
	// feC1 = (q − 3)/4 (an exponent, plain integer limbs); feC2 = sqrt(−Z).
	feC1 = bigLimbs(new(big.Int).Rsh(new(big.Int).Sub(feQB, big.NewInt(3)), 2))
	feC2 = feFromBig(new(big.Int).ModSqrt(big.NewInt(10), feQB), true)
	// feQm2 = q − 2 (Fermat inversion exponent).
	feQm2 = bigLimbs(new(big.Int).Sub(feQB, big.NewInt(2)))
)

func mustHex(s string) *big.Int {
	v, ok := new(big.Int).SetString(s, 16)
	if !ok {
		panic(s)
	}
	return v
}

func bigLimbs(v *big.Int) fe {
	var b [32]byte
	v.FillBytes(b[:])
	var r fe
	for i := 0; i < 4; i++ {
		r[i] = binary.BigEndian.Uint64(b[24-8*i:])
	}
	return r
}

// feFromBig reduces v mod q; mont puts it in Montgomery form (init only).
func feFromBig(v *big.Int, mont bool) fe {
	v = new(big.Int).Mod(v, feQB)
	if mont {
		v.Lsh(v, 256).Mod(v, feQB)
	}
	return bigLimbs(v)
}

// feMul sets z = x·y·2^−256 mod q (CIOS; −q^−1 mod 2^64 = 1).
func feMul(z, x, y *fe) {
	var t [6]uint64
	for i := 0; i < 4; i++ {
		var c uint64
		for j := 0; j < 4; j++ {
			hi, lo := bits.Mul64(x[j], y[i])
			var cc uint64
			lo, cc = bits.Add64(lo, t[j], 0)
			hi += cc
			lo, cc = bits.Add64(lo, c, 0)
			hi += cc
			t[j], c = lo, hi
		}
		var cc uint64
		t[4], cc = bits.Add64(t[4], c, 0)
		t[5] = cc
		m := t[0]
		hi, lo := bits.Mul64(m, feQ[0])
		_, cc = bits.Add64(lo, t[0], 0)
		c = hi + cc
		for j := 1; j < 4; j++ {
			hi, lo := bits.Mul64(m, feQ[j])
			lo, cc = bits.Add64(lo, t[j], 0)
			hi += cc
			lo, cc = bits.Add64(lo, c, 0)
			hi += cc
			t[j-1], c = lo, hi
		}
		t[3], cc = bits.Add64(t[4], c, 0)
		t[4] = t[5] + cc
	}
	// t < 2q: subtract q once if t ≥ q.
	var r fe
	var b uint64
	r[0], b = bits.Sub64(t[0], feQ[0], 0)
	r[1], b = bits.Sub64(t[1], feQ[1], b)
	r[2], b = bits.Sub64(t[2], feQ[2], b)
	r[3], b = bits.Sub64(t[3], feQ[3], b)
	_, b = bits.Sub64(t[4], 0, b)
	if b == 0 {
		*z = r
	} else {
		*z = fe{t[0], t[1], t[2], t[3]}
	}
}

func feSqr(z, x *fe) { feMul(z, x, x) }

func feAdd(z, x, y *fe) {
	var s, r fe
	var c, b uint64
	s[0], c = bits.Add64(x[0], y[0], 0)
	s[1], c = bits.Add64(x[1], y[1], c)
	s[2], c = bits.Add64(x[2], y[2], c)
	s[3], c = bits.Add64(x[3], y[3], c)
	r[0], b = bits.Sub64(s[0], feQ[0], 0)
	r[1], b = bits.Sub64(s[1], feQ[1], b)
	r[2], b = bits.Sub64(s[2], feQ[2], b)
	r[3], b = bits.Sub64(s[3], feQ[3], b)
	_, b = bits.Sub64(c, 0, b)
	if b == 0 {
		*z = r
	} else {
		*z = s
	}
}

func feNeg(z, x *fe) {
	if feIsZero(x) {
		*z = fe{}
		return
	}
	var b uint64
	z[0], b = bits.Sub64(feQ[0], x[0], 0)
	z[1], b = bits.Sub64(feQ[1], x[1], b)
	z[2], b = bits.Sub64(feQ[2], x[2], b)
	z[3], _ = bits.Sub64(feQ[3], x[3], b)
}

func feIsZero(x *fe) bool { return *x == fe{} }

// feExp sets z = x^e for a public exponent e (4-bit fixed window).
func feExp(z, x *fe, e *fe) {
	var table [16]fe
	table[0] = feOne
	table[1] = *x
	for i := 2; i < 16; i++ {
		feMul(&table[i], &table[i-1], x)
	}
	r := feOne
	for i := 3; i >= 0; i-- {
		for s := 60; s >= 0; s -= 4 {
			feSqr(&r, &r)
			feSqr(&r, &r)
			feSqr(&r, &r)
			feSqr(&r, &r)
			if w := (e[i] >> uint(s)) & 0xf; w != 0 {
				feMul(&r, &r, &table[w])
			}
		}
	}
	*z = r
}

func feInvert(z, x *fe) { feExp(z, x, &feQm2) }

// feCanonical returns x out of Montgomery form.
func feCanonical(x *fe) *fe {
	var r fe
	one := fe{1}
	feMul(&r, x, &one)
	return &r
}

func feSgn0(x *fe) uint64 { return feCanonical(x)[0] & 1 }

// feBytes writes x (out of Montgomery form) as 32 bytes big-endian.
func feBytes(b []byte, x *fe) {
	c := feCanonical(x)
	for i := 0; i < 4; i++ {
		binary.BigEndian.PutUint64(b[24-8*i:], c[i])
	}
}

// feFromWide is OS2IP(b) mod q in Montgomery form for 48-byte b:
// b = hi·2^256 + lo, so b·R = hi·R²·R·R^−1… computed as mont(hi, R³) +
// mont(lo, R²).
func feFromWide(b []byte) fe {
	var hi, lo fe
	hi[1] = binary.BigEndian.Uint64(b[0:])
	hi[0] = binary.BigEndian.Uint64(b[8:])
	for i := 0; i < 4; i++ {
		lo[i] = binary.BigEndian.Uint64(b[16+24-8*i:])
	}
	// lo < 2^256 < 2q: reduce once (feMul's inputs may be up to 2^256,
	// its output is reduced).
	var a, c fe
	feMul(&a, &hi, &feR3)
	feMul(&c, &lo, &feR2)
	feAdd(&a, &a, &c)
	return a
}

// randomness is where a protocol run draws its scalars. The draft's
// reference code draws protocol secrets with G.ScalarField.random(rng)
// (an integer mod p−1) and sigma-protocol nonces with rng.random_scalar()
// (mod p); both read 48 bytes of the generator (draft-irtf-cfrg-sigma-protocols,
// TestDRNG). Production uses readerRandomness; the vector test replays the
// draft's TestDRNG.
type randomness interface {
	// secret returns RandomScalar() of the ARC draft.
	secret() (scalar, error)
	// nonce returns a prover nonce of the sigma protocol.
	nonce() (scalar, error)
}

// readerRandomness draws 48 bytes (ceil(3·256/2/8), "Random Number
// Generation Using Extra Random Bits") and reduces them mod p, redrawing
// zero, for both kinds of scalar.
type readerRandomness struct{ r io.Reader }

func (rr readerRandomness) secret() (scalar, error) {
	for {
		var b [48]byte
		if _, err := io.ReadFull(rr.r, b[:]); err != nil {
			return nil, fmt.Errorf("arc: reading randomness: %w", err)
		}
		s := scalarWide(b[:])
		if !scIsZero(s) {
			return s, nil
		}
	}
}

func (rr readerRandomness) nonce() (scalar, error) { return rr.secret() }

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
