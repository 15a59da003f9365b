package vss

import (
	r255 "github.com/bwesterb/go-ristretto"
	"github.com/bwesterb/go-ristretto/edwards25519"
)

// Variable-time multi-scalar multiplication Σ s_j·P_j on ristretto255 for
// the Feldman checks (feldman.go). circl's group API only has one
// constant-time multiplication at a time (~100 µs each here), so k of them
// cost k times that; Straus's interleaving (Straus, "Addition chains of
// vectors", Amer. Math. Monthly 1964; "simultaneous multiple
// exponentiation" in the Handbook of Applied Cryptography, ch. 14) shares
// the ~253 doublings among all k points, and width-5 NAF digits add one
// table point (odd multiples 1–15) per ~6 bits of each scalar, so a 128-bit
// scalar costs ~22 additions and a full one ~43. The arithmetic is the
// edwards25519 backend of github.com/bwesterb/go-ristretto, the same code
// circl's ristretto255 runs on (circl wraps it without exposing points), so
// encodings and equality are RFC 9496 ristretto255's.
//
// Variable time: use it only for scalars that may leak through timing
// without harm. In the Feldman checks they are powers of share
// x-coordinates (held in the clear by the process anyway) and one-time
// random weights (worthless once their check is done; they are drawn after
// the shares are fixed). The secret-dependent sides, (Σ r_i·y_i)·G and
// (Σ ρ_j·a_j)·G, stay on the constant-time fixed-base multiplication.

// nafTable holds the odd multiples P, 3P, …, 15P of one point (extended
// coordinates), the table width-5 NAF digits index.
type nafTable [8]edwards25519.ExtendedPoint

func newNAFTable(p *r255.Point) *nafTable {
	var t nafTable
	var dbl edwards25519.ExtendedPoint
	e := (*edwards25519.ExtendedPoint)(p)
	dbl.Double(e)
	t[0].Set(e)
	for i := 1; i < len(t); i++ {
		t[i].Add(&t[i-1], &dbl)
	}
	return &t
}

// naf5 writes the width-5 non-adjacent form of the little-endian scalar s
// (reduced, so below 2^253) into naf: digits odd in [−15, 15], at least
// four zeros after each non-zero digit. Returns the index of the highest
// non-zero digit, −1 for s = 0.
func naf5(s *[32]byte, naf *[256]int8) int {
	var x [5]uint64
	for i := 0; i < 4; i++ {
		for j := 0; j < 8; j++ {
			x[i] |= uint64(s[8*i+j]) << (8 * j)
		}
	}
	top := -1
	carry := uint64(0)
	for pos := uint(0); pos < 256; {
		idx, bit := pos/64, pos%64
		buf := x[idx] >> bit
		if bit > 59 {
			buf |= x[idx+1] << (64 - bit)
		}
		w := carry + buf&31
		if w&1 == 0 {
			pos++
			continue
		}
		if w < 16 {
			carry, naf[pos] = 0, int8(w)
		} else {
			carry, naf[pos] = 1, int8(w)-32
		}
		top = int(pos)
		pos += 5
	}
	return top
}

// multiScalarMult returns Σ scalars[j]·P_j where tables[j] is P_j's
// nafTable; len(scalars) == len(tables). Variable time in the scalars.
func multiScalarMult(tables []*nafTable, scalars []r255.Scalar) r255.Point {
	nafs := make([][256]int8, len(scalars))
	top := -1
	for j := range scalars {
		var b [32]byte
		scalars[j].BytesInto(&b)
		top = max(top, naf5(&b, &nafs[j]))
	}
	var acc edwards25519.ExtendedPoint
	if top < 0 {
		acc.SetZero()
		return r255.Point(acc)
	}
	var pp edwards25519.ProjectivePoint
	var cp edwards25519.CompletedPoint
	pp.SetZero()
	for bit := top; bit >= 0; bit-- {
		cp.DoubleProjective(&pp)
		for j := range nafs {
			d := nafs[j][bit]
			if d == 0 {
				continue
			}
			acc.SetCompleted(&cp)
			if d > 0 {
				cp.AddExtended(&acc, &tables[j][d/2])
			} else {
				cp.SubExtended(&acc, &tables[j][-d/2])
			}
		}
		if bit > 0 {
			pp.SetCompleted(&cp)
		}
	}
	acc.SetCompleted(&cp)
	return r255.Point(acc)
}
