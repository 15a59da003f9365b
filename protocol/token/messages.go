package token

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
)

// KindARC in an IssueRequest asks for an ARC credential
// (draft-ietf-privacypass-arc-protocol), one per identity and epoch. It is
// not a token kind: no token key exists for it (Kind.Valid is false).
const KindARC Kind = 3

// MaxBatch is the largest number of blinded elements in one IssueRequest.
const MaxBatch = 1024

// maxElement bounds an encoded element or ARC message in an issue message.
const (
	maxElement    = 255
	maxARCMessage = 16 << 10
)

// MaxClockSkew is how far an IssueRequest's timestamp may lie from the
// issuer's clock; the issuer refuses replays of a signed request within
// this window (and everything older as stale).
const MaxClockSkew = 5 * time.Minute

// issueRequestPurpose separates the signature of an IssueRequest from every
// other Ed25519 signature an identity key might make.
const issueRequestPurpose = "crowdlog-v1 issue request\x00"

// Refusal texts of the issuer; the client maps them back to errors with
// IssueResponse.Err.
var (
	// ErrNotEnrolled: the attester does not know the request's identity
	// (`crowdlog keys enroll` adds one to the default enrollment list).
	ErrNotEnrolled = errors.New("identity not enrolled")
	// ErrBudget: the identity has used its budget for this epoch and kind;
	// the refusal names the epoch, the kind and the budget.
	ErrBudget = errors.New("over budget")
	// ErrBadSignature: the request's signature does not verify under its
	// identity key.
	ErrBadSignature = errors.New("bad request signature")
	// ErrStale: the request's timestamp is more than MaxClockSkew from the
	// issuer's clock (check the client's clock).
	ErrStale = errors.New("stale request")
	// ErrReplay: the issuer already answered this signed request.
	ErrReplay = errors.New("replayed request")
	// ErrUnavailable: the issuer could not reach its counter store (the
	// JetStream counters bucket did not answer, or its compare-and-set
	// kept losing) and counted nothing for this request: send the same
	// request again later, signed with a fresh timestamp.
	ErrUnavailable = errors.New("issuer temporarily unavailable")
)

// BudgetError is the issuer's refusal of a request that would exceed an
// identity's budget: "over budget: epoch E allows N <kind> tokens per
// identity, M already issued".
func BudgetError(epoch string, kind Kind, limit, used int) error {
	what := kind.String() + " tokens"
	if kind == KindARC {
		what = "ARC credentials"
	}
	return fmt.Errorf("%w: epoch %s allows %d %s per identity, %d already issued", ErrBudget, epoch, limit, what, used)
}

// IssueRequest asks the issuer (protocol.IssuerSubject) for tokens of Kind
// for Epoch, or (KindARC) for an ARC credential. It is signed by the
// client's Ed25519 identity key, which the issuer's attester checks (RFC
// 9576 §3.2: the attester authenticates the client; the issuer sees only
// blinded elements, RFC 9578 §5.1).
type IssueRequest struct {
	Kind      Kind
	Epoch     string
	Timestamp time.Time         // when signed; the issuer allows ±MaxClockSkew (millisecond precision on the wire)
	Identity  ed25519.PublicKey // 32 bytes
	Blinded   [][]byte          // token kinds: the blinded elements, 1..MaxBatch
	ARC       []byte            // KindARC: an encoded arc.CredentialRequest
	Signature []byte            // Ed25519 over "crowdlog-v1 issue request\0" ‖ the encoding before it
}

// body encodes the request without its signature:
//
//	version ‖ u8 kind ‖ u8 len epoch ‖ epoch ‖ u64 unix ms ‖ identity[32] ‖
//	token kinds: u16 count ‖ count × (u8 len ‖ element)
//	KindARC:     u16 len ‖ credential request
func (q *IssueRequest) body() ([]byte, error) {
	if len(q.Epoch) == 0 || len(q.Epoch) > 255 {
		return nil, fmt.Errorf("token: epoch name of %d bytes, want 1..255", len(q.Epoch))
	}
	if len(q.Identity) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("token: identity of %d bytes, want %d", len(q.Identity), ed25519.PublicKeySize)
	}
	w := protocol.Writer{}
	w.U8(protocol.Version)
	w.U8(byte(q.Kind))
	w.Bytes8([]byte(q.Epoch))
	ms := uint64(q.Timestamp.UnixMilli())
	w.U32(uint32(ms >> 32))
	w.U32(uint32(ms))
	w.Raw(q.Identity)
	switch {
	case q.Kind.Valid():
		if len(q.Blinded) == 0 || len(q.Blinded) > MaxBatch || q.ARC != nil {
			return nil, fmt.Errorf("token: %d blinded elements, want 1..%d (and no ARC request)", len(q.Blinded), MaxBatch)
		}
		w.U16(uint16(len(q.Blinded)))
		for _, e := range q.Blinded {
			if len(e) == 0 || len(e) > maxElement {
				return nil, fmt.Errorf("token: blinded element of %d bytes", len(e))
			}
			w.Bytes8(e)
		}
	case q.Kind == KindARC:
		if len(q.ARC) == 0 || len(q.ARC) > maxARCMessage || q.Blinded != nil {
			return nil, fmt.Errorf("token: ARC request of %d bytes, want 1..%d (and no blinded elements)", len(q.ARC), maxARCMessage)
		}
		w.Bytes16(q.ARC)
	default:
		return nil, fmt.Errorf("token: unknown kind %d", q.Kind)
	}
	return w.B, nil
}

func signedIssueBytes(body []byte) []byte {
	return append([]byte(issueRequestPurpose), body...)
}

// Sign sets Identity to priv's public key and Signature over the request.
func (q *IssueRequest) Sign(priv ed25519.PrivateKey) error {
	q.Identity = priv.Public().(ed25519.PublicKey)
	b, err := q.body()
	if err != nil {
		return err
	}
	q.Signature = ed25519.Sign(priv, signedIssueBytes(b))
	return nil
}

// VerifySignature checks Signature under Identity; errors wrap
// ErrBadSignature.
func (q *IssueRequest) VerifySignature() error {
	b, err := q.body()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	if len(q.Signature) != ed25519.SignatureSize || !ed25519.Verify(q.Identity, signedIssueBytes(b), q.Signature) {
		return ErrBadSignature
	}
	return nil
}

// ReplayID identifies a signed request for the issuer's replay check:
// SHA-256 of the signed bytes and the signature.
func (q *IssueRequest) ReplayID() [32]byte {
	b, _ := q.body()
	h := sha256.New()
	h.Write(signedIssueBytes(b))
	h.Write(q.Signature)
	var id [32]byte
	h.Sum(id[:0])
	return id
}

// ContentID identifies what a request asks for, independent of when it
// was signed: SHA-256("crowdlog-v1 issue content\0" ‖ u8 kind ‖ u8 len
// epoch ‖ epoch ‖ token kinds: u16 count ‖ count × (u8 len ‖ element);
// KindARC: u16 len ‖ credential request), 32 bytes. A client that sends
// the same blinded elements (or ARC request) again with a fresh timestamp
// and signature — a retry after an answer that did not come — sends the
// same ContentID; the issuer answers it again without counting it twice
// (package issuer). Identical content has identical evaluations (RFC
// 9578 §5: the VOPRF evaluation is a function of the key and the
// element), so a retry gives the client nothing it was not already given.
// The zero ID on fields out of range.
func (q *IssueRequest) ContentID() [32]byte {
	w := protocol.Writer{}
	w.U8(byte(q.Kind))
	w.Bytes8([]byte(q.Epoch))
	switch {
	case q.Kind.Valid():
		w.U16(uint16(len(q.Blinded)))
		for _, e := range q.Blinded {
			w.Bytes8(e)
		}
	case q.Kind == KindARC:
		w.Bytes16(q.ARC)
	}
	if _, err := q.body(); err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(append([]byte(issueContentPurpose), w.B...))
}

// issueContentPurpose separates ContentID from every other SHA-256 of the
// protocol.
const issueContentPurpose = "crowdlog-v1 issue content\x00"

// MarshalBinary encodes the request: body ‖ signature[64]. It fails on an
// unsigned request or fields out of range.
func (q *IssueRequest) MarshalBinary() ([]byte, error) {
	b, err := q.body()
	if err != nil {
		return nil, err
	}
	if len(q.Signature) != ed25519.SignatureSize {
		return nil, errors.New("token: issue request not signed")
	}
	return append(b, q.Signature...), nil
}

// ParseIssueRequest decodes a request (it does not check the signature);
// errors wrap protocol.ErrMalformed.
func ParseIssueRequest(b []byte) (*IssueRequest, error) {
	r := protocol.Reader{B: b}
	r.ReadVersion("issue request")
	q := &IssueRequest{Kind: Kind(r.U8("kind")), Epoch: string(r.Bytes8("epoch"))}
	hi, lo := r.U32("timestamp"), r.U32("timestamp")
	q.Timestamp = time.UnixMilli(int64(uint64(hi)<<32 | uint64(lo)))
	q.Identity = ed25519.PublicKey(r.Take(ed25519.PublicKeySize, "identity"))
	switch {
	case r.Err != nil:
	case q.Epoch == "":
		return nil, protocol.Malformed("issue request without epoch")
	case q.Kind.Valid():
		n := int(r.U16("count"))
		if r.Err == nil && (n == 0 || n > MaxBatch) {
			return nil, protocol.Malformed("issue request of %d elements, want 1..%d", n, MaxBatch)
		}
		q.Blinded = make([][]byte, 0, min(n, len(r.B)))
		for i := 0; i < n && r.Err == nil; i++ {
			e := r.Bytes8("blinded element")
			if r.Err == nil && len(e) == 0 {
				return nil, protocol.Malformed("empty blinded element")
			}
			q.Blinded = append(q.Blinded, e)
		}
	case q.Kind == KindARC:
		q.ARC = r.Bytes16("ARC request")
		if r.Err == nil && len(q.ARC) == 0 {
			return nil, protocol.Malformed("empty ARC request")
		}
	default:
		return nil, protocol.Malformed("issue request of unknown kind %d", q.Kind)
	}
	q.Signature = r.Take(ed25519.SignatureSize, "signature")
	if err := r.Done("issue request"); err != nil {
		return nil, err
	}
	return q, nil
}

// IssueResponse is the issuer's answer: a refusal, or the evaluated
// elements and the batch's one DLEQ proof (token kinds, RFC 9578 §5.2), or
// an encoded arc.CredentialResponse (KindARC). Used and Limit are the
// identity's count for (epoch, kind) after this issuance and its budget.
type IssueResponse struct {
	protocol.Refusal
	Kind      Kind
	Evaluated [][]byte
	Proof     []byte
	ARC       []byte
	Used      uint32
	Limit     uint32
}

// MarshalBinary encodes: version ‖ status (‖ message) and, when not
// refused, u8 kind ‖ u32 used ‖ u32 limit ‖
// token kinds: u16 count ‖ count × (u8 len ‖ element) ‖ u8 len ‖ proof;
// KindARC: u16 len ‖ credential response.
func (p *IssueResponse) MarshalBinary() ([]byte, error) {
	w := protocol.Writer{}
	w.U8(protocol.Version)
	if protocol.WriteStatus(&w, p.Refusal) {
		return w.B, nil
	}
	w.U8(byte(p.Kind))
	w.U32(p.Used)
	w.U32(p.Limit)
	switch {
	case p.Kind.Valid():
		if len(p.Evaluated) == 0 || len(p.Evaluated) > MaxBatch || len(p.Proof) == 0 || len(p.Proof) > maxElement {
			return nil, fmt.Errorf("token: response of %d elements and a %d-byte proof", len(p.Evaluated), len(p.Proof))
		}
		w.U16(uint16(len(p.Evaluated)))
		for _, e := range p.Evaluated {
			if len(e) == 0 || len(e) > maxElement {
				return nil, fmt.Errorf("token: evaluated element of %d bytes", len(e))
			}
			w.Bytes8(e)
		}
		w.Bytes8(p.Proof)
	case p.Kind == KindARC:
		if len(p.ARC) == 0 || len(p.ARC) > maxARCMessage {
			return nil, fmt.Errorf("token: ARC response of %d bytes", len(p.ARC))
		}
		w.Bytes16(p.ARC)
	default:
		return nil, fmt.Errorf("token: unknown kind %d", p.Kind)
	}
	return w.B, nil
}

// ParseIssueResponse decodes a response; errors wrap protocol.ErrMalformed.
func ParseIssueResponse(b []byte) (*IssueResponse, error) {
	r := protocol.Reader{B: b}
	r.ReadVersion("issue response")
	ok, f := protocol.ReadStatus(&r)
	p := &IssueResponse{Refusal: f}
	if r.Err != nil {
		return nil, r.Err
	}
	if !ok {
		if err := r.Done("issue response"); err != nil {
			return nil, err
		}
		return p, nil
	}
	p.Kind = Kind(r.U8("kind"))
	p.Used = r.U32("used")
	p.Limit = r.U32("limit")
	switch {
	case r.Err != nil:
	case p.Kind.Valid():
		n := int(r.U16("count"))
		if r.Err == nil && (n == 0 || n > MaxBatch) {
			return nil, protocol.Malformed("issue response of %d elements, want 1..%d", n, MaxBatch)
		}
		p.Evaluated = make([][]byte, 0, min(n, len(r.B)))
		for i := 0; i < n && r.Err == nil; i++ {
			e := r.Bytes8("evaluated element")
			if r.Err == nil && len(e) == 0 {
				return nil, protocol.Malformed("empty evaluated element")
			}
			p.Evaluated = append(p.Evaluated, e)
		}
		p.Proof = r.Bytes8("proof")
		if r.Err == nil && len(p.Proof) == 0 {
			return nil, protocol.Malformed("empty proof")
		}
	case p.Kind == KindARC:
		p.ARC = r.Bytes16("ARC response")
		if r.Err == nil && len(p.ARC) == 0 {
			return nil, protocol.Malformed("empty ARC response")
		}
	default:
		return nil, protocol.Malformed("issue response of unknown kind %d", p.Kind)
	}
	if err := r.Done("issue response"); err != nil {
		return nil, err
	}
	return p, nil
}

// refusalSentinels map refusal texts back to errors on the client.
var refusalSentinels = []error{ErrNotEnrolled, ErrBudget, ErrBadSignature, ErrStale, ErrReplay, ErrUnavailable}

// Err is the refusal as a client error: "issuer: <message>", wrapping
// ErrNotEnrolled, ErrBudget, ErrBadSignature, ErrStale, ErrReplay or
// ErrUnavailable when
// the message starts with one of them; nil when not refused.
func (p *IssueResponse) Err() error { return IssuerRefusalErr(p.Refusal) }

// IssuerRefusalErr is IssueResponse.Err for any refusal of the issuer.
func IssuerRefusalErr(f protocol.Refusal) error {
	if !f.Refused() {
		return nil
	}
	for _, s := range refusalSentinels {
		if rest, ok := strings.CutPrefix(f.Error, s.Error()); ok {
			return fmt.Errorf("issuer: %w%s", s, rest)
		}
	}
	return fmt.Errorf("issuer: %s", f.Error)
}

// KeysRequest asks the issuer (protocol.IssuerPublicKeySubject) for its
// public keys of Epoch.
type KeysRequest struct {
	Epoch string
}

// MarshalBinary encodes: version ‖ u8 len epoch ‖ epoch.
func (q *KeysRequest) MarshalBinary() ([]byte, error) {
	if len(q.Epoch) == 0 || len(q.Epoch) > 255 {
		return nil, fmt.Errorf("token: epoch name of %d bytes, want 1..255", len(q.Epoch))
	}
	w := protocol.Writer{}
	w.U8(protocol.Version)
	w.Bytes8([]byte(q.Epoch))
	return w.B, nil
}

// ParseKeysRequest decodes a KeysRequest; errors wrap protocol.ErrMalformed.
func ParseKeysRequest(b []byte) (*KeysRequest, error) {
	r := protocol.Reader{B: b}
	r.ReadVersion("issuer keys request")
	q := &KeysRequest{Epoch: string(r.Bytes8("epoch"))}
	if err := r.Done("issuer keys request"); err != nil {
		return nil, err
	}
	if q.Epoch == "" {
		return nil, protocol.Malformed("issuer keys request without epoch")
	}
	return q, nil
}

// KeysResponse carries the issuer's public keys of Epoch: the token keys
// (PrivateKey.Public) of the kinds it issues and the encoded ARC public key
// (empty when it issues no ARC credentials), or a refusal. A single issuer
// sets both token keys; with key custody split by verifier the aggregator's
// operator's issuer leaves Randomness empty and the randomness operator's
// (protocol.IssuerRandomnessPublicKeySubject) sets only Randomness. At
// least one token key is set.
type KeysResponse struct {
	protocol.Refusal
	Epoch      string
	Randomness []byte
	Report     []byte
	ARC        []byte
	// Prio3Helper is the KindPrio3Helper token key of Epoch (a
	// Prio3Epoch), set by the Prio3 helper operator's issuer only.
	Prio3Helper []byte
	// Prio3Leader is the KindPrio3Leader token key of Epoch, set by the
	// Prio3 leader operator's issuer only.
	Prio3Leader []byte
}

// MarshalBinary encodes: version ‖ status (‖ message) and, when not
// refused, u8 len epoch ‖ epoch ‖ u8 len ‖ randomness key ‖ u8 len ‖
// report key ‖ u16 len ‖ ARC key [‖ u8 len ‖ prio3-helper key, only when
// either Prio3 key is set [‖ u8 len ‖ prio3-leader key, only when set]].
func (p *KeysResponse) MarshalBinary() ([]byte, error) {
	w := protocol.Writer{}
	w.U8(protocol.Version)
	if protocol.WriteStatus(&w, p.Refusal) {
		return w.B, nil
	}
	if len(p.Epoch) == 0 || len(p.Epoch) > 255 || len(p.Randomness)+len(p.Report)+len(p.Prio3Helper)+len(p.Prio3Leader) == 0 || len(p.Randomness) > maxElement ||
		len(p.Report) > maxElement || len(p.ARC) > maxARCMessage || len(p.Prio3Helper) > maxElement || len(p.Prio3Leader) > maxElement {
		return nil, errors.New("token: issuer keys response fields out of range")
	}
	w.Bytes8([]byte(p.Epoch))
	w.Bytes8(p.Randomness)
	w.Bytes8(p.Report)
	w.Bytes16(p.ARC)
	if len(p.Prio3Helper)+len(p.Prio3Leader) > 0 {
		w.Bytes8(p.Prio3Helper)
	}
	if len(p.Prio3Leader) > 0 {
		w.Bytes8(p.Prio3Leader)
	}
	return w.B, nil
}

// ParseKeysResponse decodes a KeysResponse; errors wrap
// protocol.ErrMalformed.
func ParseKeysResponse(b []byte) (*KeysResponse, error) {
	r := protocol.Reader{B: b}
	r.ReadVersion("issuer keys response")
	ok, f := protocol.ReadStatus(&r)
	p := &KeysResponse{Refusal: f}
	if ok {
		p.Epoch = string(r.Bytes8("epoch"))
		p.Randomness = r.Bytes8("randomness key")
		p.Report = r.Bytes8("report key")
		p.ARC = r.Bytes16("ARC key")
		if r.Err == nil && len(r.B) > 0 {
			// the optional trailing prio3-helper key, then the optional
			// prio3-leader key (never empty when present); the helper key
			// is empty only when a leader key follows
			p.Prio3Helper = r.Bytes8("prio3-helper key")
			if r.Err == nil && len(r.B) > 0 {
				if p.Prio3Leader = r.Bytes8("prio3-leader key"); r.Err == nil && len(p.Prio3Leader) == 0 {
					return nil, protocol.Malformed("issuer keys response with an empty prio3-leader key")
				}
			}
			if r.Err == nil && len(p.Prio3Helper)+len(p.Prio3Leader) == 0 {
				return nil, protocol.Malformed("issuer keys response with an empty prio3-helper key")
			}
			if len(p.Prio3Helper) == 0 {
				p.Prio3Helper = nil
			}
		}
		if r.Err == nil && (p.Epoch == "" || len(p.Randomness)+len(p.Report)+len(p.Prio3Helper)+len(p.Prio3Leader) == 0) {
			return nil, protocol.Malformed("issuer keys response with empty fields")
		}
	}
	if err := r.Done("issuer keys response"); err != nil {
		return nil, err
	}
	return p, nil
}

// Key returns the public key of kind (KindRandomness, KindReport,
// KindPrio3Helper or KindPrio3Leader).
func (p *KeysResponse) Key(kind Kind) ([]byte, error) {
	switch kind {
	case KindRandomness:
		return p.Randomness, nil
	case KindReport:
		return p.Report, nil
	case KindPrio3Helper:
		return p.Prio3Helper, nil
	case KindPrio3Leader:
		return p.Prio3Leader, nil
	}
	return nil, fmt.Errorf("token: no public key of kind %s", kind)
}
