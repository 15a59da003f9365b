package oprf

import (
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/cloudflare/circl/oprf"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/internal/dleq"
)

// OPRFSuite is RFC 9497's ristretto255-SHA512 suite used for randomness.
var OPRFSuite = oprf.SuiteRistretto255

// OPRFMode is the RFC 9497 mode crowdlog uses: verifiable (VOPRF, §3.3.2).
// Every evaluation batch carries a DLEQ proof that it was computed under the
// epoch's public key, so a randomness service cannot give one client a
// private key (and thus tags nobody else shares) without being caught.
const OPRFMode = oprf.VerifiableMode

// MaxBatch is the largest number of OPRF elements in one randomness request.
const MaxBatch = 4096

// PublicKeySize is the encoded size of an OPRF public key (a ristretto255
// element).
const PublicKeySize = protocol.ElementSize

// ProofSize is the encoded size of a DLEQ proof (RFC 9497 §2.2: c ‖ s).
const ProofSize = 2 * protocol.ScalarSize

// ErrProof is wrapped by Finalize when the randomness service's DLEQ proof
// does not verify against the epoch's public key: the service evaluated
// under another key, or the answer was tampered with. Clients must stop;
// there is no fallback to unverified randomness.
var ErrProof = errors.New("randomness proof failed: the service did not evaluate under the epoch's pinned public key")

// OPRFInput is the OPRF input for one artifact of an application in an epoch:
// "crowdlog-v1" ‖ 0 ‖ app ‖ 0 ‖ epoch ‖ 0 ‖ artifact. The randomness
// service never sees it (it evaluates blinded elements, RFC 9497 §3.3.2).
func OPRFInput(app, epoch, artifact string) []byte {
	b := make([]byte, 0, 16+len(app)+len(epoch)+len(artifact))
	b = append(b, "crowdlog-v1"...)
	b = append(append(b, 0), app...)
	b = append(append(b, 0), epoch...)
	b = append(append(b, 0), artifact...)
	return b
}

// RandomnessRequest asks the randomness service to evaluate blinded
// elements under the key of Epoch (RFC 9497 §3.3.2 BlindEvaluate, batched:
// one request, one answer and one proof per batch).
type RandomnessRequest struct {
	Epoch    string
	Elements [][]byte // each a 32-byte encoded ristretto255 element
	// Tokens are encoded Privacy Pass tokens (protocol/token,
	// KindRandomness, this epoch), one per element, in element order, for
	// a service that requires them; empty otherwise.
	Tokens [][]byte
}

// MaxToken is the largest encoded token a RandomnessRequest carries, in
// bytes (a TypeRistretto token is 162).
const MaxToken = 1024

// MarshalBinary encodes: version ‖ u8 len epoch ‖ u16 count ‖ count×32
// bytes, followed — only when Tokens is not empty — by u16 count ‖ count ×
// (u16 len ‖ token), so a request without tokens encodes exactly as before.
func (q *RandomnessRequest) MarshalBinary() ([]byte, error) {
	if len(q.Elements) > MaxBatch || len(q.Tokens) > MaxBatch || len(q.Epoch) > 255 {
		return nil, fmt.Errorf("protocol: randomness batch of %d elements and %d tokens exceeds %d (or epoch name too long)", len(q.Elements), len(q.Tokens), MaxBatch)
	}
	size := 4 + len(q.Epoch) + protocol.ElementSize*len(q.Elements)
	for _, t := range q.Tokens {
		size += 2 + len(t)
	}
	w := protocol.Writer{B: make([]byte, 0, size+2)}
	w.U8(protocol.Version)
	w.Bytes8([]byte(q.Epoch))
	w.U16(uint16(len(q.Elements)))
	for _, e := range q.Elements {
		if len(e) != protocol.ElementSize {
			return nil, fmt.Errorf("protocol: element of %d bytes, want %d", len(e), protocol.ElementSize)
		}
		w.Raw(e)
	}
	if len(q.Tokens) > 0 {
		w.U16(uint16(len(q.Tokens)))
		for _, t := range q.Tokens {
			if len(t) == 0 || len(t) > MaxToken {
				return nil, fmt.Errorf("protocol: token of %d bytes, want 1..%d", len(t), MaxToken)
			}
			w.Bytes16(t)
		}
	}
	return w.B, nil
}

// ParseRandomnessRequest decodes a request, with or without its tokens
// section; errors wrap ErrMalformed (also for an empty tokens section or an
// empty token). Token bytes are not decoded here (token.ParseToken).
func ParseRandomnessRequest(b []byte) (*RandomnessRequest, error) {
	r := protocol.Reader{B: b}
	r.ReadVersion("randomness request")
	q := &RandomnessRequest{Epoch: string(r.Bytes8("epoch"))}
	n := int(r.U16("count"))
	if n > MaxBatch {
		return nil, protocol.Malformed("batch of %d exceeds %d", n, MaxBatch)
	}
	for i := 0; i < n && r.Err == nil; i++ {
		q.Elements = append(q.Elements, r.Take(protocol.ElementSize, "element"))
	}
	if r.Err == nil && len(r.B) > 0 { // the tokens section
		m := int(r.U16("token count"))
		if r.Err == nil && (m == 0 || m > MaxBatch) {
			return nil, protocol.Malformed("token section of %d tokens (want 1..%d; omit it when there are none)", m, MaxBatch)
		}
		for i := 0; i < m && r.Err == nil; i++ {
			t := r.Bytes16("token")
			if r.Err == nil && (len(t) == 0 || len(t) > MaxToken) {
				return nil, protocol.Malformed("token of %d bytes, want 1..%d", len(t), MaxToken)
			}
			q.Tokens = append(q.Tokens, t)
		}
	}
	if err := r.Done("randomness request"); err != nil {
		return nil, err
	}
	return q, nil
}

// RandomnessResponse carries the evaluated elements in request order with
// the batch's DLEQ proof (RFC 9497 §3.3.2), or a refusal (protocol.Refusal: Error
// says why; Closed, Expired, Future mark epoch refusals).
type RandomnessResponse struct {
	protocol.Refusal
	Elements [][]byte // 32 bytes each, in request order
	Proof    []byte   // ProofSize bytes (c ‖ s), one for the whole batch
}

// MarshalBinary encodes: version ‖ status (0 ok, 1 error, 2 epoch closed,
// 3 epoch expired, 4 epoch not started) ‖ (u16 count ‖ count×32 elements ‖
// proof[64] | u16 len ‖ message).
func (p *RandomnessResponse) MarshalBinary() ([]byte, error) {
	w := protocol.Writer{B: make([]byte, 0, 4+protocol.ElementSize*len(p.Elements)+ProofSize)}
	w.U8(protocol.Version)
	if protocol.WriteStatus(&w, p.Refusal) {
		return w.B, nil
	}
	if len(p.Elements) > MaxBatch {
		return nil, fmt.Errorf("protocol: randomness batch of %d exceeds %d", len(p.Elements), MaxBatch)
	}
	w.U16(uint16(len(p.Elements)))
	for _, e := range p.Elements {
		if len(e) != protocol.ElementSize {
			return nil, fmt.Errorf("protocol: element of %d bytes, want %d", len(e), protocol.ElementSize)
		}
		w.Raw(e)
	}
	if len(p.Proof) != ProofSize {
		return nil, fmt.Errorf("protocol: proof of %d bytes, want %d", len(p.Proof), ProofSize)
	}
	w.Raw(p.Proof)
	return w.B, nil
}

// ParseRandomnessResponse decodes a response; errors wrap ErrMalformed.
func ParseRandomnessResponse(b []byte) (*RandomnessResponse, error) {
	r := protocol.Reader{B: b}
	r.ReadVersion("randomness response")
	p := &RandomnessResponse{}
	ok, f := protocol.ReadStatus(&r)
	if ok {
		n := int(r.U16("count"))
		if n > MaxBatch {
			return nil, protocol.Malformed("batch of %d exceeds %d", n, MaxBatch)
		}
		for i := 0; i < n && r.Err == nil; i++ {
			p.Elements = append(p.Elements, r.Take(protocol.ElementSize, "element"))
		}
		p.Proof = r.Take(ProofSize, "proof")
	} else {
		p.Refusal = f
	}
	if err := r.Done("randomness response"); err != nil {
		return nil, err
	}
	return p, nil
}

// PublicKeyRequest asks the randomness service for an epoch's OPRF public
// key (published so clients can pin it and verify proofs against it).
type PublicKeyRequest struct {
	Epoch string
}

// MarshalBinary encodes: version ‖ u8 len epoch ‖ epoch.
func (q *PublicKeyRequest) MarshalBinary() ([]byte, error) {
	if len(q.Epoch) > 255 {
		return nil, fmt.Errorf("protocol: epoch name longer than 255 bytes")
	}
	w := protocol.Writer{}
	w.U8(protocol.Version)
	w.Bytes8([]byte(q.Epoch))
	return w.B, nil
}

// ParsePublicKeyRequest decodes a request; errors wrap ErrMalformed.
func ParsePublicKeyRequest(b []byte) (*PublicKeyRequest, error) {
	r := protocol.Reader{B: b}
	r.ReadVersion("public key request")
	q := &PublicKeyRequest{Epoch: string(r.Bytes8("epoch"))}
	if err := r.Done("public key request"); err != nil {
		return nil, err
	}
	return q, nil
}

// PublicKeyResponse is the randomness service's answer: the epoch it is for
// and its 32-byte OPRF public key (RFC 9497 §3.2 pkS = skS·G), or a refusal
// (same statuses as RandomnessResponse).
type PublicKeyResponse struct {
	protocol.Refusal
	Epoch string
	Key   []byte // PublicKeySize bytes
}

// MarshalBinary encodes: version ‖ status ‖ (u8 len epoch ‖ epoch ‖ key[32] |
// u16 len ‖ message).
func (p *PublicKeyResponse) MarshalBinary() ([]byte, error) {
	w := protocol.Writer{}
	w.U8(protocol.Version)
	if protocol.WriteStatus(&w, p.Refusal) {
		return w.B, nil
	}
	if len(p.Epoch) > 255 || len(p.Key) != PublicKeySize {
		return nil, fmt.Errorf("protocol: public key of %d bytes (want %d) or epoch name too long", len(p.Key), PublicKeySize)
	}
	w.Bytes8([]byte(p.Epoch))
	w.Raw(p.Key)
	return w.B, nil
}

// ParsePublicKeyResponse decodes a response; errors wrap ErrMalformed. The
// key bytes are not validated here: use ParseOPRFPublicKey.
func ParsePublicKeyResponse(b []byte) (*PublicKeyResponse, error) {
	r := protocol.Reader{B: b}
	r.ReadVersion("public key response")
	p := &PublicKeyResponse{}
	ok, f := protocol.ReadStatus(&r)
	if ok {
		p.Epoch = string(r.Bytes8("epoch"))
		p.Key = r.Take(PublicKeySize, "public key")
	} else {
		p.Refusal = f
	}
	if err := r.Done("public key response"); err != nil {
		return nil, err
	}
	return p, nil
}

// ParseOPRFPublicKey decodes a 32-byte OPRF public key. Errors wrap
// ErrMalformed for a bad encoding or the identity element.
func ParseOPRFPublicKey(b []byte) (*oprf.PublicKey, error) {
	if len(b) != PublicKeySize {
		return nil, protocol.Malformed("OPRF public key of %d bytes, want %d", len(b), PublicKeySize)
	}
	e := protocol.G.NewElement()
	if err := e.UnmarshalBinary(b); err != nil || e.IsIdentity() {
		return nil, protocol.Malformed("OPRF public key is not a valid ristretto255 element")
	}
	pk := new(oprf.PublicKey)
	if err := pk.UnmarshalBinary(OPRFSuite, b); err != nil {
		return nil, fmt.Errorf("%w: OPRF public key: %v", protocol.ErrMalformed, err)
	}
	return pk, nil
}

// Blinded is a client's state between Blind and Finalize for one batch.
type Blinded struct {
	pub     *oprf.PublicKey
	b       *dleq.Blinds
	blinded [][]byte // the request's elements, for the proof check
}

// Blind blinds OPRF inputs for one request (RFC 9497 §3.3.2 Blind, verifiable
// mode) against the epoch's public key pub. It returns the client's state
// and the request to send. Errors when pub is nil or an input is rejected.
// The blinds are secret and everything that touches them constant time
// (protocol/internal/dleq: gtank/ristretto255).
func Blind(pub *oprf.PublicKey, epoch string, inputs [][]byte) (*Blinded, *RandomnessRequest, error) {
	return blind(pub, epoch, inputs, nil)
}

// blind is Blind with the blinds given (32-byte scalars; nil = random),
// for test vectors.
func blind(pub *oprf.PublicKey, epoch string, inputs, blinds [][]byte) (*Blinded, *RandomnessRequest, error) {
	if pub == nil {
		return nil, nil, errors.New("protocol: blind needs the epoch's OPRF public key")
	}
	b, elems, err := dleq.Blind(inputs, blinds, rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("oprf blind: %w", err)
	}
	return &Blinded{pub: pub, b: b, blinded: elems}, &RandomnessRequest{Epoch: epoch, Elements: elems}, nil
}

// Finalize verifies the batch's DLEQ proof against the public key given to
// Blind and unblinds the response into one 64-byte ω per input (RFC 9497
// §3.3.2 Finalize; the proof check is RFC 9497 §2.2.2 VerifyProof, in
// variable time over its public inputs; the unblinding constant time, one
// batched inversion of the blinds: protocol/internal/dleq). Errors:
// the service's refusal (protocol.Refusal.Err: wrapping
// protocol.ErrEpochClosed, protocol.ErrEpochExpired or
// protocol.ErrEpochFuture), a wrong element count, invalid elements, or
// ErrProof when the proof does not verify — never unverified output.
func Finalize(b *Blinded, resp *RandomnessResponse) ([][]byte, error) {
	if err := resp.Refusal.Err(); err != nil {
		return nil, err
	}
	if len(resp.Elements) != len(b.blinded) || len(b.blinded) == 0 {
		return nil, fmt.Errorf("oprf finalize (answer does not match the request): %d elements for %d blinded: %w", len(resp.Elements), len(b.blinded), oprf.ErrInvalidInput)
	}
	pk, err := b.pub.MarshalBinary()
	if err != nil {
		return nil, err
	}
	out, err := b.b.VerifyFinalize(pk, resp.Elements, resp.Proof)
	switch {
	case errors.Is(err, dleq.ErrProof):
		return nil, ErrProof
	case err != nil:
		// an element that does not decode or is the identity, or a proof
		// of the wrong size or with a scalar at or above ℓ: nothing an
		// honest service sends
		return nil, fmt.Errorf("randomness service returned an invalid answer: %w (%v)", ErrProof, err)
	}
	return out, nil
}

// Evaluate evaluates a request under key and proves it (RFC 9497 §3.3.2
// BlindEvaluate with a batched DLEQ proof, §2.2.1 GenerateProof; the
// composite over the public blinded elements in variable time, everything
// that touches the key in constant time: protocol/internal/dleq). Errors
// when an element is not a valid ristretto255 encoding or is the identity
// (wrapping ErrMalformed).
func Evaluate(key *oprf.PrivateKey, q *RandomnessRequest) (*RandomnessResponse, error) {
	if len(q.Elements) == 0 {
		return nil, fmt.Errorf("%w: empty randomness batch", protocol.ErrMalformed)
	}
	kb, err := key.MarshalBinary()
	if err != nil {
		return nil, err
	}
	pk, err := key.Public().MarshalBinary()
	if err != nil {
		return nil, err
	}
	d, proof, err := dleq.Evaluate(kb, pk, q.Elements, rand.Reader)
	if ee := new(dleq.ElementError); errors.As(err, &ee) {
		return nil, fmt.Errorf("%w: element %d is not a non-identity ristretto255 encoding", protocol.ErrMalformed, ee.Index)
	}
	if err != nil {
		return nil, fmt.Errorf("oprf evaluate: %w", err)
	}
	return &RandomnessResponse{Elements: d, Proof: proof}, nil
}

// DeriveOPRFKey derives an epoch's OPRF key pair from a 32-byte seed
// (RFC 9497 §3.2.1 DeriveKeyPair in verifiable mode, info = "crowdlog-v1
// epoch " ‖ epoch). The randomness service no longer uses it (it stores a
// random key per epoch so that destroying the file destroys the key); it
// remains for test vectors and for reading keys of the older seed layout.
func DeriveOPRFKey(seed []byte, epoch string) (*oprf.PrivateKey, error) {
	return oprf.DeriveKey(OPRFSuite, OPRFMode, seed, []byte("crowdlog-v1 epoch "+epoch))
}
