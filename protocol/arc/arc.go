package arc

import (
	"errors"
	"filippo.io/bigmod"
	"fmt"
	"io"
	"math/bits"
	"sort"
	"sync/atomic"
)

// ErrInvalidPresentation is wrapped by every VerifyPresentation failure: the
// proof does not verify under the key, context and limit given, or the
// presentation has the wrong number of bit commitments for the limit.
var ErrInvalidPresentation = errors.New("arc: invalid presentation")

// ErrInvalidProof is wrapped when a credential request's proof (Issue) or a
// credential response's proof (Finalize) does not verify.
var ErrInvalidProof = errors.New("arc: invalid proof")

// ErrLimit is wrapped by Present when nonce is outside [0, limit).
var ErrLimit = errors.New("arc: presentation nonce outside [0, limit)")

var errIdentity = errors.New("arc: a proof element is the identity (retry with fresh randomness)")

// DefaultRequestContext is the request context of NewCredentialRequest and
// VerifyPresentation: crowdlog binds a credential to its epoch through the
// per-epoch issuer key, so the request context (m2) is one constant.
var DefaultRequestContext = []byte("crowdlog-v1 arc request")

// MaxLimit is the largest presentation limit accepted (2^16).
const MaxLimit = 1 << 16

// PrivateKey is the server's ServerPrivateKey (x0, x1, x2, x0Blinding) with
// its public key (draft-ietf-privacypass-arc-crypto-latest §"Key Generation";
// the algebraic MAC MAC_GGM of CMZ14, Chase–Meiklejohn–Zaverucha, CCS 2014).
type PrivateKey struct {
	x0, x1, x2, xb scalar
	pub            PublicKey
}

// PublicKey is ServerPublicKey: X0 = x0·G + x0Blinding·H, X1 = x1·H,
// X2 = x2·H.
type PublicKey struct {
	X0, X1, X2 element
}

// GenerateKey draws a server key from rand (use crypto/rand.Reader).
func GenerateKey(rand io.Reader) (*PrivateKey, error) {
	return generateKey(readerRandomness{rand})
}

func generateKey(rnd randomness) (*PrivateKey, error) {
	var s [4]scalar
	for i := range s {
		v, err := rnd.secret()
		if err != nil {
			return nil, err
		}
		s[i] = v
	}
	return newPrivateKey(s[0], s[1], s[2], s[3]), nil
}

func newPrivateKey(x0, x1, x2, xb scalar) *PrivateKey {
	return &PrivateKey{x0: x0, x1: x1, x2: x2, xb: xb, pub: PublicKey{
		X0: add(mul(genG, x0), mul(genH, xb)),
		X1: mul(genH, x1),
		X2: mul(genH, x2),
	}}
}

// Public returns the server public key.
func (sk *PrivateKey) Public() *PublicKey { p := sk.pub; return &p }

// ClientSecrets is the client's state between request and response: m1
// (the credential secret), m2 = HashToScalar(requestContext,
// "requestContext") and the blinding factors r1, r2.
type ClientSecrets struct {
	m1, m2, r1, r2 scalar
}

// CredentialRequest is (m1Enc, m2Enc, requestProof): Pedersen commitments
// m_i·G + r_i·H with a proof of knowledge of their openings (5·Ns bytes).
type CredentialRequest struct {
	M1Enc, M2Enc element
	Proof        []byte
}

// NewCredentialRequest is CreateCredentialRequest with
// DefaultRequestContext: a fresh secret m1, the request and the secrets
// Finalize needs.
func NewCredentialRequest(rand io.Reader) (*ClientSecrets, *CredentialRequest, error) {
	return NewCredentialRequestWithContext(rand, DefaultRequestContext)
}

// NewCredentialRequestWithContext is CreateCredentialRequest(requestContext).
// The verifier must pass the same requestContext to
// VerifyPresentationWithContext.
func NewCredentialRequestWithContext(rand io.Reader, requestContext []byte) (*ClientSecrets, *CredentialRequest, error) {
	return newCredentialRequest(readerRandomness{rand}, requestContext)
}

func newCredentialRequest(rnd randomness, requestContext []byte) (*ClientSecrets, *CredentialRequest, error) {
	m1, err := rnd.secret()
	if err != nil {
		return nil, nil, err
	}
	m2 := hashToScalar(requestContext, "requestContext")
	r1, err := rnd.secret()
	if err != nil {
		return nil, nil, err
	}
	r2, err := rnd.secret()
	if err != nil {
		return nil, nil, err
	}
	req := &CredentialRequest{
		M1Enc: add(mul(genG, m1), mul(genH, r1)),
		M2Enc: add(mul(genG, m2), mul(genH, r2)),
	}
	rel := requestRelation(req)
	req.Proof, err = rel.prove(contextString+"CredentialRequest", []scalar{m1, m2, r1, r2}, rnd)
	if err != nil {
		return nil, nil, err
	}
	return &ClientSecrets{m1: m1, m2: m2, r1: r1, r2: r2}, req, nil
}

// requestRelation is the statement of MakeCredentialRequestProof:
// m1Enc = m1·G + r1·H, m2Enc = m2·G + r2·H.
func requestRelation(req *CredentialRequest) *relation {
	r := &relation{}
	v := r.scalars(4) // m1, m2, r1, r2
	gG, gH := r.element(genG), r.element(genH)
	e1, e2 := r.element(req.M1Enc), r.element(req.M2Enc)
	r.equation(e1, [2]int{v[0], gG}, [2]int{v[2], gH})
	r.equation(e2, [2]int{v[1], gG}, [2]int{v[3], gH})
	return r
}

// CredentialResponse is the server's answer: U = b·G, encUPrime, the
// auxiliary points and a proof (8·Ns bytes) that they were formed with the
// key behind the public key.
type CredentialResponse struct {
	U, EncUPrime, X0Aux, X1Aux, X2Aux, HAux element
	Proof                                   []byte
}

// Issue is CreateCredentialResponse: it checks the request's proof (errors
// wrap ErrInvalidProof) and MACs the committed attributes under a fresh b.
// The server learns nothing of m1.
func (sk *PrivateKey) Issue(rand io.Reader, req *CredentialRequest) (*CredentialResponse, error) {
	return sk.issue(readerRandomness{rand}, req)
}

func (sk *PrivateKey) issue(rnd randomness, req *CredentialRequest) (*CredentialResponse, error) {
	if req == nil || req.M1Enc == nil || req.M2Enc == nil || !requestRelation(req).verify(contextString+"CredentialRequest", req.Proof) {
		return nil, fmt.Errorf("%w: credential request proof does not verify", ErrInvalidProof)
	}
	b, err := rnd.secret()
	if err != nil {
		return nil, err
	}
	pk := &sk.pub
	resp := &CredentialResponse{
		U:         mul(genG, b),
		EncUPrime: mul(add(add(pk.X0, mul(req.M1Enc, sk.x1)), mul(req.M2Enc, sk.x2)), b),
		X0Aux:     mul(genH, scMul(b, sk.xb)),
		X1Aux:     mul(pk.X1, b),
		X2Aux:     mul(pk.X2, b),
		HAux:      mul(genH, b),
	}
	t1 := scMul(b, sk.x1)
	t2 := scMul(b, sk.x2)
	resp.Proof, err = responseRelation(pk, req, resp).prove(contextString+"CredentialResponse",
		[]scalar{sk.x0, sk.x1, sk.x2, sk.xb, b, t1, t2}, rnd)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// responseRelation is the statement of MakeCredentialResponseProof
// (equations 1–8 of the draft, in its order).
func responseRelation(pk *PublicKey, req *CredentialRequest, resp *CredentialResponse) *relation {
	r := &relation{}
	v := r.scalars(7)
	x0, x1, x2, xb, b, t1, t2 := v[0], v[1], v[2], v[3], v[4], v[5], v[6]
	gG, gH := r.element(genG), r.element(genH)
	m1Enc, m2Enc := r.element(req.M1Enc), r.element(req.M2Enc)
	u, encU := r.element(resp.U), r.element(resp.EncUPrime)
	X0, X1, X2 := r.element(pk.X0), r.element(pk.X1), r.element(pk.X2)
	X0a, X1a, X2a, Ha := r.element(resp.X0Aux), r.element(resp.X1Aux), r.element(resp.X2Aux), r.element(resp.HAux)
	r.equation(X0, [2]int{x0, gG}, [2]int{xb, gH})
	r.equation(X1, [2]int{x1, gH})
	r.equation(X2, [2]int{x2, gH})
	r.equation(Ha, [2]int{b, gH})
	r.equation(X0a, [2]int{xb, Ha})
	r.equation(X1a, [2]int{t1, gH})
	r.equation(X1a, [2]int{b, X1})
	r.equation(X2a, [2]int{b, X2})
	r.equation(X2a, [2]int{t2, gH})
	r.equation(u, [2]int{b, gG})
	r.equation(encU, [2]int{b, X0}, [2]int{t1, m1Enc}, [2]int{t2, m2Enc})
	return r
}

// Credential is the client's credential (m1, U, U', X1): U' = (x0 + x1·m1 +
// x2·m2)·U, the MAC_GGM tag of CMZ14 over (m1, m2).
type Credential struct {
	m1            scalar
	U, UPrime, X1 element

	// presented counts presentations; tables is set once it passes
	// presentTablesAfter (comb.go).
	presented atomic.Int64
	tables    atomic.Pointer[credTables]
	// inv0 caches m1⁻¹, the tag's exponent at nonce 0 (every presentation
	// under limit 1); x1Enc X1's encoding.
	inv0  atomic.Pointer[bigmod.Nat]
	x1Enc atomic.Pointer[[]byte]
}

// tagExponent returns (m1 + nonce)⁻¹ (constant-time inversion; at nonce 0
// the cached m1⁻¹) and false when m1 + nonce is zero.
func (c *Credential) tagExponent(nonce int, n scalar) (scalar, bool) {
	if nonce == 0 {
		if v := c.inv0.Load(); v != nil {
			return v, true
		}
	}
	inv := scAdd(c.m1, n)
	if scIsZero(inv) {
		return nil, false
	}
	inv = scInv(inv)
	if nonce == 0 {
		c.inv0.Store(inv)
	}
	return inv, true
}

// x1Encoding returns SerializeElement(X1), computed once.
func (c *Credential) x1Encoding() []byte {
	if e := c.x1Enc.Load(); e != nil {
		return *e
	}
	e := mustEncode(c.X1)
	c.x1Enc.Store(&e)
	return e
}

// bases returns U, U' and X1 with their comb tables once the credential
// has made presentTablesAfter presentations, without before (X1's table is
// its key's, shared, from the first).
func (c *Credential) bases() (u, uPrime, x1 fixedBase) {
	if t := c.tables.Load(); t != nil {
		return fixedBase{c.U, t.u}, fixedBase{c.UPrime, t.uPrime}, fixedBase{c.X1, t.x1}
	}
	x1t := keyTable(c.X1)
	if c.presented.Add(1) > presentTablesAfter {
		t := &credTables{u: newCombTable(c.U), uPrime: newCombTable(c.UPrime), x1: x1t}
		if c.tables.CompareAndSwap(nil, t) {
			return fixedBase{c.U, t.u}, fixedBase{c.UPrime, t.uPrime}, fixedBase{c.X1, t.x1}
		}
		return c.bases()
	}
	return fixedBase{c.U, nil}, fixedBase{c.UPrime, nil}, fixedBase{c.X1, x1t}
}

// Finalize is FinalizeCredential: it checks the response's proof against pk
// and req (errors wrap ErrInvalidProof) and unblinds U'.
func (s *ClientSecrets) Finalize(pk *PublicKey, req *CredentialRequest, resp *CredentialResponse) (*Credential, error) {
	if pk == nil || req == nil || resp == nil || resp.U == nil || resp.EncUPrime == nil || resp.X0Aux == nil ||
		resp.X1Aux == nil || resp.X2Aux == nil || resp.HAux == nil || pk.X0 == nil || pk.X1 == nil || pk.X2 == nil ||
		!responseRelation(pk, req, resp).verify(contextString+"CredentialResponse", resp.Proof) {
		return nil, fmt.Errorf("%w: credential response proof does not verify under the issuer's public key", ErrInvalidProof)
	}
	up := sub(resp.EncUPrime, resp.X0Aux)
	up = sub(up, mul(resp.X1Aux, s.r1))
	up = sub(up, mul(resp.X2Aux, s.r2))
	if isIdentity(up) || isIdentity(resp.U) {
		return nil, fmt.Errorf("%w: credential with identity MAC", ErrInvalidProof)
	}
	return &Credential{m1: s.m1, U: copyElement(resp.U), UPrime: up, X1: copyElement(pk.X1)}, nil
}

// Presentation is (U, U'Commit, m1Commit, tag, nonceCommit, proof) where
// proof = D[0..k) ‖ challenge ‖ responses[5+3k] (draft "Presentation"):
// k bit commitments of the range proof, k = ceil(log2(limit)) (0 for
// limit 1, crowdlog's extension, see package doc).
type Presentation struct {
	U, UPrimeCommit, M1Commit, TagElement, NonceCommit element
	D                                                  []element
	Proof                                              []byte // challenge ‖ responses

	enc *presentationEnc // Present's encodings of the five elements
}

// presentationEnc holds the encodings of the elements of, in
// MarshalBinary's order, valid while the fields still hold those
// elements.
type presentationEnc struct {
	of   [5]element
	encs [5][]byte
}

// encodings returns the cached encodings of p's five elements, nil when
// there are none or a field was replaced.
func (p *Presentation) encodings() *[5][]byte {
	if p.enc == nil || p.enc.of != [5]element{p.U, p.UPrimeCommit, p.M1Commit, p.TagElement, p.NonceCommit} {
		return nil
	}
	return &p.enc.encs
}

// Tag returns the presentation tag, SerializeElement((m1+nonce)^−1 ·
// HashToGroup(presentationContext, "Tag")), 33 bytes: deterministic per
// (credential, context, nonce), so a verifier that stores it detects a
// presentation beyond the limit.
func (p *Presentation) Tag() []byte {
	if p == nil || p.TagElement == nil || isIdentity(p.TagElement) {
		return nil
	}
	if e := p.encodings(); e != nil {
		return append([]byte(nil), e[3]...)
	}
	return mustEncode(p.TagElement)
}

// Present is Present of the draft with the state kept by the caller: the
// nonce-th presentation (0 ≤ nonce < limit) of c in presentationContext.
// Presenting the same nonce twice in one context gives the same Tag (the
// verifier refuses the second); the caller counts nonces. Errors wrap
// ErrLimit for a nonce outside [0, limit) or a limit outside 1..MaxLimit.
func (c *Credential) Present(rand io.Reader, presentationContext []byte, nonce, limit int) (*Presentation, error) {
	return c.present(readerRandomness{rand}, presentationContext, nonce, limit)
}

func (c *Credential) present(rnd randomness, presentationContext []byte, nonce, limit int) (*Presentation, error) {
	if limit < 1 || limit > MaxLimit || nonce < 0 || nonce >= limit {
		return nil, fmt.Errorf("%w: nonce %d, limit %d (limit must be 1..%d)", ErrLimit, nonce, limit, MaxLimit)
	}
	return c.presentUnchecked(rnd, presentationContext, nonce, limit)
}

// presentUnchecked is present without the nonce check (tests build
// presentations beyond the limit with it).
func (c *Credential) presentUnchecked(rnd randomness, presentationContext []byte, nonce, limit int) (*Presentation, error) {
	var rs [4]scalar // a, r, z, nonceBlinding
	for i := range rs {
		v, err := rnd.secret()
		if err != nil {
			return nil, err
		}
		rs[i] = v
	}
	a, r, z, nb := rs[0], rs[1], rs[2], rs[3]
	n := scalarFromInt(nonce)
	// U, U' and X1 are multiplied through comb tables once the credential
	// has them, and U = a·U_cred through U_cred's (m1·U = (a·m1)·U_cred):
	// the same points, so the same bytes, in constant time (comb.go).
	bU, bUPrime, bX1 := c.bases()
	p := &Presentation{}
	p.U = bU.mul(a)
	rG := mul(genG, r)
	p.UPrimeCommit = add(bUPrime.mul(a), rG)
	p.M1Commit = add(bU.mul(scMul(a, c.m1)), mul(genH, z))
	p.NonceCommit = add(mul(genG, n), mul(genH, nb))
	genT := hashToGroup(presentationContext, "Tag")
	inv, ok := c.tagExponent(nonce, n)
	if !ok {
		return nil, errIdentity
	}
	p.TagElement = mul(genT, inv)
	V := sub(bX1.mul(z), rG)

	rel, vars := presentationRelation(p.U, p.UPrimeCommit, p.M1Commit, V, c.X1, p.TagElement, genT, p.NonceCommit)
	rel.rep(vars.u, a, bU)
	rel.rep(vars.x1, nil, bX1)
	rel.setEnc(vars.x1, c.x1Encoding())
	witness := []scalar{c.m1, z, scNeg(r), n, nb}
	rw, d, err := rangeProve(rnd, rel, vars, nonce, nb, limit, p.NonceCommit)
	if err != nil {
		return nil, err
	}
	p.D = d
	witness = append(witness, rw...)
	p.Proof, err = rel.prove(contextString+"CredentialPresentation", witness, rnd)
	if err != nil {
		return nil, err
	}
	// the label encoded the presentation's elements: MarshalBinary and
	// Tag reuse the encodings
	p.enc = &presentationEnc{
		of:   [5]element{p.U, p.UPrimeCommit, p.M1Commit, p.TagElement, p.NonceCommit},
		encs: [5][]byte{rel.encs[vars.u], rel.encs[vars.uPrimeCommit], rel.encs[vars.m1Commit], rel.encs[vars.tag], rel.encs[vars.nonceCommit]},
	}
	return p, nil
}

// presVars are the variable indices the range proof refers to.
type presVars struct {
	gG, gH, nonce, nonceBlinding, nonceCommit, u, x1 int
	uPrimeCommit, m1Commit, tag                      int
}

// presentationRelation is equations 1–4 of MakePresentationProof.
func presentationRelation(U, UPrimeCommit, M1Commit, V, X1, tag, genT, nonceCommit element) (*relation, presVars) {
	r := &relation{}
	v := r.scalars(5) // m1, z, −r, nonce, nonceBlinding
	m1, z, rNeg, nonce, nb := v[0], v[1], v[2], v[3], v[4]
	gG, gH := r.element(genG), r.element(genH)
	u := r.element(U)
	upc := r.element(UPrimeCommit)
	m1c := r.element(M1Commit)
	vv := r.element(V)
	x1 := r.element(X1)
	tg := r.element(tag)
	gT := r.element(genT)
	nc := r.element(nonceCommit)
	r.equation(m1c, [2]int{m1, u}, [2]int{z, gH})
	r.equation(vv, [2]int{z, x1}, [2]int{rNeg, gG})
	r.equation(nc, [2]int{nonce, gG}, [2]int{nb, gH})
	r.equation(gT, [2]int{m1, tg}, [2]int{nonce, tg})
	return r, presVars{gG: gG, gH: gH, nonce: nonce, nonceBlinding: nb, nonceCommit: nc, u: u, x1: x1,
		uPrimeCommit: upc, m1Commit: m1c, tag: tg}
}

// bases is ComputeBases(limit): 2^0 … 2^(k−2) and the remainder
// limit − 2^(k−1), sorted descending, k = ceil(log2(limit)); none for
// limit 1 (crowdlog's extension: the draft's formula gives base 0).
func bases(limit int) []int {
	if limit <= 1 {
		return nil
	}
	k := bits.Len(uint(limit - 1)) // ceil(log2(limit)) for limit ≥ 2
	out := make([]int, 0, k)
	rem := limit
	for i := 0; i < k-1; i++ {
		out = append(out, 1<<i)
		rem -= 1 << i
	}
	out = append(out, rem-1)
	sort.Sort(sort.Reverse(sort.IntSlice(out)))
	return out
}

// NumBits returns k, the number of bit commitments of a presentation for
// limit: ceil(log2(limit)), 0 for limit 1.
func NumBits(limit int) int { return len(bases(limit)) }

// rangeProve is MakeRangeProofHelper: the canonical decomposition of nonce
// over bases(limit), the bit commitments D, and their equations appended
// to rel. For limit 1 it adds nonceCommit = nonceBlinding·H instead, which
// with equation 3 forces nonce = 0.
func rangeProve(rnd randomness, rel *relation, v presVars, nonce int, nb scalar, limit int, nonceCommit element) ([]scalar, []element, error) {
	bs := bases(limit)
	if len(bs) == 0 {
		rel.equation(v.nonceCommit, [2]int{v.nonceBlinding, v.gH})
		return nil, nil, nil
	}
	k := len(bs)
	b := make([]scalar, k)
	rem := nonce
	for i, base := range bs {
		bit := 0
		if rem >= base {
			bit = 1
		}
		rem -= bit * base
		b[i] = scalarFromInt(bit)
	}
	s := make([]scalar, k)
	s2 := make([]scalar, k)
	d := make([]element, k)
	partial := newScalar()
	one := scalarFromInt(1)
	for i := 0; i < k; i++ {
		if i < k-1 {
			v, err := rnd.secret()
			if err != nil {
				return nil, nil, err
			}
			s[i] = v
			partial = scAdd(partial, scMul(scalarFromInt(bs[i]), v))
		} else {
			s[i] = scMul(scInv(scalarFromInt(bs[i])), scSub(nb, partial))
		}
		s2[i] = scMul(scSub(one, b[i]), s[i])
		d[i] = add(mul(genG, b[i]), mul(genH, s[i]))
	}
	rangeRelation(rel, v, d, nonceCommit)
	w := make([]scalar, 0, 3*k)
	w = append(append(append(w, b...), s...), s2...)
	return w, d, nil
}

// rangeRelation appends the range-proof variables and equations for the
// bit commitments d (MakeRangeProofHelper / VerifyRangeProofHelper). As in
// the draft's reference code, a single commitment equal to nonceCommit
// (limit 2) reuses nonceCommit's element variable.
func rangeRelation(rel *relation, v presVars, d []element, nonceCommit element) {
	k := len(d)
	vb, vs, vs2 := rel.scalars(k), rel.scalars(k), rel.scalars(k)
	vd := make([]int, k)
	if k == 1 && equal(d[0], nonceCommit) {
		vd[0] = v.nonceCommit
	} else {
		for i := range d {
			vd[i] = rel.element(d[i])
		}
	}
	for i := 0; i < k; i++ {
		rel.equation(vd[i], [2]int{vb[i], v.gG}, [2]int{vs[i], v.gH})
		rel.equation(vd[i], [2]int{vb[i], vd[i]}, [2]int{vs2[i], v.gH})
	}
}

// VerifyPresentation is VerifyPresentation of the draft with
// DefaultRequestContext. It checks the joint proof (the MAC on the
// credential, the tag's form, the committed nonce in [0, limit)) under sk
// for presentationContext and limit. It does not check that the tag is
// fresh: the caller stores p.Tag() per context and refuses a repeat. Errors
// wrap ErrInvalidPresentation.
func (sk *PrivateKey) VerifyPresentation(p *Presentation, presentationContext []byte, limit int) error {
	return sk.VerifyPresentationWithContext(p, DefaultRequestContext, presentationContext, limit)
}

// VerifyPresentationWithContext is VerifyPresentation for credentials
// requested with NewCredentialRequestWithContext(requestContext).
func (sk *PrivateKey) VerifyPresentationWithContext(p *Presentation, requestContext, presentationContext []byte, limit int) error {
	if limit < 1 || limit > MaxLimit {
		return fmt.Errorf("%w: limit %d outside 1..%d", ErrInvalidPresentation, limit, MaxLimit)
	}
	if p == nil || p.U == nil || p.UPrimeCommit == nil || p.M1Commit == nil || p.TagElement == nil || p.NonceCommit == nil {
		return fmt.Errorf("%w: missing elements", ErrInvalidPresentation)
	}
	bs := bases(limit)
	if len(p.D) != len(bs) {
		return fmt.Errorf("%w: %d bit commitments for limit %d, want %d", ErrInvalidPresentation, len(p.D), limit, len(bs))
	}
	for _, e := range []element{p.U, p.UPrimeCommit, p.M1Commit, p.TagElement, p.NonceCommit} {
		if isIdentity(e) {
			return fmt.Errorf("%w: identity element", ErrInvalidPresentation)
		}
	}
	m2 := hashToScalar(requestContext, "requestContext")
	// V = (x0 + x2·m2)·U + x1·m1Commit − U'Commit (the draft's three
	// products, two multiplications).
	ux := scAdd(scMul(sk.x2, m2), sk.x0)
	V := sub(add(mul(p.U, ux), mul(p.M1Commit, sk.x1)), p.UPrimeCommit) // secret scalars: constant time
	genT := hashToGroup(presentationContext, "Tag")
	rel, vars := presentationRelation(p.U, p.UPrimeCommit, p.M1Commit, V, sk.pub.X1, p.TagElement, genT, p.NonceCommit)
	if len(bs) == 0 {
		rel.equation(vars.nonceCommit, [2]int{vars.nonceBlinding, vars.gH})
	} else {
		rangeRelation(rel, vars, p.D, p.NonceCommit)
		// Σ base_i·D_i: public bases and points.
		ws := make([]scalar, len(bs))
		for i, base := range bs {
			ws[i] = scalarFromInt(base)
		}
		if !equal(msmVarTime(ws, p.D), p.NonceCommit) {
			return fmt.Errorf("%w: bit commitments do not sum to the nonce commitment", ErrInvalidPresentation)
		}
	}
	if !rel.verify(contextString+"CredentialPresentation", p.Proof) {
		return fmt.Errorf("%w: proof does not verify (another key, context or limit, or altered)", ErrInvalidPresentation)
	}
	return nil
}
