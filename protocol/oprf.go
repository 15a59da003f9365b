package protocol

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cloudflare/circl/oprf"
	"github.com/cloudflare/circl/zk/dleq"
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
const PublicKeySize = elementSize

// ProofSize is the encoded size of a DLEQ proof (RFC 9497 §2.2: c ‖ s).
const ProofSize = 2 * ScalarSize

// ErrProof is wrapped by Finalize when the randomness service's DLEQ proof
// does not verify against the epoch's public key: the service evaluated
// under another key, or the answer was tampered with. Clients must stop;
// there is no fallback to unverified randomness.
var ErrProof = errors.New("randomness proof failed: the service did not evaluate under the epoch's pinned public key")

// ErrEpochClosed is wrapped when the randomness service refused an epoch
// because it is closed: its randomness is no longer given out (and its key
// is destroyed after a grace period, never regenerated).
var ErrEpochClosed = errors.New("epoch closed by the randomness service")

// ErrEpochExpired is wrapped when the randomness service refused an epoch of
// its schedule whose end plus grace period has passed: its key is destroyed.
// Reports for it would never be aggregated; seal under the current epoch.
var ErrEpochExpired = errors.New("epoch expired at the randomness service")

// ErrEpochFuture is wrapped when the randomness service refused an epoch of
// its schedule that has not started yet (beyond its clock-skew allowance):
// check the client's clock and epoch name.
var ErrEpochFuture = errors.New("epoch not started yet at the randomness service")

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
}

// MarshalBinary encodes: version ‖ u8 len epoch ‖ u16 count ‖ count×32 bytes.
func (q *RandomnessRequest) MarshalBinary() ([]byte, error) {
	if len(q.Elements) > MaxBatch || len(q.Epoch) > 255 {
		return nil, fmt.Errorf("protocol: randomness batch of %d exceeds %d (or epoch name too long)", len(q.Elements), MaxBatch)
	}
	w := writer{B: make([]byte, 0, 4+len(q.Epoch)+elementSize*len(q.Elements))}
	w.u8(Version)
	w.bytes8([]byte(q.Epoch))
	w.u16(uint16(len(q.Elements)))
	for _, e := range q.Elements {
		if len(e) != elementSize {
			return nil, fmt.Errorf("protocol: element of %d bytes, want %d", len(e), elementSize)
		}
		w.raw(e)
	}
	return w.B, nil
}

// ParseRandomnessRequest decodes a request; errors wrap ErrMalformed.
func ParseRandomnessRequest(b []byte) (*RandomnessRequest, error) {
	r := reader{B: b}
	r.version("randomness request")
	q := &RandomnessRequest{Epoch: string(r.bytes8("epoch"))}
	n := int(r.u16("count"))
	if n > MaxBatch {
		return nil, malformed("batch of %d exceeds %d", n, MaxBatch)
	}
	for i := 0; i < n && r.Err == nil; i++ {
		q.Elements = append(q.Elements, r.take(elementSize, "element"))
	}
	if err := r.done("randomness request"); err != nil {
		return nil, err
	}
	return q, nil
}

// Status bytes of RandomnessResponse and PublicKeyResponse.
const (
	statusOK      = 0
	statusError   = 1 // refused; a message follows
	statusClosed  = 2 // refused because the epoch is closed; a message follows
	statusExpired = 3 // refused because the scheduled epoch expired; a message follows
	statusFuture  = 4 // refused because the scheduled epoch has not started; a message follows
)

// maxErrorMessage bounds refusal messages on the wire, in bytes.
const maxErrorMessage = 1024

// Refusal is why the randomness service refused a request, shared by
// RandomnessResponse and PublicKeyResponse. The zero value is "not refused".
// At most one of Closed, Expired and Future is set; each needs no Error
// (a default message is sent), a plain refusal needs one.
type Refusal struct {
	Error   string // why; empty when not refused
	Closed  bool   // the epoch is closed (wire status 2, ErrEpochClosed)
	Expired bool   // the scheduled epoch's end plus grace passed (status 3, ErrEpochExpired)
	Future  bool   // the scheduled epoch has not started (status 4, ErrEpochFuture)
}

// Refused reports whether f is a refusal.
func (f Refusal) Refused() bool { return f.Error != "" || f.Closed || f.Expired || f.Future }

// Err returns the refusal as an error for the client: wrapping
// ErrEpochClosed, ErrEpochExpired or ErrEpochFuture for those statuses,
// plain for others, nil when not refused.
func (f Refusal) Err() error {
	var sentinel error
	switch {
	case f.Closed:
		sentinel = ErrEpochClosed
	case f.Expired:
		sentinel = ErrEpochExpired
	case f.Future:
		sentinel = ErrEpochFuture
	case f.Error != "":
		return fmt.Errorf("randomness service: %s", f.Error)
	default:
		return nil
	}
	// the service's message usually starts with the sentinel's text already
	msg := strings.TrimPrefix(f.Error, sentinel.Error()+": ")
	if msg == "" || msg == sentinel.Error() {
		return fmt.Errorf("randomness service: %w", sentinel)
	}
	return fmt.Errorf("randomness service: %w: %s", sentinel, msg)
}

// RefusalOf classifies a service-side error for the wire: errors wrapping
// ErrEpochClosed, ErrEpochExpired or ErrEpochFuture get their status, others
// a plain refusal. nil gives the zero Refusal.
func RefusalOf(err error) Refusal {
	if err == nil {
		return Refusal{}
	}
	return Refusal{Error: err.Error(), Closed: errors.Is(err, ErrEpochClosed),
		Expired: errors.Is(err, ErrEpochExpired), Future: errors.Is(err, ErrEpochFuture)}
}

// writeStatus writes the status byte and, for a refusal, its message; it
// reports whether f was a refusal.
func writeStatus(w *writer, f Refusal) bool {
	msg := f.Error
	switch {
	case f.Closed:
		w.u8(statusClosed)
		if msg == "" {
			msg = ErrEpochClosed.Error()
		}
	case f.Expired:
		w.u8(statusExpired)
		if msg == "" {
			msg = ErrEpochExpired.Error()
		}
	case f.Future:
		w.u8(statusFuture)
		if msg == "" {
			msg = ErrEpochFuture.Error()
		}
	case msg != "":
		w.u8(statusError)
	default:
		w.u8(statusOK)
		return false
	}
	if len(msg) > maxErrorMessage {
		msg = msg[:maxErrorMessage]
	}
	w.bytes16([]byte(msg))
	return true
}

// readStatus reads what writeStatus wrote: ok for statusOK, otherwise the
// refusal. Unknown statuses and empty messages set r.Err.
func readStatus(r *reader) (ok bool, f Refusal) {
	st := r.u8("status")
	if r.Err != nil {
		return false, f
	}
	switch st {
	case statusOK:
		return true, f
	case statusError, statusClosed, statusExpired, statusFuture:
		msg := string(r.bytes16("error"))
		if r.Err == nil && (msg == "" || len(msg) > maxErrorMessage) {
			r.Err = malformed("error message of %d bytes (want 1..%d)", len(msg), maxErrorMessage)
		}
		return false, Refusal{Error: msg, Closed: st == statusClosed, Expired: st == statusExpired, Future: st == statusFuture}
	}
	r.Err = malformed("unknown status %d", st)
	return false, f
}

// RandomnessResponse carries the evaluated elements in request order with
// the batch's DLEQ proof (RFC 9497 §3.3.2), or a refusal (Refusal: Error
// says why; Closed, Expired, Future mark epoch refusals).
type RandomnessResponse struct {
	Refusal
	Elements [][]byte // 32 bytes each, in request order
	Proof    []byte   // ProofSize bytes (c ‖ s), one for the whole batch
}

// MarshalBinary encodes: version ‖ status (0 ok, 1 error, 2 epoch closed,
// 3 epoch expired, 4 epoch not started) ‖ (u16 count ‖ count×32 elements ‖
// proof[64] | u16 len ‖ message).
func (p *RandomnessResponse) MarshalBinary() ([]byte, error) {
	w := writer{B: make([]byte, 0, 4+elementSize*len(p.Elements)+ProofSize)}
	w.u8(Version)
	if writeStatus(&w, p.Refusal) {
		return w.B, nil
	}
	if len(p.Elements) > MaxBatch {
		return nil, fmt.Errorf("protocol: randomness batch of %d exceeds %d", len(p.Elements), MaxBatch)
	}
	w.u16(uint16(len(p.Elements)))
	for _, e := range p.Elements {
		if len(e) != elementSize {
			return nil, fmt.Errorf("protocol: element of %d bytes, want %d", len(e), elementSize)
		}
		w.raw(e)
	}
	if len(p.Proof) != ProofSize {
		return nil, fmt.Errorf("protocol: proof of %d bytes, want %d", len(p.Proof), ProofSize)
	}
	w.raw(p.Proof)
	return w.B, nil
}

// ParseRandomnessResponse decodes a response; errors wrap ErrMalformed.
func ParseRandomnessResponse(b []byte) (*RandomnessResponse, error) {
	r := reader{B: b}
	r.version("randomness response")
	p := &RandomnessResponse{}
	ok, f := readStatus(&r)
	if ok {
		n := int(r.u16("count"))
		if n > MaxBatch {
			return nil, malformed("batch of %d exceeds %d", n, MaxBatch)
		}
		for i := 0; i < n && r.Err == nil; i++ {
			p.Elements = append(p.Elements, r.take(elementSize, "element"))
		}
		p.Proof = r.take(ProofSize, "proof")
	} else {
		p.Refusal = f
	}
	if err := r.done("randomness response"); err != nil {
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
	w := writer{}
	w.u8(Version)
	w.bytes8([]byte(q.Epoch))
	return w.B, nil
}

// ParsePublicKeyRequest decodes a request; errors wrap ErrMalformed.
func ParsePublicKeyRequest(b []byte) (*PublicKeyRequest, error) {
	r := reader{B: b}
	r.version("public key request")
	q := &PublicKeyRequest{Epoch: string(r.bytes8("epoch"))}
	if err := r.done("public key request"); err != nil {
		return nil, err
	}
	return q, nil
}

// PublicKeyResponse is the randomness service's answer: the epoch it is for
// and its 32-byte OPRF public key (RFC 9497 §3.2 pkS = skS·G), or a refusal
// (same statuses as RandomnessResponse).
type PublicKeyResponse struct {
	Refusal
	Epoch string
	Key   []byte // PublicKeySize bytes
}

// MarshalBinary encodes: version ‖ status ‖ (u8 len epoch ‖ epoch ‖ key[32] |
// u16 len ‖ message).
func (p *PublicKeyResponse) MarshalBinary() ([]byte, error) {
	w := writer{}
	w.u8(Version)
	if writeStatus(&w, p.Refusal) {
		return w.B, nil
	}
	if len(p.Epoch) > 255 || len(p.Key) != PublicKeySize {
		return nil, fmt.Errorf("protocol: public key of %d bytes (want %d) or epoch name too long", len(p.Key), PublicKeySize)
	}
	w.bytes8([]byte(p.Epoch))
	w.raw(p.Key)
	return w.B, nil
}

// ParsePublicKeyResponse decodes a response; errors wrap ErrMalformed. The
// key bytes are not validated here: use ParseOPRFPublicKey.
func ParsePublicKeyResponse(b []byte) (*PublicKeyResponse, error) {
	r := reader{B: b}
	r.version("public key response")
	p := &PublicKeyResponse{}
	ok, f := readStatus(&r)
	if ok {
		p.Epoch = string(r.bytes8("epoch"))
		p.Key = r.take(PublicKeySize, "public key")
	} else {
		p.Refusal = f
	}
	if err := r.done("public key response"); err != nil {
		return nil, err
	}
	return p, nil
}

// ParseOPRFPublicKey decodes a 32-byte OPRF public key. Errors wrap
// ErrMalformed for a bad encoding or the identity element.
func ParseOPRFPublicKey(b []byte) (*oprf.PublicKey, error) {
	if len(b) != PublicKeySize {
		return nil, malformed("OPRF public key of %d bytes, want %d", len(b), PublicKeySize)
	}
	e := G.NewElement()
	if err := e.UnmarshalBinary(b); err != nil || e.IsIdentity() {
		return nil, malformed("OPRF public key is not a valid ristretto255 element")
	}
	pk := new(oprf.PublicKey)
	if err := pk.UnmarshalBinary(OPRFSuite, b); err != nil {
		return nil, fmt.Errorf("%w: OPRF public key: %v", ErrMalformed, err)
	}
	return pk, nil
}

// Blinded is a client's state between Blind and Finalize for one batch.
type Blinded struct {
	pub *oprf.PublicKey
	fin *oprf.FinalizeData
}

// Blind blinds OPRF inputs for one request (RFC 9497 §3.3.2 Blind, verifiable
// mode) against the epoch's public key pub. It returns the client's state
// and the request to send. Errors when pub is nil or an input is rejected.
func Blind(pub *oprf.PublicKey, epoch string, inputs [][]byte) (*Blinded, *RandomnessRequest, error) {
	if pub == nil {
		return nil, nil, errors.New("protocol: blind needs the epoch's OPRF public key")
	}
	c := oprf.NewVerifiableClient(OPRFSuite, pub)
	fin, req, err := c.Blind(inputs)
	if err != nil {
		return nil, nil, fmt.Errorf("oprf blind: %w", err)
	}
	q := &RandomnessRequest{Epoch: epoch, Elements: make([][]byte, len(req.Elements))}
	for i, e := range req.Elements {
		if q.Elements[i], err = e.MarshalBinaryCompress(); err != nil {
			return nil, nil, err
		}
	}
	return &Blinded{pub: pub, fin: fin}, q, nil
}

// Finalize verifies the batch's DLEQ proof against the public key given to
// Blind and unblinds the response into one 64-byte ω per input (RFC 9497
// §3.3.2 Finalize). Errors: the service's refusal (Refusal.Err: wrapping
// ErrEpochClosed, ErrEpochExpired or ErrEpochFuture), a wrong element
// count, invalid elements, or ErrProof when the proof does not verify —
// never unverified output.
func Finalize(b *Blinded, resp *RandomnessResponse) ([][]byte, error) {
	if err := resp.Refusal.Err(); err != nil {
		return nil, err
	}
	ev := &oprf.Evaluation{Elements: make([]oprf.Evaluated, len(resp.Elements)), Proof: new(dleq.Proof)}
	for i, e := range resp.Elements {
		el := G.NewElement()
		if err := el.UnmarshalBinary(e); err != nil {
			return nil, fmt.Errorf("randomness service returned an invalid element: %w", err)
		}
		ev.Elements[i] = el
	}
	if err := ev.Proof.UnmarshalBinary(G, resp.Proof); err != nil {
		return nil, fmt.Errorf("%w (undecodable proof: %v)", ErrProof, err)
	}
	out, err := oprf.NewVerifiableClient(OPRFSuite, b.pub).Finalize(b.fin, ev)
	if errors.Is(err, oprf.ErrInvalidProof) {
		return nil, ErrProof
	}
	if err != nil {
		return nil, fmt.Errorf("oprf finalize (answer does not match the request): %w", err)
	}
	return out, nil
}

// Evaluate evaluates a request under key and proves it (RFC 9497 §3.3.2
// BlindEvaluate with a batched DLEQ proof). Errors when an element is not a
// valid ristretto255 encoding (wrapping ErrMalformed) or is the identity.
func Evaluate(key *oprf.PrivateKey, q *RandomnessRequest) (*RandomnessResponse, error) {
	if len(q.Elements) == 0 {
		return nil, fmt.Errorf("%w: empty randomness batch", ErrMalformed)
	}
	req := &oprf.EvaluationRequest{Elements: make([]oprf.Blinded, len(q.Elements))}
	for i, b := range q.Elements {
		e := G.NewElement()
		if err := e.UnmarshalBinary(b); err != nil || e.IsIdentity() {
			return nil, fmt.Errorf("%w: element %d is not a non-identity ristretto255 encoding", ErrMalformed, i)
		}
		req.Elements[i] = e
	}
	ev, err := oprf.NewVerifiableServer(OPRFSuite, key).Evaluate(req)
	if err != nil {
		return nil, err
	}
	resp := &RandomnessResponse{Elements: make([][]byte, len(ev.Elements))}
	for i, e := range ev.Elements {
		if resp.Elements[i], err = e.MarshalBinaryCompress(); err != nil {
			return nil, err
		}
	}
	if resp.Proof, err = ev.Proof.MarshalBinary(); err != nil {
		return nil, err
	}
	return resp, nil
}

// DeriveOPRFKey derives an epoch's OPRF key pair from a 32-byte seed
// (RFC 9497 §3.2.1 DeriveKeyPair in verifiable mode, info = "crowdlog-v1
// epoch " ‖ epoch). The randomness service no longer uses it (it stores a
// random key per epoch so that destroying the file destroys the key); it
// remains for test vectors and for reading keys of the older seed layout.
func DeriveOPRFKey(seed []byte, epoch string) (*oprf.PrivateKey, error) {
	return oprf.DeriveKey(OPRFSuite, OPRFMode, seed, []byte("crowdlog-v1 epoch "+epoch))
}
