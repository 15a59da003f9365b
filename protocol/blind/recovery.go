package blind

import (
	"crypto/ecdh"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cloudflare/circl/hpke"
)

// MinGroup is the smallest group a coordinator forms: a group of one would
// publish that member's vector.
const MinGroup = 2

// Threshold is the recovery threshold t for a group of n members:
// ⌊n/2⌋ + 1, at least 2. Fewer than t holders learn nothing of a seed, and a
// recovery needs at least t survivors, so it never isolates one member
// (Bonawitz et al. CCS 2017 §4 use t > n/2 against a majority of honest
// members).
func Threshold(n int) int { return max(n/2+1, MinGroup) }

// NonceSize is the size of the random nonce that hides each share inside its
// commitment leaf.
const NonceSize = 16

// BundleShare is one share a holder receives from dealer From: of the
// dealer's self-mask seed b_From when J == From, else of the pair seed
// s_{From,J}. Nonce blinds the share's commitment leaf.
type BundleShare struct {
	J     uint16
	Share SeedShare
	Nonce [NonceSize]byte
}

// Bundle is what holder To receives from dealer From: first its share of
// b_From, then a share of s_{From,j} for every member j ∉ {From, To}, j
// ascending. The dealer is a holder of its own shares (From == To is a
// valid bundle without the pair share of the holder itself).
type Bundle struct {
	From, To uint16
	Shares   []BundleShare
}

// SealedBundle is a Bundle encrypted to holder To's long-term key (HPKE
// RFC 9180 Base mode, X25519/HKDF-SHA256/ChaCha20-Poly1305; info = the
// instance, aad = from ‖ to). The coordinator stores it without being able
// to read it.
type SealedBundle struct {
	From, To   uint16
	Ciphertext []byte
}

// Commitments is dealer Member's public commitment to every share it dealt:
// Roots[h] is the Merkle root (SHA-256) over the leaves of holder h's
// bundle, in bundle order. The coordinator forwards it to the aggregator on
// Kafka "vectors" before the dealer's submission can arrive, so the
// aggregator verifies each revealed share on its own (robust recovery: a
// corrupted share is skipped and its holder named).
type Commitments struct {
	Instance Instance
	Member   uint16
	Roots    [][32]byte
}

// Dealing is what a member deposits for one instance: one sealed bundle per
// holder (itself included, n in all) and the commitments.
type Dealing struct {
	Bundles []SealedBundle
	Commit  Commitments
}

var bundleSuite = hpke.NewSuite(hpke.KEM_X25519_HKDF_SHA256, hpke.KDF_HKDF_SHA256, hpke.AEAD_ChaCha20Poly1305)

var bundleKEM = hpke.KEM_X25519_HKDF_SHA256.Scheme()

func bundleInfo(in Instance) []byte {
	return append([]byte("crowdlog-v2 pdd bundle\x00"), in.info()...)
}

func bundleAAD(from, to uint16) []byte {
	return []byte{byte(from >> 8), byte(from), byte(to >> 8), byte(to)}
}

// leaf is the commitment leaf of one share: SHA-256 over a domain, the
// instance, dealer, holder, J, the share and its nonce.
func leaf(in Instance, from, to uint16, s *BundleShare) [32]byte {
	h := sha256.New()
	h.Write([]byte("crowdlog-v2 pdd leaf\x00"))
	h.Write(in.info())
	var b [8]byte
	binary.BigEndian.PutUint16(b[0:], from)
	binary.BigEndian.PutUint16(b[2:], to)
	binary.BigEndian.PutUint16(b[4:], s.J)
	binary.BigEndian.PutUint16(b[6:], s.Share.X)
	h.Write(b[:])
	for _, y := range s.Share.Y {
		h.Write(binary.BigEndian.AppendUint64(nil, y))
	}
	h.Write(s.Nonce[:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func node(l, r [32]byte) [32]byte {
	h := sha256.New()
	h.Write([]byte{1})
	h.Write(l[:])
	h.Write(r[:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// merkle returns the tree's levels (leaves padded with zero hashes to a
// power of two); levels[len-1][0] is the root.
func merkle(leaves [][32]byte) [][][32]byte {
	n := 1
	for n < len(leaves) {
		n *= 2
	}
	lv := make([][32]byte, n)
	copy(lv, leaves)
	levels := [][][32]byte{lv}
	for len(lv) > 1 {
		up := make([][32]byte, len(lv)/2)
		for k := range up {
			up[k] = node(lv[2*k], lv[2*k+1])
		}
		levels = append(levels, up)
		lv = up
	}
	return levels
}

func proof(levels [][][32]byte, idx int) [][32]byte {
	var p [][32]byte
	for _, lv := range levels[:len(levels)-1] {
		p = append(p, lv[idx^1])
		idx /= 2
	}
	return p
}

func verifyProof(root, lf [32]byte, idx int, p [][32]byte) bool {
	h := lf
	for _, s := range p {
		if idx&1 == 0 {
			h = node(h, s)
		} else {
			h = node(s, h)
		}
		idx /= 2
	}
	return idx == 0 && h == root
}

// Deal is member self's deposit for an instance (Bonawitz et al. CCS 2017
// §4, double masking): it shares its self-mask seed selfSeed and each of
// its pair seeds (from Seeds) with threshold t among the group's members —
// b_self among all n, s_{self,j} among all but j — commits to every share
// (Commitments) and seals one bundle per holder to its long-term key
// members[h]. rnd supplies every random choice (polynomial coefficients,
// nonces, HPKE encapsulation): a deterministic rnd keyed by a client secret
// makes a retried deposit byte-identical. Cost: about n²·3·t field
// multiplications plus n HPKE seals; the deposit is about n²·46 bytes.
func Deal(in Instance, self int, seeds []Seed, selfSeed Seed, members [][]byte, t int, rnd io.Reader) (*Dealing, error) {
	n := len(members)
	if len(seeds) != n || self < 0 || self >= n {
		return nil, fmt.Errorf("blind: deal for member %d with %d seeds in a group of %d", self, len(seeds), n)
	}
	xs := make([]uint16, n)
	for h := range xs {
		xs[h] = uint16(h + 1)
	}
	// secret 0 is b_self; secret 1+j is s_{self,j} (unused for j == self)
	secrets := make([]Seed, n+1)
	secrets[0] = selfSeed
	copy(secrets[1:], seeds)
	shares, err := shareSeeds(secrets, xs, t, rnd)
	if err != nil {
		return nil, err
	}
	d := &Dealing{Commit: Commitments{Instance: in, Member: uint16(self), Roots: make([][32]byte, n)}}
	for h := 0; h < n; h++ {
		b := Bundle{From: uint16(self), To: uint16(h)}
		add := func(j uint16, sh SeedShare) error {
			bs := BundleShare{J: j, Share: sh}
			if _, err := io.ReadFull(rnd, bs.Nonce[:]); err != nil {
				return err
			}
			b.Shares = append(b.Shares, bs)
			return nil
		}
		if err := add(uint16(self), shares[0][h]); err != nil {
			return nil, err
		}
		for j := 0; j < n; j++ {
			if j == self || j == h {
				continue
			}
			if err := add(uint16(j), shares[1+j][h]); err != nil {
				return nil, err
			}
		}
		leaves := make([][32]byte, len(b.Shares))
		for k := range b.Shares {
			leaves[k] = leaf(in, b.From, b.To, &b.Shares[k])
		}
		lv := merkle(leaves)
		d.Commit.Roots[h] = lv[len(lv)-1][0]
		pk, err := bundleKEM.UnmarshalBinaryPublicKey(members[h])
		if err != nil {
			return nil, fmt.Errorf("%w: member %d: %v", ErrBadKey, h, err)
		}
		snd, err := bundleSuite.NewSender(pk, bundleInfo(in))
		if err != nil {
			return nil, err
		}
		enc, sealer, err := snd.Setup(rnd)
		if err != nil {
			return nil, err
		}
		ct, err := sealer.Seal(b.marshal(), bundleAAD(b.From, b.To))
		if err != nil {
			return nil, err
		}
		d.Bundles = append(d.Bundles, SealedBundle{From: b.From, To: b.To, Ciphertext: append(enc, ct...)})
	}
	return d, nil
}

// OpenBundle decrypts a bundle addressed to priv's holder. Errors wrap
// ErrMalformed when it does not open or parse, or is not addressed to to.
func OpenBundle(priv *ecdh.PrivateKey, in Instance, to uint16, sb SealedBundle) (*Bundle, error) {
	if sb.To != to {
		return nil, malformed("bundle for member %d opened by member %d", sb.To, to)
	}
	if len(sb.Ciphertext) < 32 {
		return nil, malformed("bundle ciphertext of %d bytes", len(sb.Ciphertext))
	}
	sk, err := bundleKEM.UnmarshalBinaryPrivateKey(priv.Bytes())
	if err != nil {
		return nil, err
	}
	rcv, err := bundleSuite.NewReceiver(sk, bundleInfo(in))
	if err != nil {
		return nil, err
	}
	op, err := rcv.Setup(sb.Ciphertext[:32])
	if err != nil {
		return nil, malformed("bundle key: %v", err)
	}
	pt, err := op.Open(sb.Ciphertext[32:], bundleAAD(sb.From, sb.To))
	if err != nil {
		return nil, malformed("bundle from %d does not open: %v", sb.From, err)
	}
	b, err := parseBundle(pt)
	if err != nil {
		return nil, err
	}
	if b.From != sb.From || b.To != sb.To {
		return nil, malformed("bundle header %d→%d inside %d→%d", b.From, b.To, sb.From, sb.To)
	}
	return b, nil
}

// Request is the aggregator's unmasking request for one instance: the group
// size N, threshold T and the members that never submitted (Dropped,
// sorted, distinct, possibly empty). Survivors are all others. Holders
// reveal, for each survivor i, their share of i's self-mask seed b_i and,
// for each dropped j, their shares of s_ij — never a share of a dropped
// member's self-mask seed, so a vector that arrives late stays masked.
type Request struct {
	Instance Instance
	N, T     int
	Dropped  []uint16
}

// ErrRefused is wrapped by Request.Check when an honest member must not
// answer.
var ErrRefused = errors.New("blind: recovery request refused")

// Survivors returns the members not in Dropped, ascending.
func (r *Request) Survivors() []uint16 {
	var s []uint16
	for i := 0; i < r.N; i++ {
		if !slices.Contains(r.Dropped, uint16(i)) {
			s = append(s, uint16(i))
		}
	}
	return s
}

// Check is what an honest member self verifies before answering: the
// request is well formed, T is the group's threshold, self is a survivor,
// and at least T members survive (so the unmasked sum covers at least
// T ≥ 2 members and never one member's vector alone). self < 0 checks
// from no member's point of view. Errors wrap ErrRefused.
func (r *Request) Check(self, n int) error {
	if r.N != n || n < MinGroup {
		return fmt.Errorf("%w: group of %d, request says %d", ErrRefused, n, r.N)
	}
	if r.T != Threshold(n) {
		return fmt.Errorf("%w: threshold %d, want %d for a group of %d", ErrRefused, r.T, Threshold(n), n)
	}
	for k, d := range r.Dropped {
		if int(d) >= n || (k > 0 && d <= r.Dropped[k-1]) {
			return fmt.Errorf("%w: dropped list not sorted, distinct and inside the group", ErrRefused)
		}
		if int(d) == self {
			return fmt.Errorf("%w: member %d is listed as dropped", ErrRefused, self)
		}
	}
	if s := n - len(r.Dropped); s < r.T {
		return fmt.Errorf("%w: %d survivors < threshold %d (the sum would expose too few members)", ErrRefused, s, r.T)
	}
	return nil
}

// Reveal is one share a holder reveals: dealer From's share of b_From
// (J == From) or of s_{From,J}, with its nonce and the Merkle proof of leaf
// Index under the dealer's root for this holder.
type Reveal struct {
	From, J uint16
	Share   SeedShare
	Nonce   [NonceSize]byte
	Index   uint16
	Proof   [][32]byte
}

// Answer is holder Member's answer to a Request.
type Answer struct {
	Instance Instance
	Member   uint16
	Reveals  []Reveal
}

// MakeAnswer builds holder self's answer to req (which must pass Check)
// from its opened bundles: for each surviving dealer i, its share of b_i
// and its shares of s_ij for dropped j. Bundles from dropped dealers or not
// addressed to self are ignored. self must be a survivor.
func MakeAnswer(req *Request, self int, bundles []*Bundle) (*Answer, error) {
	if err := req.Check(self, req.N); err != nil {
		return nil, err
	}
	a := &Answer{Instance: req.Instance, Member: uint16(self)}
	dropped := map[uint16]bool{}
	for _, d := range req.Dropped {
		dropped[d] = true
	}
	for _, b := range bundles {
		if b == nil || int(b.To) != self || dropped[b.From] || int(b.From) >= req.N {
			continue
		}
		leaves := make([][32]byte, len(b.Shares))
		for k := range b.Shares {
			leaves[k] = leaf(req.Instance, b.From, b.To, &b.Shares[k])
		}
		lv := merkle(leaves)
		for k, s := range b.Shares {
			if s.J != b.From && !dropped[s.J] {
				continue // a pair of two survivors: never revealed
			}
			a.Reveals = append(a.Reveals, Reveal{From: b.From, J: s.J, Share: s.Share, Nonce: s.Nonce, Index: uint16(k), Proof: proof(lv, k)})
		}
	}
	return a, nil
}

// Recovery is the aggregator side of one instance's unmasking: it collects
// answers, verifies every revealed share against its dealer's commitments,
// and once each survivor's b_i and each pair (i ∈ S, j ∈ D) has T verified
// shares, removes those masks from Σ_{i∈S} Y_i.
type Recovery struct {
	req      Request
	dropped  map[uint16]bool
	commits  map[uint16]*Commitments
	shares   map[[2]uint16]map[uint16]SeedShare // (dealer, J) → holder x → share
	answered map[uint16]bool
	bad      map[uint16]int
}

// NewRecovery starts a recovery for req (validated like Request.Check from
// no member's point of view) with the survivors' commitments (commits[i]
// for every survivor i). Errors wrap ErrRefused, or name a survivor
// without commitments.
func NewRecovery(req Request, commits map[uint16]*Commitments) (*Recovery, error) {
	if err := req.Check(-1, req.N); err != nil {
		return nil, err
	}
	r := &Recovery{req: req, dropped: map[uint16]bool{}, commits: commits,
		shares: map[[2]uint16]map[uint16]SeedShare{}, answered: map[uint16]bool{}, bad: map[uint16]int{}}
	for _, d := range req.Dropped {
		r.dropped[d] = true
	}
	for _, i := range req.Survivors() {
		if c := commits[i]; c == nil || len(c.Roots) != req.N {
			return nil, fmt.Errorf("blind: no commitments from survivor %d", i)
		}
	}
	return r, nil
}

// Request returns the request this recovery answers.
func (r *Recovery) Request() Request { return r.req }

// Add takes one holder's answer and returns how many of its shares
// verified and how many failed (a failed share is skipped and its holder
// counted in Bad). Shares outside what the request asks (a survivor pair,
// a dropped dealer, a share whose X is not the holder's) are ignored;
// answers from dropped members are ignored (returns 0, 0). A second answer
// from the same holder adds only shares not yet held.
func (r *Recovery) Add(a *Answer) (good, bad int) {
	m := a.Member
	if int(m) >= r.req.N || r.dropped[m] || a.Instance != r.req.Instance {
		return 0, 0
	}
	for k := range a.Reveals {
		rv := &a.Reveals[k]
		if int(rv.From) >= r.req.N || r.dropped[rv.From] || rv.Share.X != m+1 {
			continue
		}
		if rv.J != rv.From && !r.dropped[rv.J] {
			continue
		}
		bs := BundleShare{J: rv.J, Share: rv.Share, Nonce: rv.Nonce}
		if !verifyProof(r.commits[rv.From].Roots[m], leaf(r.req.Instance, rv.From, m, &bs), int(rv.Index), rv.Proof) {
			bad++
			continue
		}
		key := [2]uint16{rv.From, rv.J}
		if r.shares[key] == nil {
			r.shares[key] = map[uint16]SeedShare{}
		}
		r.shares[key][rv.Share.X] = rv.Share
		good++
	}
	if good > 0 {
		r.answered[m] = true
	}
	if bad > 0 {
		r.bad[m] += bad
	}
	return good, bad
}

// Answered is the number of holders with at least one verified share.
func (r *Recovery) Answered() int { return len(r.answered) }

// Bad returns the holders whose revealed shares failed verification, with
// how many failed, ascending by holder.
func (r *Recovery) Bad() [][2]int {
	var out [][2]int
	for h, n := range r.bad {
		out = append(out, [2]int{int(h), n})
	}
	slices.SortFunc(out, func(a, b [2]int) int { return a[0] - b[0] })
	return out
}

// Ready reports whether every survivor's self-mask seed and every pair
// (i ∈ S, j ∈ D) has at least T verified shares.
func (r *Recovery) Ready() bool {
	for _, i := range r.req.Survivors() {
		if len(r.shares[[2]uint16{i, i}]) < r.req.T {
			return false
		}
		for _, j := range r.req.Dropped {
			if len(r.shares[[2]uint16{i, j}]) < r.req.T {
				return false
			}
		}
	}
	return true
}

func (r *Recovery) combine(key [2]uint16) (Seed, error) {
	m := r.shares[key]
	xs := make([]uint16, 0, len(m))
	for x := range m {
		xs = append(xs, x)
	}
	slices.Sort(xs)
	use := make([]SeedShare, 0, len(xs))
	for _, x := range xs {
		use = append(use, m[x])
	}
	return CombineSeed(use, r.req.T)
}

// Correct subtracts Σ_{i∈S} PRG(b_i) + Σ_{i∈S, j∈D} sign(i,j)·PRG(s_ij)
// from sum (which must be Σ_{i∈S} Y_i), leaving Σ_{i∈S} V_i. Errors with
// ErrThreshold when not Ready.
func (r *Recovery) Correct(sum []uint64) error {
	if !r.Ready() {
		return ErrThreshold
	}
	var p PRG
	for _, i := range r.req.Survivors() {
		b, err := r.combine([2]uint16{i, i})
		if err != nil {
			return fmt.Errorf("self-mask seed of %d: %w", i, err)
		}
		p.AddMask(sum, b, -1)
		for _, j := range r.req.Dropped {
			s, err := r.combine([2]uint16{i, j})
			if err != nil {
				return fmt.Errorf("pair (%d,%d): %w", i, j, err)
			}
			p.AddMask(sum, s, -Sign(int(i), int(j)))
		}
	}
	return nil
}
