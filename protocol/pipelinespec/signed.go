package pipelinespec

import (
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
)

// SignedDomain separates the aggregator operator's signatures over its
// pipeline announcements from every other signature of that key (the PDD
// recovery requests of aggregate-vectors).
const SignedDomain = "crowdlog pipeline announcement v1\x00"

// SignedVersion is the version byte of a SignedPipelines encoding; a
// parser refuses any other.
const SignedVersion byte = 1

// msgSignedPipelines is the type byte of a SignedPipelines encoding.
const msgSignedPipelines byte = 1

// MaxSignedPipelines bounds the definitions one signed announcement lists.
const MaxSignedPipelines = 64

// ErrSignature is wrapped by SignedPipelines.Verify when the signature does
// not verify under the pinned key.
var ErrSignature = errors.New("pipelinespec: pipeline announcement not signed by the pinned aggregator key")

// SignedPipelines is the signed part of an aggregator process's
// Announcement (Announcement.Signed): the process id and the canonical
// texts of the definitions it serves (none: every definition), signed with
// the aggregator operator's Ed25519 key (RFC 8032; keydir.AggregatorSignKey,
// the key aggregate-vectors already signs its PDD recovery requests with),
// so that a client that pins the public key knows the definitions are the
// operator's, whoever carried them over NATS.
//
// Encoding (docs/wire.md, "Signed pipeline announcement"):
//
//	version(1) = SignedVersion ‖ type(1) = 1 ‖ process(len8) ‖
//	n(u16) ‖ n × canonical text(len16) ‖ signature(64)
//
// integers big-endian, the signature over SignedDomain ‖ everything
// before it.
type SignedPipelines struct {
	Process   string
	Pipelines []string // canonical texts (Spec.Canonical)
	Specs     []Spec   // Pipelines parsed
	Sig       [ed25519.SignatureSize]byte
	body      []byte
}

// SignPipelines signs the canonical texts of specs, announced by process,
// with key and returns the encoding. Errors: no key, a process id over
// 255 bytes, more than MaxSignedPipelines definitions.
func SignPipelines(key ed25519.PrivateKey, process string, specs []Spec) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("pipelinespec: no aggregator signing key (crowdlog keys generate --role aggregator: " + "aggregator-sign.key)")
	}
	if len(process) > 255 {
		return nil, fmt.Errorf("pipelinespec: process id of %d bytes", len(process))
	}
	if len(specs) > MaxSignedPipelines {
		return nil, fmt.Errorf("pipelinespec: %d pipelines, at most %d", len(specs), MaxSignedPipelines)
	}
	b := []byte{SignedVersion, msgSignedPipelines, byte(len(process))}
	b = append(b, process...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(specs)))
	for _, s := range specs {
		c := s.Canonical()
		if len(c) > MaxCanonical {
			return nil, fmt.Errorf("pipelinespec: canonical text of %d bytes", len(c))
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(c)))
		b = append(b, c...)
	}
	sig := ed25519.Sign(key, append([]byte(SignedDomain), b...))
	return append(b, sig...), nil
}

// Verify checks the signature under pub (the pinned aggregator signing
// key); errors wrap ErrSignature.
func (a *SignedPipelines) Verify(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, append([]byte(SignedDomain), a.body...), a.Sig[:]) {
		return ErrSignature
	}
	return nil
}

// ParseSignedPipelines decodes a SignedPipelines encoding and parses each
// canonical text (the signature is not checked: Verify). Errors wrap
// ErrMalformed.
func ParseSignedPipelines(b []byte) (*SignedPipelines, error) {
	if len(b) > MaxAnnouncement {
		return nil, fmt.Errorf("%w: signed announcement of %d bytes", ErrMalformed, len(b))
	}
	r := b
	take := func(n int, what string) ([]byte, error) {
		if len(r) < n {
			return nil, fmt.Errorf("%w: signed announcement: %s truncated", ErrMalformed, what)
		}
		out := r[:n]
		r = r[n:]
		return out, nil
	}
	h, err := take(3, "header")
	if err != nil {
		return nil, err
	}
	if h[0] != SignedVersion {
		return nil, fmt.Errorf("%w: signed announcement version %d, want %d", ErrMalformed, h[0], SignedVersion)
	}
	if h[1] != msgSignedPipelines {
		return nil, fmt.Errorf("%w: signed announcement type %d, want %d", ErrMalformed, h[1], msgSignedPipelines)
	}
	a := &SignedPipelines{}
	p, err := take(int(h[2]), "process")
	if err != nil {
		return nil, err
	}
	a.Process = string(p)
	nb, err := take(2, "count")
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(nb))
	if n > MaxSignedPipelines {
		return nil, fmt.Errorf("%w: signed announcement of %d pipelines, at most %d", ErrMalformed, n, MaxSignedPipelines)
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
			return nil, fmt.Errorf("signed announcement pipeline %d: %w", i, err)
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
		return nil, fmt.Errorf("%w: signed announcement: %d trailing bytes", ErrMalformed, len(r))
	}
	return a, nil
}
