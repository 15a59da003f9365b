package blind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// Shamir secret sharing of pair seeds over the prime field GF(p), p = 2^61 − 1
// (Shamir 1979; Bonawitz et al. CCS 2017 §3 "SS.share"). A 16-byte seed is
// three field elements (7 + 7 + 2 bytes), each shared with its own random
// polynomial of degree t−1; a share is the three evaluations at the holder's
// x = member index + 1.

const p61 = 1<<61 - 1

// Limbs is the number of field elements per seed.
const Limbs = 3

func mulmod(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	// a·b = hi·2^64 + lo; 2^64 ≡ 2^3 (mod p), 2^61 ≡ 1
	r := (lo & p61) + (lo >> 61) + (hi << 3)
	r = (r & p61) + (r >> 61)
	if r >= p61 {
		r -= p61
	}
	return r
}

func addmod(a, b uint64) uint64 {
	r := a + b
	if r >= p61 {
		r -= p61
	}
	return r
}

func submod(a, b uint64) uint64 {
	if a >= b {
		return a - b
	}
	return a + p61 - b
}

// powmod returns a^e mod p.
func powmod(a, e uint64) uint64 {
	r := uint64(1)
	for e > 0 {
		if e&1 == 1 {
			r = mulmod(r, a)
		}
		a = mulmod(a, a)
		e >>= 1
	}
	return r
}

func invmod(a uint64) uint64 { return powmod(a, p61-2) }

func seedLimbs(s Seed) [Limbs]uint64 {
	var b [8]byte
	var l [Limbs]uint64
	copy(b[:7], s[0:7])
	l[0] = binary.LittleEndian.Uint64(b[:])
	copy(b[:7], s[7:14])
	l[1] = binary.LittleEndian.Uint64(b[:])
	b = [8]byte{}
	copy(b[:2], s[14:16])
	l[2] = binary.LittleEndian.Uint64(b[:])
	return l
}

func limbsSeed(l [Limbs]uint64) (Seed, error) {
	var s Seed
	var b [8]byte
	if l[0] >= 1<<56 || l[1] >= 1<<56 || l[2] >= 1<<16 {
		return s, errors.New("blind: recovered seed out of range (inconsistent shares)")
	}
	binary.LittleEndian.PutUint64(b[:], l[0])
	copy(s[0:7], b[:7])
	binary.LittleEndian.PutUint64(b[:], l[1])
	copy(s[7:14], b[:7])
	binary.LittleEndian.PutUint64(b[:], l[2])
	copy(s[14:16], b[:2])
	return s, nil
}

// SeedShare is one holder's share of one pair seed: the evaluations of the
// three limb polynomials at X (X = holder index + 1, never 0).
type SeedShare struct {
	X uint16
	Y [Limbs]uint64
}

// ErrThreshold is returned by CombineSeed with fewer than t distinct shares.
var ErrThreshold = errors.New("blind: fewer shares than the threshold")

// shareSeeds shares each secret (seed) among holders xs with threshold t.
// out[s][h] is the share of secret s for holder xs[h]. Coefficients come
// from rnd.
func shareSeeds(secrets []Seed, xs []uint16, t int, rnd io.Reader) ([][]SeedShare, error) {
	if t < 1 {
		return nil, fmt.Errorf("blind: threshold %d < 1", t)
	}
	coeffs := make([]uint64, len(secrets)*Limbs*(t-1))
	if len(coeffs) > 0 {
		raw := make([]byte, 8*len(coeffs))
		if _, err := io.ReadFull(rnd, raw); err != nil {
			return nil, err
		}
		for k := range coeffs {
			// 64 random bits reduced mod p: bias ≤ 2^-58, negligible
			coeffs[k] = binary.LittleEndian.Uint64(raw[8*k:]) % p61
		}
	}
	out := make([][]SeedShare, len(secrets))
	for s, sec := range secrets {
		limbs := seedLimbs(sec)
		out[s] = make([]SeedShare, len(xs))
		for h, x := range xs {
			sh := SeedShare{X: x}
			for l := 0; l < Limbs; l++ {
				c := coeffs[(s*Limbs+l)*(t-1) : (s*Limbs+l+1)*(t-1)]
				// Horner: a_0 + x(a_1 + x(a_2 + ...))
				acc := uint64(0)
				for k := len(c) - 1; k >= 0; k-- {
					acc = addmod(mulmod(acc, uint64(x)), c[k])
				}
				sh.Y[l] = addmod(mulmod(acc, uint64(x)), limbs[l])
			}
			out[s][h] = sh
		}
	}
	return out, nil
}

// CombineSeed recovers a seed from at least t shares with distinct X by
// Lagrange interpolation at 0 (only the first t distinct shares are used).
// Errors: ErrThreshold with fewer than t distinct shares; an error when the
// result is not a valid seed (shares from different secrets).
func CombineSeed(shares []SeedShare, t int) (Seed, error) {
	var use []SeedShare
	seen := map[uint16]bool{}
	for _, s := range shares {
		if s.X == 0 || seen[s.X] {
			continue
		}
		seen[s.X] = true
		use = append(use, s)
		if len(use) == t {
			break
		}
	}
	if len(use) < t || t < 1 {
		return Seed{}, fmt.Errorf("%w: %d of %d", ErrThreshold, len(use), t)
	}
	var res [Limbs]uint64
	for a, sa := range use {
		// λ_a = Π_{b≠a} x_b / (x_b − x_a)
		num, den := uint64(1), uint64(1)
		for b, sb := range use {
			if b == a {
				continue
			}
			num = mulmod(num, uint64(sb.X))
			den = mulmod(den, submod(uint64(sb.X), uint64(sa.X)))
		}
		lambda := mulmod(num, invmod(den))
		for l := 0; l < Limbs; l++ {
			res[l] = addmod(res[l], mulmod(lambda, sa.Y[l]%p61))
		}
	}
	return limbsSeed(res)
}
