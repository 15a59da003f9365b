package blind

import (
	"crypto/ecdh"
	"errors"
	"fmt"
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

// PairShare is a holder's share of s_ij for the pair (I, J).
type PairShare struct {
	I, J  uint16
	Share SeedShare
}

// Bundle is what holder To receives from member From: a share of s_{From,j}
// for every member j ∉ {From, To}.
type Bundle struct {
	From, To uint16
	Shares   []PairShare
}

// SealedBundle is a Bundle encrypted to holder To's long-term key (HPKE
// RFC 9180 Base mode, protocol suite X25519/HKDF-SHA256/ChaCha20-Poly1305;
// info = the instance, aad = from ‖ to). The coordinator stores it without
// being able to read it.
type SealedBundle struct {
	From, To   uint16
	Ciphertext []byte
}

var bundleSuite = hpke.NewSuite(hpke.KEM_X25519_HKDF_SHA256, hpke.KDF_HKDF_SHA256, hpke.AEAD_ChaCha20Poly1305)

var bundleKEM = hpke.KEM_X25519_HKDF_SHA256.Scheme()

func bundleInfo(in Instance) []byte {
	return append([]byte("crowdlog-v1 pdd bundle\x00"), in.info()...)
}

func bundleAAD(from, to uint16) []byte {
	return []byte{byte(from >> 8), byte(from), byte(to >> 8), byte(to)}
}

// Deposit shares member self's pair seeds (from Seeds) with threshold t
// among the other members and seals one bundle per holder. It returns
// n−1 bundles (none for self). Cost: (n−1)²·3·t field multiplications plus
// n−1 HPKE seals.
func Deposit(in Instance, self int, seeds []Seed, members [][]byte, t int) ([]SealedBundle, error) {
	n := len(members)
	if len(seeds) != n || self < 0 || self >= n {
		return nil, fmt.Errorf("blind: deposit for member %d with %d seeds in a group of %d", self, len(seeds), n)
	}
	var secrets []Seed
	var js []uint16
	var xs []uint16
	for j := 0; j < n; j++ {
		if j == self {
			continue
		}
		secrets = append(secrets, seeds[j])
		js = append(js, uint16(j))
		xs = append(xs, uint16(j+1))
	}
	shares, err := shareSeeds(secrets, xs, t)
	if err != nil {
		return nil, err
	}
	out := make([]SealedBundle, 0, n-1)
	for h, x := range xs {
		to := x - 1
		b := Bundle{From: uint16(self), To: to}
		for s, j := range js {
			if j == to {
				continue
			}
			b.Shares = append(b.Shares, PairShare{I: uint16(self), J: j, Share: shares[s][h]})
		}
		pt := b.marshal()
		pk, err := bundleKEM.UnmarshalBinaryPublicKey(members[to])
		if err != nil {
			return nil, fmt.Errorf("%w: member %d: %v", ErrBadKey, to, err)
		}
		snd, err := bundleSuite.NewSender(pk, bundleInfo(in))
		if err != nil {
			return nil, err
		}
		enc, sealer, err := snd.Setup(nil)
		if err != nil {
			return nil, err
		}
		ct, err := sealer.Seal(pt, bundleAAD(b.From, b.To))
		if err != nil {
			return nil, err
		}
		out = append(out, SealedBundle{From: b.From, To: b.To, Ciphertext: append(enc, ct...)})
	}
	return out, nil
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

// Request is the server's recovery request for one instance after the delay:
// the group size N, threshold T and the members that never submitted
// (Dropped, sorted, distinct). Survivors are all others.
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
// at least T members survive (so the recovered sum covers at least T ≥ 2
// members and never one member's vector alone), and at least one member
// dropped. Errors wrap ErrRefused.
func (r *Request) Check(self, n int) error {
	if r.N != n || n < MinGroup {
		return fmt.Errorf("%w: group of %d, request says %d", ErrRefused, n, r.N)
	}
	if r.T != Threshold(n) {
		return fmt.Errorf("%w: threshold %d, want %d for a group of %d", ErrRefused, r.T, Threshold(n), n)
	}
	if len(r.Dropped) == 0 {
		return fmt.Errorf("%w: nobody dropped", ErrRefused)
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

// Answer is survivor Member's recovery answer: its own seeds with every
// dropped member (Direct, keyed by the dropped member) and its shares of
// s_ij for survivors i ≠ Member and dropped j.
type Answer struct {
	Instance Instance
	Member   uint16
	Direct   []DirectSeed
	Shares   []PairShare
}

// DirectSeed is s_{Member,J} revealed by Member for a dropped J.
type DirectSeed struct {
	J    uint16
	Seed Seed
}

// MakeAnswer builds member self's answer to req (which must pass Check)
// from its own seeds and the opened bundles of the survivors. Bundles from
// dropped members or not addressed to self are ignored.
func MakeAnswer(req *Request, self int, seeds []Seed, bundles []*Bundle) (*Answer, error) {
	if err := req.Check(self, len(seeds)); err != nil {
		return nil, err
	}
	a := &Answer{Instance: req.Instance, Member: uint16(self)}
	dropped := map[uint16]bool{}
	for _, d := range req.Dropped {
		dropped[d] = true
		a.Direct = append(a.Direct, DirectSeed{J: d, Seed: seeds[d]})
	}
	for _, b := range bundles {
		if b == nil || int(b.To) != self || dropped[b.From] || int(b.From) == self {
			continue
		}
		for _, ps := range b.Shares {
			if ps.I == b.From && dropped[ps.J] {
				a.Shares = append(a.Shares, ps)
			}
		}
	}
	return a, nil
}

// Recovery is the server side of one instance's recovery: it collects
// answers until every pair (i ∈ S, j ∈ D) has s_ij, directly from i or from
// T holders' shares, then removes those masks from Σ_{i∈S} Y_i.
type Recovery struct {
	req      Request
	dropped  map[uint16]bool
	direct   map[[2]uint16]Seed
	shares   map[[2]uint16][]SeedShare
	answered map[uint16]bool
}

// NewRecovery starts a recovery for req (validated like Request.Check, from
// no member's point of view).
func NewRecovery(req Request) (*Recovery, error) {
	if err := req.Check(-1, req.N); err != nil {
		return nil, err
	}
	r := &Recovery{req: req, dropped: map[uint16]bool{}, direct: map[[2]uint16]Seed{},
		shares: map[[2]uint16][]SeedShare{}, answered: map[uint16]bool{}}
	for _, d := range req.Dropped {
		r.dropped[d] = true
	}
	return r, nil
}

// Request returns the request this recovery answers.
func (r *Recovery) Request() Request { return r.req }

// Add takes one survivor's answer. A second answer from the same member, or
// one from a dropped member, is ignored (returns false); entries naming pairs
// outside S×D are dropped, so a faulty answer cannot make the server learn a
// survivor pair. Shares that later fail to combine make Correct fail for that
// pair only until more shares arrive.
func (r *Recovery) Add(a *Answer) bool {
	m := a.Member
	if int(m) >= r.req.N || r.dropped[m] || r.answered[m] || a.Instance != r.req.Instance {
		return false
	}
	r.answered[m] = true
	for _, d := range a.Direct {
		if r.dropped[d.J] {
			r.direct[[2]uint16{m, d.J}] = d.Seed
		}
	}
	for _, ps := range a.Shares {
		if int(ps.I) >= r.req.N || r.dropped[ps.I] || !r.dropped[ps.J] || ps.I == m || ps.Share.X != m+1 {
			continue
		}
		k := [2]uint16{ps.I, ps.J}
		r.shares[k] = append(r.shares[k], ps.Share)
	}
	return true
}

// Answered is the number of survivors that answered.
func (r *Recovery) Answered() int { return len(r.answered) }

// Ready reports whether every pair (i ∈ S, j ∈ D) has a direct seed or at
// least T shares.
func (r *Recovery) Ready() bool {
	for _, i := range r.req.Survivors() {
		for _, j := range r.req.Dropped {
			k := [2]uint16{i, j}
			if _, ok := r.direct[k]; !ok && len(r.shares[k]) < r.req.T {
				return false
			}
		}
	}
	return true
}

// Correct subtracts Σ_{i∈S, j∈D} sign(i,j)·PRG(s_ij) from sum (which must
// be Σ_{i∈S} Y_i), leaving Σ_{i∈S} V_i. Errors with ErrThreshold when not
// Ready, or when shares do not combine to a seed.
func (r *Recovery) Correct(sum []uint64) error {
	var p PRG
	for _, i := range r.req.Survivors() {
		for _, j := range r.req.Dropped {
			k := [2]uint16{i, j}
			s, ok := r.direct[k]
			if !ok {
				var err error
				if s, err = CombineSeed(r.shares[k], r.req.T); err != nil {
					return fmt.Errorf("pair (%d,%d): %w", i, j, err)
				}
			}
			p.AddMask(sum, s, -Sign(int(i), int(j)))
		}
	}
	return nil
}
