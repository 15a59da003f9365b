package prio3

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
)

// msgSignedReq is the type byte of a SignedReq.
const msgSignedReq byte = 5

// SignedReqDomain is the domain label every leader-request signature
// starts with, so a signature made for another crowdlog message (or
// another protocol using the same key) never verifies here.
const SignedReqDomain = "crowdlog prio3 leader request v1\x00"

// SignedReqOverhead is the bytes a SignedReq adds to its body.
const SignedReqOverhead = 2 + 16 + 8 + 4 + ed25519.SignatureSize

// ErrBadSignature is wrapped by SignedReq.Verify when the signature does
// not verify under the key given.
var ErrBadSignature = errors.New("prio3: leader request signature does not verify")

// SignedReq is a leader request to the helper (an AggregateReq or a
// CollectReq, Body, unchanged) signed by the leader operator's Ed25519 key
// (RFC 8032): the helper verifies it before it changes any state, so a
// request that reached its subject from anyone else (a push consumer's
// deliver subject, another operator's credential) is refused. The
// signature covers SignedReqDomain ‖ id ‖ issued ‖ body; the body names
// the campaign and the day (the batch) and, for an AggregateReq, every
// report, so a signature binds the whole request. ID (random, one per
// send) and Issued (the leader's wall clock, Unix milliseconds) let the
// helper refuse a replay: one outside its clock window, or an id it has
// already seen.
type SignedReq struct {
	ID     [16]byte
	Issued time.Time // millisecond precision
	Body   []byte
	Sig    [ed25519.SignatureSize]byte
}

// SignReq signs body (a marshaled AggregateReq or CollectReq) with key at
// time now under a fresh random id, and returns the SignedReq's encoding.
func SignReq(key ed25519.PrivateKey, body []byte, now time.Time) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("prio3: no leader signing key (crowdlog keys generate --role prio3-leader)")
	}
	q := &SignedReq{Issued: time.UnixMilli(now.UnixMilli()), Body: body}
	if _, err := rand.Read(q.ID[:]); err != nil {
		return nil, err
	}
	copy(q.Sig[:], ed25519.Sign(key, q.signed()))
	return q.MarshalBinary()
}

// signed is the signature's input.
func (q *SignedReq) signed() []byte {
	w := protocol.Writer{B: make([]byte, 0, len(SignedReqDomain)+24+len(q.Body))}
	w.Raw([]byte(SignedReqDomain))
	w.Raw(q.ID[:])
	u64(&w, uint64(q.Issued.UnixMilli()))
	w.Raw(q.Body)
	return w.B
}

// Verify checks the signature under pub; errors wrap ErrBadSignature.
func (q *SignedReq) Verify(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, q.signed(), q.Sig[:]) {
		return ErrBadSignature
	}
	return nil
}

// Kind returns the type byte of the body (1: AggregateReq, 3:
// CollectReq; 0 when the body has no header).
func (q *SignedReq) Kind() byte {
	if len(q.Body) < 2 || q.Body[0] != WireVersion {
		return 0
	}
	return q.Body[1]
}

// MarshalBinary: version ‖ type 5 ‖ id(16) ‖ issued(u64, Unix ms) ‖
// body(len32) ‖ signature(64).
func (q *SignedReq) MarshalBinary() ([]byte, error) {
	w := protocol.Writer{B: make([]byte, 0, SignedReqOverhead+len(q.Body))}
	w.U8(WireVersion)
	w.U8(msgSignedReq)
	w.Raw(q.ID[:])
	u64(&w, uint64(q.Issued.UnixMilli()))
	w.Bytes32(q.Body)
	w.Raw(q.Sig[:])
	return w.B, nil
}

// IsSignedReq reports whether b starts like a SignedReq (version and
// type), before it is parsed.
func IsSignedReq(b []byte) bool {
	return len(b) >= 2 && b[0] == WireVersion && b[1] == msgSignedReq
}

// ParseSignedReq decodes a SignedReq (the signature is not checked:
// Verify). Errors wrap protocol.ErrMalformed.
func ParseSignedReq(b []byte) (*SignedReq, error) {
	if len(b) > MaxMessage+SignedReqOverhead {
		return nil, protocol.Malformed("prio3: signed request of %d bytes", len(b))
	}
	r := protocol.Reader{B: b}
	readVersion(&r, "prio3 signed request")
	if t := r.U8("prio3 signed request type"); r.Err == nil && t != msgSignedReq {
		r.Err = protocol.Malformed("prio3 signed request: message type %d, want %d (an unsigned request: is the leader older than this helper?)", t, msgSignedReq)
	}
	q := &SignedReq{}
	copy(q.ID[:], r.Take(16, "request id"))
	ms := readU64(&r, "issued")
	if r.Err == nil && ms > 1<<62 {
		r.Err = protocol.Malformed("prio3 signed request: issue time %d out of range", ms)
	}
	q.Issued = time.UnixMilli(int64(ms))
	q.Body = r.Bytes32("body")
	copy(q.Sig[:], r.Take(ed25519.SignatureSize, "signature"))
	if err := r.Done("prio3 signed request"); err != nil {
		return nil, err
	}
	return q, nil
}

// String names the request for logs (its kind and id, never its body).
func (q *SignedReq) String() string { return fmt.Sprintf("request %x (type %d)", q.ID[:4], q.Kind()) }
