package pipelinespec

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// AnswerDomain separates the aggregator operator's signatures over its
// answers to one request (SignedAnswer) from its other signatures: the
// announcement signed once at start (SignedDomain) and the PDD recovery
// requests of aggregate-vectors.
const AnswerDomain = "crowdlog pipeline answer v2\x00"

// AnswerVersion is the version byte of a SignedAnswer encoding; a parser
// refuses any other.
const AnswerVersion byte = 2

// msgSignedAnswer is the type byte of a SignedAnswer encoding.
const msgSignedAnswer byte = 2

// NonceSize is the length of a Request.Nonce, in bytes: a client draws
// it at random for each request, so that an answer signed for one
// request verifies for no other (a challenge-response freshness check,
// as in RFC 6960 §4.4.1's nonce).
const NonceSize = 32

// MaxAnswerReasons bounds the refusal reasons one SignedAnswer counts.
const MaxAnswerReasons = 32

// maxReason bounds a refusal reason's name, in bytes.
const maxReason = 64

// SignedAnswer is an aggregator process's answer to one Request, signed
// with the aggregator operator's Ed25519 key (RFC 8032;
// keydir.AggregatorSignKey) over the request's Nonce: the process id and
// the canonical texts of the definitions it serves (none: every
// definition), as SignedPipelines has them, and the counts of the
// requested Context — so that a client that pins the key and drew the
// nonce knows that the definitions and the counts are the operator's,
// now, whoever carried them over NATS. A recorded answer replayed later
// carries another request's nonce (SignedPipelines, signed once per
// process, verifies forever).
//
// Encoding (docs/wire.md, "Signed pipeline answer"):
//
//	version(1) = AnswerVersion ‖ type(1) = 2 ‖ process(len8) ‖
//	nonce(len8) ‖ context(len16) ‖ flags(1) ‖ admitted(u64) ‖
//	m(u8) ‖ m × (reason(len8) ‖ count(u64)) ‖
//	n(u16) ‖ n × canonical text(len16) ‖ signature(64)
//
// integers big-endian, flags bit 0 = Withheld (the others 0), reasons
// non-empty, at most 64 bytes, in strictly increasing byte order,
// counts at most 2⁶³−1, the signature over AnswerDomain ‖ everything
// before it.
type SignedAnswer struct {
	Process   string
	Nonce     []byte   // the request's Nonce, echoed (empty: the request had none)
	Context   string   // the request's Context key ("" none)
	Withheld  bool     // Announcement.Withheld
	Counts    Counts   // the Context's counts (zero: none read, or withheld)
	Pipelines []string // canonical texts (Spec.Canonical)
	Specs     []Spec   // Pipelines parsed
	Sig       [ed25519.SignatureSize]byte
	body      []byte
}

// SignAnswer encodes a and signs it with key (a.Specs and a.Sig are not
// read; a.Pipelines are the texts). Errors: no key, a field over its
// bound (process 255 bytes, nonce NonceSize, context 65,535 bytes,
// MaxAnswerReasons reasons, MaxSignedPipelines definitions of at most
// MaxCanonical bytes), a negative count, an empty reason.
func SignAnswer(key ed25519.PrivateKey, a SignedAnswer) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("pipelinespec: no aggregator signing key (crowdlog keys generate --role aggregator: aggregator-sign.key)")
	}
	b, err := a.encode()
	if err != nil {
		return nil, err
	}
	sig := ed25519.Sign(key, append([]byte(AnswerDomain), b...))
	return append(b, sig...), nil
}

func (a *SignedAnswer) encode() ([]byte, error) {
	switch {
	case len(a.Process) > 255:
		return nil, fmt.Errorf("pipelinespec: process id of %d bytes", len(a.Process))
	case len(a.Nonce) > NonceSize:
		return nil, fmt.Errorf("pipelinespec: nonce of %d bytes, at most %d", len(a.Nonce), NonceSize)
	case len(a.Context) > math.MaxUint16:
		return nil, fmt.Errorf("pipelinespec: context of %d bytes", len(a.Context))
	case len(a.Counts.Refused) > MaxAnswerReasons:
		return nil, fmt.Errorf("pipelinespec: %d refusal reasons, at most %d", len(a.Counts.Refused), MaxAnswerReasons)
	case len(a.Pipelines) > MaxSignedPipelines:
		return nil, fmt.Errorf("pipelinespec: %d pipelines, at most %d", len(a.Pipelines), MaxSignedPipelines)
	case a.Counts.Admitted < 0:
		return nil, fmt.Errorf("pipelinespec: admitted count %d", a.Counts.Admitted)
	}
	b := []byte{AnswerVersion, msgSignedAnswer, byte(len(a.Process))}
	b = append(b, a.Process...)
	b = append(b, byte(len(a.Nonce)))
	b = append(b, a.Nonce...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(a.Context)))
	b = append(b, a.Context...)
	var flags byte
	if a.Withheld {
		flags |= 1
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(a.Counts.Admitted))
	reasons := make([]string, 0, len(a.Counts.Refused))
	for r := range a.Counts.Refused {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	b = append(b, byte(len(reasons)))
	for _, r := range reasons {
		n := a.Counts.Refused[r]
		if r == "" || len(r) > maxReason || n < 0 {
			return nil, fmt.Errorf("pipelinespec: refusal reason %q with count %d (a name of 1–%d bytes, a count ≥ 0)", r, n, maxReason)
		}
		b = append(b, byte(len(r)))
		b = append(b, r...)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(a.Pipelines)))
	for _, c := range a.Pipelines {
		if len(c) > MaxCanonical {
			return nil, fmt.Errorf("pipelinespec: canonical text of %d bytes", len(c))
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(c)))
		b = append(b, c...)
	}
	return b, nil
}

// Verify checks the signature under pub (the pinned aggregator signing
// key); errors wrap ErrSignature. It does not compare the nonce: the
// caller, who drew it, does.
func (a *SignedAnswer) Verify(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, append([]byte(AnswerDomain), a.body...), a.Sig[:]) {
		return ErrSignature
	}
	return nil
}

// Answers reports whether a answers the request with nonce and context
// key: the echoed nonce and context are those (constant time is not
// needed: both are public).
func (a *SignedAnswer) Answers(nonce []byte, context string) bool {
	return len(nonce) > 0 && bytes.Equal(a.Nonce, nonce) && a.Context == context
}

// ParseSignedAnswer decodes a SignedAnswer encoding (at most
// MaxAnnouncement bytes) and parses each canonical text strictly (the
// signature is not checked: Verify). Errors wrap ErrMalformed.
func ParseSignedAnswer(b []byte) (*SignedAnswer, error) {
	if len(b) > MaxAnnouncement {
		return nil, fmt.Errorf("%w: signed answer of %d bytes", ErrMalformed, len(b))
	}
	r := b
	take := func(n int, what string) ([]byte, error) {
		if len(r) < n {
			return nil, fmt.Errorf("%w: signed answer: %s truncated", ErrMalformed, what)
		}
		out := r[:n]
		r = r[n:]
		return out, nil
	}
	str8 := func(what string) ([]byte, error) {
		l, err := take(1, what+" length")
		if err != nil {
			return nil, err
		}
		return take(int(l[0]), what)
	}
	u64 := func(what string) (int64, error) {
		v, err := take(8, what)
		if err != nil {
			return 0, err
		}
		n := binary.BigEndian.Uint64(v)
		if n > math.MaxInt64 {
			return 0, fmt.Errorf("%w: signed answer: %s %d over 2^63-1", ErrMalformed, what, n)
		}
		return int64(n), nil
	}
	h, err := take(2, "header")
	if err != nil {
		return nil, err
	}
	if h[0] != AnswerVersion {
		return nil, fmt.Errorf("%w: signed answer version %d, want %d", ErrMalformed, h[0], AnswerVersion)
	}
	if h[1] != msgSignedAnswer {
		return nil, fmt.Errorf("%w: signed answer type %d, want %d", ErrMalformed, h[1], msgSignedAnswer)
	}
	a := &SignedAnswer{}
	p, err := str8("process")
	if err != nil {
		return nil, err
	}
	a.Process = string(p)
	nonce, err := str8("nonce")
	if err != nil {
		return nil, err
	}
	if len(nonce) > NonceSize {
		return nil, fmt.Errorf("%w: signed answer: nonce of %d bytes, at most %d", ErrMalformed, len(nonce), NonceSize)
	}
	a.Nonce = slices.Clone(nonce)
	cl, err := take(2, "context length")
	if err != nil {
		return nil, err
	}
	c, err := take(int(binary.BigEndian.Uint16(cl)), "context")
	if err != nil {
		return nil, err
	}
	a.Context = string(c)
	f, err := take(1, "flags")
	if err != nil {
		return nil, err
	}
	if f[0]&^1 != 0 {
		return nil, fmt.Errorf("%w: signed answer: unknown flags %#x", ErrMalformed, f[0])
	}
	a.Withheld = f[0]&1 != 0
	if a.Counts.Admitted, err = u64("admitted count"); err != nil {
		return nil, err
	}
	m, err := take(1, "reason count")
	if err != nil {
		return nil, err
	}
	if int(m[0]) > MaxAnswerReasons {
		return nil, fmt.Errorf("%w: signed answer of %d refusal reasons, at most %d", ErrMalformed, m[0], MaxAnswerReasons)
	}
	prev := ""
	for i := 0; i < int(m[0]); i++ {
		rb, err := str8("reason")
		if err != nil {
			return nil, err
		}
		reason := string(rb)
		if reason == "" || len(reason) > maxReason || (i > 0 && reason <= prev) {
			return nil, fmt.Errorf("%w: signed answer: refusal reason %d of %d bytes, not after the one before it (names of 1–%d bytes, strictly increasing)", ErrMalformed, i, len(reason), maxReason)
		}
		prev = reason
		n, err := u64("refused count")
		if err != nil {
			return nil, err
		}
		if a.Counts.Refused == nil {
			a.Counts.Refused = map[string]int64{}
		}
		a.Counts.Refused[reason] = n
	}
	nb, err := take(2, "pipeline count")
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(nb))
	if n > MaxSignedPipelines {
		return nil, fmt.Errorf("%w: signed answer of %d pipelines, at most %d", ErrMalformed, n, MaxSignedPipelines)
	}
	for i := 0; i < n; i++ {
		lb, err := take(2, "text length")
		if err != nil {
			return nil, err
		}
		t, err := take(int(binary.BigEndian.Uint16(lb)), "canonical text")
		if err != nil {
			return nil, err
		}
		s, err := Parse(string(t))
		if err != nil {
			return nil, fmt.Errorf("signed answer pipeline %d: %w", i, err)
		}
		a.Pipelines, a.Specs = append(a.Pipelines, string(t)), append(a.Specs, s)
	}
	a.body = b[:len(b)-len(r)]
	sig, err := take(ed25519.SignatureSize, "signature")
	if err != nil {
		return nil, err
	}
	copy(a.Sig[:], sig)
	if len(r) != 0 {
		return nil, fmt.Errorf("%w: signed answer: %d trailing bytes", ErrMalformed, len(r))
	}
	return a, nil
}
