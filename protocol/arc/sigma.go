package arc

import (
	"crypto/subtle"
	"encoding/binary"
	"math/big"

	"github.com/cloudflare/circl/group"
)

// relation is a LinearRelation of draft-irtf-cfrg-sigma-protocols (§2.2,
// "Schnorr proofs for linear relations"): scalar and element variables and
// equations image = Σ scalar_j·element_j.
type relation struct {
	nScalars int
	elements []group.Element
	eqs      []equation
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
func (r *relation) element(e group.Element) int {
	r.elements = append(r.elements, e)
	return len(r.elements) - 1
}

func (r *relation) equation(lhs int, terms ...[2]int) {
	r.eqs = append(r.eqs, equation{lhs, terms})
}

// linearMap evaluates the right-hand sides at the scalars s. Terms of one
// equation on the same element are summed first (m1·tag + nonce·tag costs
// one multiplication).
func (r *relation) linearMap(s []group.Scalar) []group.Element {
	out := make([]group.Element, len(r.eqs))
	for i, eq := range r.eqs {
		coef := make(map[int]group.Scalar, len(eq.terms))
		order := make([]int, 0, len(eq.terms))
		for _, t := range eq.terms {
			if c, ok := coef[t[1]]; ok {
				c.Add(c, s[t[0]])
				continue
			}
			coef[t[1]] = s[t[0]].Copy()
			order = append(order, t[1])
		}
		acc := g.Identity()
		for _, e := range order {
			acc = add(acc, mul(r.elements[e], coef[e]))
		}
		out[i] = acc
	}
	return out
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
	for _, e := range r.elements {
		eb, err := encodeElement(e)
		if err != nil {
			return nil, false
		}
		b = append(b, eb...)
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
func challenge(sp *shake128, commitment []group.Element) (group.Scalar, bool) {
	for _, c := range commitment {
		cb, err := encodeElement(c)
		if err != nil {
			return nil, false
		}
		sp.absorb(cb)
	}
	u := sp.squeeze(ScalarSize + 16)
	return g.NewScalar().SetBigInt(new(big.Int).SetBytes(u)), true
}

// prove is NISchnorrProofShake128P256.prove: challenge ‖ responses
// (Ns each), responses_i = nonce_i + witness_i·challenge.
func (r *relation) prove(session string, witness []group.Scalar, rnd randomness) ([]byte, error) {
	nonces := make([]group.Scalar, r.nScalars)
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
		z := g.NewScalar().Mul(witness[i], c)
		z.Add(z, nonces[i])
		out = append(out, encodeScalar(z)...)
	}
	return out, nil
}

// proofSize is the length of a proof of r: challenge and one response per
// scalar variable.
func (r *relation) proofSize() int { return ScalarSize * (1 + r.nScalars) }

// verify recomputes the commitment from the responses (simulate_commitment:
// linear_map(responses) − challenge·image) and checks the challenge.
func (r *relation) verify(session string, proof []byte) bool {
	if len(proof) != r.proofSize() {
		return false
	}
	c := g.NewScalar()
	if c.UnmarshalBinary(proof[:ScalarSize]) != nil {
		return false
	}
	resp := make([]group.Scalar, r.nScalars)
	for i := range resp {
		resp[i] = g.NewScalar()
		if resp[i].UnmarshalBinary(proof[ScalarSize*(1+i):ScalarSize*(2+i)]) != nil {
			return false
		}
	}
	commit := r.linearMap(resp)
	cImage := map[int]group.Element{} // c·element, shared by equations with one left-hand side
	for i, eq := range r.eqs {
		ci, ok := cImage[eq.lhs]
		if !ok {
			ci = mul(r.elements[eq.lhs], c)
			cImage[eq.lhs] = ci
		}
		commit[i] = sub(commit[i], ci)
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
