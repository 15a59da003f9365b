// Package blind is Private Data Donor's blinded count vectors (Primault et
// al., WWW 2019, §3.2, after Melis et al., NDSS 2016) with crowdlog's
// double-masked dropout recovery (Bonawitz et al., CCS 2017, §4, adapted to
// clients that contact the server at most once a day).
//
// A group of n members runs one instance per (campaign, round, group). Member
// i holds a long-term X25519 key pair (x_i, y_i). For each other member j the
// pair seed s_ij = HKDF-SHA256(X25519(x_i, y_j), instance) is 16 bytes and
// symmetric (s_ij = s_ji). Member i also draws a self-mask seed b_i. Its
// blinded vector is PDD eq. (1) with a PRG in place of one hash per slot,
// plus Bonawitz's self mask:
//
//	Y_i = V_i + PRG(b_i) + Σ_{j≠i} sign(i,j) · PRG(s_ij)   (mod 2^64, element-wise)
//	sign(i,j) = +1 when i < j, −1 when i > j
//
// where PRG is AES-128-CTR keyed by the seed (zero IV), read as
// little-endian uint64s. The pair masks of a group sum to zero (PDD eq. 3).
//
// Unmasking. With its submission, member i deals (Deal) Shamir shares
// (threshold t = ⌊n/2⌋+1, over GF(2^61−1)) of b_i to every member and of
// each s_ij to every member but j, commits to every share (a Merkle root
// per holder) and seals one bundle per holder. After the deadline (or once
// all n submitted) the aggregator names the survivors S and the dropped D
// (Request). Each answering survivor reveals, for each i ∈ S, its share of
// b_i and, for each j ∈ D, its shares of s_ij (MakeAnswer) — never a share
// of b_j for j ∈ D, and never anything about a pair of two survivors. The
// aggregator verifies every share against the dealer's commitments,
// combines any t good ones (Recovery) and removes the masks from
// Σ_{i∈S} Y_i. A vector that reaches the aggregator after it was declared
// dropped keeps its self mask: b_j is never revealed, so the vector is never
// unmasked, whatever the aggregator holds. A member refuses a request with
// fewer than t survivors (Request.Check), so no sum isolates one member.
package blind

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
)

// SeedSize is the size of a pair seed s_ij in bytes (an AES-128 key).
const SeedSize = 16

// Seed is a pair seed s_ij.
type Seed [SeedSize]byte

// Instance names one run of the protocol: a campaign, a round (the day whose
// counts are aggregated, in days since 1970-01-01 UTC, PDD §3.4) and a group
// within the round.
type Instance struct {
	Campaign string
	Round    int32
	Group    uint32
}

func (in Instance) info() []byte {
	b := []byte("crowdlog-v1 pdd pair\x00")
	b = append(b, byte(len(in.Campaign)))
	b = append(b, in.Campaign...)
	b = binary.BigEndian.AppendUint32(b, uint32(in.Round))
	b = binary.BigEndian.AppendUint32(b, in.Group)
	return b
}

// String is campaign/round/group, for logs (carries nothing private).
func (in Instance) String() string { return fmt.Sprintf("%s/%d/%d", in.Campaign, in.Round, in.Group) }

// ErrBadKey is wrapped when a member public key is not a valid X25519 key.
var ErrBadKey = errors.New("blind: invalid member public key")

// GenerateKey draws a long-term X25519 key pair (PDD §3.2 Initialization).
func GenerateKey() (*ecdh.PrivateKey, error) { return ecdh.X25519().GenerateKey(nil) }

// PairSeed returns s_ij for the instance from i's private key and j's 32-byte
// public key. Errors wrap ErrBadKey for an invalid or low-order public key.
func PairSeed(priv *ecdh.PrivateKey, peer []byte, in Instance) (Seed, error) {
	pub, err := ecdh.X25519().NewPublicKey(peer)
	if err != nil {
		return Seed{}, fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	shared, err := priv.ECDH(pub)
	if err != nil {
		return Seed{}, fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	k, err := hkdf.Key(sha256.New, shared, nil, string(in.info()), SeedSize)
	if err != nil {
		return Seed{}, err
	}
	var s Seed
	copy(s[:], k)
	return s, nil
}

// Sign is sign(i, j) of PDD eq. (1): +1 when i < j, −1 when i > j.
func Sign(i, j int) int {
	if i < j {
		return 1
	}
	return -1
}

// PRG fills buf (length multiple of 8 not required; whole words only) with
// the AES-128-CTR keystream of seed and returns it as L uint64s in out.
type PRG struct {
	buf []byte
}

// AddMask adds sign·PRG(seed) to v element-wise mod 2^64 (sign ±1). It is the
// inner step of Blind and of the server's recovery correction.
func (p *PRG) AddMask(v []uint64, seed Seed, sign int) {
	n := len(v) * 8
	if cap(p.buf) < n {
		p.buf = make([]byte, n)
	}
	buf := p.buf[:n]
	clear(buf)
	blk, _ := aes.NewCipher(seed[:]) // 16-byte key: cannot fail
	var iv [aes.BlockSize]byte
	cipher.NewCTR(blk, iv[:]).XORKeyStream(buf, buf)
	if sign > 0 {
		for k := range v {
			v[k] += binary.LittleEndian.Uint64(buf[8*k:])
		}
	} else {
		for k := range v {
			v[k] -= binary.LittleEndian.Uint64(buf[8*k:])
		}
	}
}

// Seeds returns member self's pair seeds with every other member of the
// group, indexed by member (seeds[self] is unused). members are the group's
// long-term public keys in roster order.
func Seeds(priv *ecdh.PrivateKey, self int, members [][]byte, in Instance) ([]Seed, error) {
	if self < 0 || self >= len(members) {
		return nil, fmt.Errorf("blind: member index %d outside a group of %d", self, len(members))
	}
	seeds := make([]Seed, len(members))
	for j, pk := range members {
		if j == self {
			continue
		}
		s, err := PairSeed(priv, pk, in)
		if err != nil {
			return nil, fmt.Errorf("member %d: %w", j, err)
		}
		seeds[j] = s
	}
	return seeds, nil
}

// Blind returns Y = V + PRG(selfSeed) + K_self (PDD eq. 1 with Bonawitz's
// self mask, mod 2^64) as a new vector of len(v). seeds come from Seeds.
// O(n·L) AES blocks.
func Blind(v []uint64, self int, seeds []Seed, selfSeed Seed) []uint64 {
	y := append([]uint64(nil), v...)
	var p PRG
	p.AddMask(y, selfSeed, 1)
	for j := range seeds {
		if j == self {
			continue
		}
		p.AddMask(y, seeds[j], Sign(self, j))
	}
	return y
}

// DealSecret derives, from a client's 32-byte secret, its self-mask seed
// b for an instance and the deterministic randomness its Deal uses
// (HKDF-SHA256, then a ChaCha8 stream): a client that retries a deposit
// after a crash deals byte-identical bundles and commitments, so the
// aggregator's commitments always match the coordinator's bundles.
func DealSecret(secret []byte, in Instance) (Seed, io.Reader, error) {
	k, err := hkdf.Key(sha256.New, secret, nil, "crowdlog-v2 pdd deal\x00"+string(in.info()), SeedSize+32)
	if err != nil {
		return Seed{}, nil, err
	}
	var b Seed
	copy(b[:], k)
	var s [32]byte
	copy(s[:], k[SeedSize:])
	return b, mrand.NewChaCha8(s), nil
}

// Sum adds src into dst element-wise mod 2^64 (the server's eq. 2).
// len(src) must equal len(dst).
func Sum(dst, src []uint64) {
	src = src[:len(dst)]
	for k := range dst {
		dst[k] += src[k]
	}
}
