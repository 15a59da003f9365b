package arc

import (
	"crypto/subtle"
	"encoding/binary"
)

// relation is a LinearRelation of draft-irtf-cfrg-sigma-protocols (§2.2,
// "Schnorr proofs for linear relations"): scalar and element variables and
// equations image = Σ scalar_j·element_j.
type relation struct {
	nScalars int
	elements []element
	eqs      []equation
	// reps gives, for some element variables, element = c·base (c nil:
	// 1) with base's comb table: the prover's linearMap multiplies
	// through it (comb.go).
	reps map[int]elementRep
	// encs caches the elements' encodings (nil until label or setEnc).
	encs [][]byte
}

// setEnc records the encoding of element variable i (known to the caller).
func (r *relation) setEnc(i int, enc []byte) {
	if len(r.encs) < len(r.elements) {
		r.encs = append(r.encs, make([][]byte, len(r.elements)-len(r.encs))...)
	}
	r.encs[i] = enc
}

type elementRep struct {
	c    scalar
	base fixedBase
}

// rep records that element variable i equals c·base (c nil: base itself).
func (r *relation) rep(i int, c scalar, base fixedBase) {
	if r.reps == nil {
		r.reps = make(map[int]elementRep)
	}
	r.reps[i] = elementRep{c, base}
}

type equation struct {
	lhs   int
	terms [][2]int // (scalar index, element index)
}

func (r *relation) scalars(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = r.nScalars + i
	}
	r.nScalars += n
	return out
}

// element allocates one element variable set to e and returns its index.
func (r *relation) element(e element) int {
	r.elements = append(r.elements, e)
	return len(r.elements) - 1
}

func (r *relation) equation(lhs int, terms ...[2]int) {
	r.eqs = append(r.eqs, equation{lhs, terms})
}

// coefficients returns the terms of equation eq at the scalars s with
// terms on the same element summed (m1·tag + nonce·tag costs one
// multiplication), in first-appearance order.
func (r *relation) coefficients(eq equation, s []scalar) ([]scalar, []element) {
	cs, idx := r.coefficientIndices(eq, s)
	es := make([]element, len(idx))
	for k, i := range idx {
		es[k] = r.elements[i]
	}
	return cs, es
}

// coefficientIndices is coefficients with element indices.
func (r *relation) coefficientIndices(eq equation, s []scalar) ([]scalar, []int) {
	cs := make([]scalar, 0, len(eq.terms)+1)
	idx := make([]int, 0, len(eq.terms)+1)
	for _, t := range eq.terms {
		found := false
		for k, e := range idx {
			if e == t[1] {
				cs[k] = scAdd(cs[k], s[t[0]])
				found = true
				break
			}
		}
		if !found {
			idx = append(idx, t[1])
			cs = append(cs, s[t[0]])
		}
	}
	return cs, idx
}

// linearMap evaluates the right-hand sides at the scalars s in constant
// time (the prover's nonces are secret). An element with a rep (c, base)
// is multiplied as (s·c)·base through base's comb table. A term (scalar
// j, element e) that several equations share unmerged (limit 1's
// nonceBlinding·H in both nonceCommit equations) is multiplied once.
func (r *relation) linearMap(s []scalar) []element {
	type termKey struct{ scalar, element int }
	uses := make(map[termKey]int)
	for _, eq := range r.eqs {
		for _, t := range eq.terms {
			uses[termKey{t[0], t[1]}]++
		}
	}
	memo := make(map[termKey]element)
	out := make([]element, len(r.eqs))
	for i, eq := range r.eqs {
		cs, idx := r.coefficientIndices(eq, s)
		acc := identity()
		for k, ei := range idx {
			key, shared := termKey{-1, ei}, false
			if src := singleSource(eq, ei); src >= 0 && uses[termKey{src, ei}] > 1 {
				key, shared = termKey{src, ei}, true
				if p, ok := memo[key]; ok {
					acc.Add(acc, p)
					continue
				}
			}
			term := identity()
			if rp, ok := r.reps[ei]; ok {
				c := cs[k]
				if rp.c != nil {
					c = scMul(c, rp.c)
				}
				rp.base.mulAdd(term, c)
			} else {
				term = mul(r.elements[ei], cs[k])
			}
			if shared {
				memo[key] = term
			}
			acc.Add(acc, term)
		}
		out[i] = acc
	}
	return out
}

// singleSource returns the scalar variable of equation eq's only term on
// element ei, or −1 when several terms share ei (their coefficients are
// summed).
func singleSource(eq equation, ei int) int {
	src := -1
	for _, t := range eq.terms {
		if t[1] == ei {
			if src >= 0 {
				return -1
			}
			src = t[0]
		}
	}
	return src
}

// label is the instance label (poc LinearRelation.get_label): u32le number
// of equations; per equation u32le lhs, u32le number of terms and u32le
// (scalar, element) index pairs; then every element, serialized. ok is
// false when an element has no encoding (the identity).
func (r *relation) label() ([]byte, bool) {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.eqs)))
	for _, eq := range r.eqs {
		b = binary.LittleEndian.AppendUint32(b, uint32(eq.lhs))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(eq.terms)))
		for _, t := range eq.terms {
			b = binary.LittleEndian.AppendUint32(b, uint32(t[0]))
			b = binary.LittleEndian.AppendUint32(b, uint32(t[1]))
		}
	}
	if len(r.encs) < len(r.elements) {
		r.encs = append(r.encs, make([][]byte, len(r.elements)-len(r.encs))...)
	}
	for i, e := range r.elements {
		if r.encs[i] == nil {
			eb, err := encodeElement(e)
			if err != nil {
				return nil, false
			}
			r.encs[i] = eb
		}
		b = append(b, r.encs[i]...)
	}
	return b, true
}

// protocolID is NISchnorrProofShake128P256's protocol identifier, padded to
// 64 bytes.
const protocolID = "sigma-proofs_Shake128_P256"

// transcript is the Fiat–Shamir sponge of NISigmaProtocol as the ARC
// draft's test vectors were generated (sigma-protocols poc at commit
// 4bc7eb4, the Fiat–Shamir draft's byte codec "init"): the SHAKE128 sponge
// with IV protocolID absorbs I2OSP(len(session), 4) ‖ session ‖
// I2OSP(len(label), 4) ‖ label. The newer sigma-protocols text (poc commit
// 1d243b4, the ARC repository's submodule pointer) hashes the session into
// a 64-byte session id and absorbs the label without a length; the
// published ARC vectors do not match that variant (see package doc).
func (r *relation) transcript(session string) (*shake128, bool) {
	lbl, ok := r.label()
	if !ok {
		return nil, false
	}
	sp := newShake128(protocolID)
	sp.absorb(binary.BigEndian.AppendUint32(nil, uint32(len(session))), []byte(session),
		binary.BigEndian.AppendUint32(nil, uint32(len(lbl))), lbl)
	return sp, true
}

// challenge absorbs the commitment and squeezes Ns+16 bytes reduced mod p
// (ByteSchnorrCodec.verifier_challenge).
func challenge(sp *shake128, commitment []element) (scalar, bool) {
	for _, c := range commitment {
		cb, err := encodeElement(c)
		if err != nil {
			return nil, false
		}
		sp.absorb(cb)
	}
	return scalarWide(sp.squeeze(ScalarSize + 16)), true
}

// prove is NISchnorrProofShake128P256.prove: challenge ‖ responses
// (Ns each), responses_i = nonce_i + witness_i·challenge.
func (r *relation) prove(session string, witness []scalar, rnd randomness) ([]byte, error) {
	nonces := make([]scalar, r.nScalars)
	for i := range nonces {
		n, err := rnd.nonce()
		if err != nil {
			return nil, err
		}
		nonces[i] = n
	}
	sp, ok := r.transcript(session)
	if !ok {
		return nil, errIdentity
	}
	c, ok := challenge(sp, r.linearMap(nonces))
	if !ok {
		return nil, errIdentity
	}
	out := make([]byte, 0, ScalarSize*(1+r.nScalars))
	out = append(out, encodeScalar(c)...)
	for i := range nonces {
		out = append(out, encodeScalar(scAdd(scMul(witness[i], c), nonces[i]))...)
	}
	return out, nil
}

// proofSize is the length of a proof of r: challenge and one response per
// scalar variable.
func (r *relation) proofSize() int { return ScalarSize * (1 + r.nScalars) }

// simulate sets commit[i] = Σ resp·element − c·lhs of equation i (negC =
// −c) as one variable-time multi-scalar multiplication. Where another
// equation j has the same left-hand side and a subset of i's terms (limit
// 1: nonceCommit = nonceBlinding·H beside nonceCommit = nonce·G +
// nonceBlinding·H), commit[i] = commit[j] + the remaining terms.
func (r *relation) simulate(commit []element, i int, resp []scalar, negC scalar) element {
	if commit[i] != nil {
		return commit[i]
	}
	eq := r.eqs[i]
	terms := eq.terms
	var base element
	for j, o := range r.eqs {
		if j != i && o.lhs == eq.lhs && len(o.terms) < len(eq.terms) {
			if rest, ok := termsMinus(eq.terms, o.terms); ok {
				base, terms = r.simulate(commit, j, resp, negC), rest
				break
			}
		}
	}
	cs, es := r.coefficients(equation{eq.lhs, terms}, resp)
	if base == nil {
		lhs := r.elements[eq.lhs]
		merged := false
		for k, e := range es {
			if e == lhs {
				cs[k] = scAdd(cs[k], negC)
				merged = true
			}
		}
		if !merged {
			cs, es = append(cs, negC), append(es, lhs)
		}
		commit[i] = msmVarTime(cs, es)
	} else {
		commit[i] = add(base, msmVarTime(cs, es))
	}
	return commit[i]
}

// termsMinus returns a \ b when every term of b is in a.
func termsMinus(a, b [][2]int) ([][2]int, bool) {
	rest := make([][2]int, 0, len(a))
	used := make([]bool, len(b))
	for _, t := range a {
		hit := false
		for k, u := range b {
			if !used[k] && u == t {
				used[k], hit = true, true
				break
			}
		}
		if !hit {
			rest = append(rest, t)
		}
	}
	for _, u := range used {
		if !u {
			return nil, false
		}
	}
	return rest, true
}

// verify recomputes the commitment from the responses (simulate_commitment:
// linear_map(responses) − challenge·image) and checks the challenge. The
// challenge, the responses and the elements are public: each commitment
// is one variable-time multi-scalar multiplication.
func (r *relation) verify(session string, proof []byte) bool {
	if len(proof) != r.proofSize() {
		return false
	}
	c, ok := parseScalar(proof[:ScalarSize])
	if !ok {
		return false
	}
	negC := scNeg(c)
	resp := make([]scalar, r.nScalars)
	for i := range resp {
		if resp[i], ok = parseScalar(proof[ScalarSize*(1+i) : ScalarSize*(2+i)]); !ok {
			return false
		}
	}
	commit := make([]element, len(r.eqs))
	for i := range r.eqs {
		r.simulate(commit, i, resp, negC)
	}
	sp, ok := r.transcript(session)
	if !ok {
		return false
	}
	want, ok := challenge(sp, commit)
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare(encodeScalar(want), proof[:ScalarSize]) == 1
}
