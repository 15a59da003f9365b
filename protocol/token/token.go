package token

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cloudflare/circl/group"
	"github.com/cloudflare/circl/oprf"
	circldleq "github.com/cloudflare/circl/zk/dleq"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/internal/dleq"
)

// Kind is what a token pays for. Each kind has its own issuer key per epoch
// (the randomness service holds only the randomness key, the aggregator only
// the report key) and its own TokenChallenge (origin_info = the kind's name).
type Kind byte

const (
	// KindRandomness pays for one OPRF element at the randomness service.
	KindRandomness Kind = 1
	// KindReport pays for one report at the aggregator; its nonce is
	// ReportNonce of the report.
	KindReport Kind = 2
	// KindPrio3Helper is the Prio3 helper's report credential: one per
	// enrolled identity per campaign-day, issued by the helper's operator
	// and verified and spent by the helper, so the leader can mint none
	// (after draft-cpriebe-ppm-dap-reportauth: one token per aggregator).
	// Its epoch is Prio3Epoch(campaign, day), its key
	// DeriveKey(KindPrio3Helper, epoch, seed) and its nonce Prio3Nonce.
	KindPrio3Helper Kind = 4
	// KindPrio3Leader is the Prio3 leader's report credential, the
	// counterpart of KindPrio3Helper at the other aggregator: one per
	// enrolled identity per campaign-day, issued by the leader's operator
	// and verified and spent by the leader, so the helper's operator can
	// mint none. Same epoch (Prio3Epoch) and nonce (Prio3Nonce) as the
	// helper token of the report; key DeriveKey(KindPrio3Leader, epoch,
	// seed) from the leader operator's own seed.
	KindPrio3Leader Kind = 5
)

// String is the kind's name, also the TokenChallenge's origin_info.
func (k Kind) String() string {
	switch k {
	case KindRandomness:
		return "randomness"
	case KindReport:
		return "report"
	case KindARC:
		return "arc"
	case KindPrio3Helper:
		return "prio3-helper"
	case KindPrio3Leader:
		return "prio3-leader"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	return k == KindRandomness || k == KindReport || k == KindPrio3Helper || k == KindPrio3Leader
}

// Token types (RFC 9578 §8.2 registry; RFC 9577 §2.2 Token.token_type).
const (
	// TypeRistretto is crowdlog's private token type: RFC 9578 §5 with
	// VOPRF(ristretto255, SHA-512) (RFC 9497 §4.1) in place of P-384:
	// Ne = Ns = 32, Nk = 64. The value lies in no registered range; tokens
	// of this type never leave a crowdlog deployment.
	TypeRistretto uint16 = 0xC1D0
	// TypeP384 is RFC 9578's registered type 0x0001, VOPRF(P-384,
	// SHA-384), Ne = 49, Ns = 48, Nk = 48. crowdlog does not issue it; the
	// same code runs it to check itself against RFC 9578 Appendix A.1.
	TypeP384 uint16 = 0x0001
)

// IssuerName is the TokenChallenge's issuer_name (RFC 9577 §2.1).
const IssuerName = "crowdlog-issuer"

// ReportNonceLabel prefixes the report bytes hashed into a report token's
// nonce.
const ReportNonceLabel = "crowdlog-v1 report token"

// ErrInvalidToken is wrapped by Verify: the token is not of this key's type,
// kind, epoch or key, or its authenticator is wrong (forged or altered).
var ErrInvalidToken = errors.New("token: invalid token")

// suite is one VOPRF instantiation of RFC 9578 §5.
type suite struct {
	typ    uint16
	oprf   oprf.Suite
	g      group.Group
	ne, ns int // element and scalar sizes (RFC 9497 §4)
	nk     int // authenticator size = Nh
}

var (
	suiteRistretto = &suite{typ: TypeRistretto, oprf: oprf.SuiteRistretto255, g: group.Ristretto255, ne: 32, ns: 32, nk: 64}
	suiteP384      = &suite{typ: TypeP384, oprf: oprf.SuiteP384, g: group.P384, ne: 49, ns: 48, nk: 48}
)

func suiteOf(typ uint16) (*suite, error) {
	switch typ {
	case TypeRistretto:
		return suiteRistretto, nil
	case TypeP384:
		return suiteP384, nil
	}
	return nil, fmt.Errorf("unknown token type 0x%04x", typ)
}

// suiteOfPublic picks the suite from an encoded public key's size.
func suiteOfPublic(public []byte) (*suite, error) {
	switch len(public) {
	case suiteRistretto.ne:
		return suiteRistretto, nil
	case suiteP384.ne:
		return suiteP384, nil
	}
	return nil, fmt.Errorf("token: public key of %d bytes, want %d (ristretto255)", len(public), suiteRistretto.ne)
}

// tokenSize is the encoded size of a token of suite s:
// 2 + 32 + 32 + 32 + Nk (RFC 9577 §2.2).
func (s *suite) tokenSize() int { return 2 + 3*32 + s.nk }

// Token is a Privacy Pass token (RFC 9577 §2.2, RFC 9578 §5.3):
// token_type ‖ nonce[32] ‖ challenge_digest[32] ‖ token_key_id[32] ‖
// authenticator[Nk]. It carries no issuer signature anyone but the key's
// holder can check (privately verifiable), and nothing that links it to its
// issuance (the issuer saw only a blinded element).
type Token struct {
	Type            uint16
	Nonce           [32]byte // chosen by the client: random, or ReportNonce
	ChallengeDigest [32]byte // SHA-256 of the TokenChallenge of (type, kind, epoch)
	KeyID           [32]byte // SHA-256 of the issuer public key's encoding
	Authenticator   []byte   // the VOPRF output, Nk bytes (64 for TypeRistretto)
}

// input is token_authenticator_input (RFC 9578 §5.4): the token without
// its authenticator.
func (t *Token) input() []byte {
	b := make([]byte, 0, 2+3*32)
	b = append(b, byte(t.Type>>8), byte(t.Type))
	b = append(b, t.Nonce[:]...)
	b = append(b, t.ChallengeDigest[:]...)
	return append(b, t.KeyID[:]...)
}

// MarshalBinary encodes the token (RFC 9577 §2.2): 162 bytes for
// TypeRistretto, 146 for TypeP384. It fails on an unknown type or an
// authenticator of the wrong size.
func (t *Token) MarshalBinary() ([]byte, error) {
	s, err := suiteOf(t.Type)
	if err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	if len(t.Authenticator) != s.nk {
		return nil, fmt.Errorf("token: authenticator of %d bytes, want %d", len(t.Authenticator), s.nk)
	}
	return append(t.input(), t.Authenticator...), nil
}

// ParseToken decodes a token of a known type (TypeRistretto or TypeP384);
// errors wrap protocol.ErrMalformed.
func ParseToken(b []byte) (*Token, error) {
	r := protocol.Reader{B: b}
	t := &Token{Type: r.U16("token type")}
	if r.Err != nil {
		return nil, r.Err
	}
	s, err := suiteOf(t.Type)
	if err != nil {
		return nil, protocol.Malformed("%v", err)
	}
	copy(t.Nonce[:], r.Take(32, "token nonce"))
	copy(t.ChallengeDigest[:], r.Take(32, "token challenge digest"))
	copy(t.KeyID[:], r.Take(32, "token key id"))
	t.Authenticator = r.Take(s.nk, "token authenticator")
	if err := r.Done("token"); err != nil {
		return nil, err
	}
	return t, nil
}

// SpendID is SHA-256 of the token's encoding: the key under which a spent
// token is stored (protocol.SpentTokensBucket). Tokens of unknown types
// hash what MarshalBinary would write had the size been right.
func (t *Token) SpendID() [32]byte {
	return sha256.Sum256(append(t.input(), t.Authenticator...))
}

// ReportNonce is a report token's nonce: SHA-256("crowdlog-v1 report token"
// ‖ reportWithoutToken), binding the token to the report's bytes (so a
// second use is a replayed report).
func ReportNonce(reportWithoutToken []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(ReportNonceLabel))
	h.Write(reportWithoutToken)
	var n [32]byte
	h.Sum(n[:0])
	return n
}

// TokenChallenge is the RFC 9577 §2.1 TokenChallenge crowdlog's tokens of
// type typ, kind and epoch answer:
//
//	u16 token_type ‖ u16 len ‖ issuer_name ("crowdlog-issuer") ‖
//	u8 32 ‖ redemption_context (SHA-256(kind ‖ epoch)) ‖
//	u16 len ‖ origin_info (the kind's name)
//
// Every client of an epoch and kind computes the same challenge (there is no
// per-origin nonce in it), so it reveals nothing about the client.
func TokenChallenge(typ uint16, kind Kind, epoch string) []byte {
	ctx := sha256.Sum256(append([]byte{byte(kind)}, epoch...))
	w := protocol.Writer{}
	w.U16(typ)
	w.Bytes16([]byte(IssuerName))
	w.Bytes8(ctx[:])
	w.Bytes16([]byte(kind.String()))
	return w.B
}

// ChallengeDigest is SHA-256(TokenChallenge(typ, kind, epoch)), the token's
// challenge_digest (RFC 9578 §5.1).
func ChallengeDigest(typ uint16, kind Kind, epoch string) [32]byte {
	return sha256.Sum256(TokenChallenge(typ, kind, epoch))
}

// PrivateKey is an issuer key of one kind and epoch (RFC 9578 §5.5): a
// VOPRF private key of the token type's suite. Whoever holds it can issue
// and verify tokens of its kind and epoch.
type PrivateKey struct {
	s     *suite
	kind  Kind
	epoch string
	sk    *oprf.PrivateKey
	skb   []byte   // SerializeScalar(skI), for protocol/internal/dleq
	pub   []byte   // SerializeElement(pkI)
	keyID [32]byte // SHA-256(pub)
}

// GenerateKey makes a fresh TypeRistretto key for kind and epoch:
// DeriveKeyPair(random seed, "PrivacyPass") (RFC 9578 §5.5, RFC 9497
// §3.2.1).
func GenerateKey(kind Kind, epoch string) (*PrivateKey, error) {
	return generateKey(suiteRistretto, kind, epoch)
}

func generateKey(s *suite, kind Kind, epoch string) (*PrivateKey, error) {
	if !kind.Valid() {
		return nil, fmt.Errorf("token: unknown kind %d", kind)
	}
	if len(epoch) == 0 || len(epoch) > 255 {
		return nil, fmt.Errorf("token: epoch name of %d bytes, want 1..255", len(epoch))
	}
	seed := make([]byte, s.ns)
	if _, err := rand.Read(seed); err != nil {
		return nil, err
	}
	sk, err := oprf.DeriveKey(s.oprf, oprf.VerifiableMode, seed, []byte("PrivacyPass"))
	if err != nil {
		return nil, fmt.Errorf("token: derive key: %w", err)
	}
	return newKey(s, kind, epoch, sk)
}

// SeedSize is the size of a DeriveKey seed.
const SeedSize = 32

// DeriveKey returns the TypeRistretto key of kind and epoch derived from a
// 32-byte secret seed: DeriveKeyPair(seed, "PrivacyPass" ‖ 0x00 ‖ kind ‖
// epoch) (RFC 9497 §3.2.1), so the holder of one seed has every epoch's key
// without storing one file per epoch (the Prio3 helper's per-day keys).
// Errors: an unknown kind, an epoch of 0 or over 255 bytes, a seed that is
// not SeedSize bytes.
func DeriveKey(kind Kind, epoch string, seed []byte) (*PrivateKey, error) {
	if !kind.Valid() {
		return nil, fmt.Errorf("token: unknown kind %d", kind)
	}
	if len(epoch) == 0 || len(epoch) > 255 {
		return nil, fmt.Errorf("token: epoch name of %d bytes, want 1..255", len(epoch))
	}
	if len(seed) != SeedSize {
		return nil, fmt.Errorf("token: key seed of %d bytes, want %d", len(seed), SeedSize)
	}
	info := append([]byte("PrivacyPass\x00"), byte(kind))
	info = append(info, epoch...)
	sk, err := oprf.DeriveKey(suiteRistretto.oprf, oprf.VerifiableMode, seed, info)
	if err != nil {
		return nil, fmt.Errorf("token: derive key: %w", err)
	}
	return newKey(suiteRistretto, kind, epoch, sk)
}

// Prio3NonceLabel prefixes the fields hashed into a Prio3 helper token's
// nonce.
const Prio3NonceLabel = "crowdlog-v1 prio3 helper token"

// Prio3Epoch is the epoch of the Prio3 helper tokens of campaign and day
// (days since 1970-01-01, UTC): "campaign/day". One issuance per identity
// and epoch is one report per person per campaign-day.
func Prio3Epoch(campaign string, day uint32) string {
	return fmt.Sprintf("%s/%d", campaign, day)
}

// ParsePrio3Epoch splits a Prio3Epoch into its campaign and day; ok is
// false for any other string (no "/", an empty campaign, a day that is not
// a decimal uint32).
func ParsePrio3Epoch(epoch string) (campaign string, day uint32, ok bool) {
	i := strings.LastIndexByte(epoch, '/')
	if i <= 0 {
		return "", 0, false
	}
	d, err := strconv.ParseUint(epoch[i+1:], 10, 32)
	if err != nil || Prio3Epoch(epoch[:i], uint32(d)) != epoch {
		return "", 0, false
	}
	return epoch[:i], uint32(d), true
}

// Prio3Nonce is a Prio3 helper token's nonce: SHA-256(Prio3NonceLabel ‖
// len8 campaign ‖ day(u32) ‖ report id(16) ‖ SHA-256(public share) ‖
// SHA-256(sealed helper share)). It binds the token to one report of one
// campaign-day and to the helper's sealed input share (whose AEAD binds the
// public share), so whoever sees the token cannot move it to a report of
// its own.
func Prio3Nonce(campaign string, day uint32, id [16]byte, publicShare, sealedHelper []byte) [32]byte {
	w := protocol.Writer{}
	w.Raw([]byte(Prio3NonceLabel))
	w.Bytes8([]byte(campaign))
	w.U32(day)
	w.Raw(id[:])
	ps := sha256.Sum256(publicShare)
	w.Raw(ps[:])
	hs := sha256.Sum256(sealedHelper)
	w.Raw(hs[:])
	return sha256.Sum256(w.B)
}

func newKey(s *suite, kind Kind, epoch string, sk *oprf.PrivateKey) (*PrivateKey, error) {
	pub, err := sk.Public().MarshalBinary()
	if err != nil {
		return nil, err
	}
	skb, err := sk.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return &PrivateKey{s: s, kind: kind, epoch: epoch, sk: sk, skb: skb, pub: pub, keyID: sha256.Sum256(pub)}, nil
}

// Kind is the key's token kind.
func (k *PrivateKey) Kind() Kind { return k.kind }

// Epoch is the key's epoch.
func (k *PrivateKey) Epoch() string { return k.epoch }

// Type is the token type the key issues.
func (k *PrivateKey) Type() uint16 { return k.s.typ }

// Public is the encoded public key pkI (SerializeElement, 32 bytes for
// TypeRistretto), what clients pass to NewRequest.
func (k *PrivateKey) Public() []byte { return append([]byte(nil), k.pub...) }

// KeyID is token_key_id = SHA-256(Public()) (RFC 9578 §5.5).
func (k *PrivateKey) KeyID() [32]byte { return k.keyID }

// keyMagic starts an encoded PrivateKey.
const keyMagic = "crowdlog-token-key"

// MarshalBinary encodes the key: "crowdlog-token-key" ‖ version ‖ u16 type ‖
// u8 kind ‖ u8 len epoch ‖ epoch ‖ SerializeScalar(skI). It is secret.
func (k *PrivateKey) MarshalBinary() ([]byte, error) {
	sb, err := k.sk.MarshalBinary()
	if err != nil {
		return nil, err
	}
	w := protocol.Writer{}
	w.Raw([]byte(keyMagic))
	w.U8(protocol.Version)
	w.U16(k.s.typ)
	w.U8(byte(k.kind))
	w.Bytes8([]byte(k.epoch))
	w.Raw(sb)
	return w.B, nil
}

// ParsePrivateKey decodes what MarshalBinary wrote; errors wrap
// protocol.ErrMalformed.
func ParsePrivateKey(b []byte) (*PrivateKey, error) {
	r := protocol.Reader{B: b}
	if string(r.Take(len(keyMagic), "token key magic")) != keyMagic && r.Err == nil {
		return nil, protocol.Malformed("not a crowdlog token key")
	}
	r.ReadVersion("token key")
	typ := r.U16("token key type")
	kind := Kind(r.U8("token key kind"))
	epoch := string(r.Bytes8("token key epoch"))
	if r.Err != nil {
		return nil, r.Err
	}
	s, err := suiteOf(typ)
	if err != nil {
		return nil, protocol.Malformed("%v", err)
	}
	if !kind.Valid() || epoch == "" {
		return nil, protocol.Malformed("token key of kind %d, epoch %q", kind, epoch)
	}
	sb := r.Take(s.ns, "token key scalar")
	if err := r.Done("token key"); err != nil {
		return nil, err
	}
	sk := new(oprf.PrivateKey)
	if err := sk.UnmarshalBinary(s.oprf, sb); err != nil {
		return nil, protocol.Malformed("token key scalar: %v", err)
	}
	return newKey(s, kind, epoch, sk)
}

// Issue evaluates a batch of blinded elements (RFC 9578 §5.2 with RFC 9497
// §3.3.2 BlindEvaluate over the batch): one evaluated element per blinded
// one and a single DLEQ proof (c ‖ s, 2·Ns bytes) for the whole batch
// (RFC 9497 §2.2.1 GenerateProof; for TypeRistretto the composite over the
// public blinded elements is variable time and everything that touches the
// key constant time: protocol/internal/dleq). It fails on an empty batch
// or an element that does not decode or is the identity (wrapping
// protocol.ErrMalformed). The caller decides whether the client may have
// the tokens.
func (k *PrivateKey) Issue(blinded [][]byte) (evaluated [][]byte, proof []byte, err error) {
	if len(blinded) == 0 {
		return nil, nil, errors.New("token: empty batch")
	}
	if k.s == suiteRistretto {
		for i, b := range blinded {
			if len(b) != k.s.ne {
				return nil, nil, fmt.Errorf("token: blinded element %d: %w", i, protocol.Malformed("element of %d bytes, want %d", len(b), k.s.ne))
			}
		}
		evaluated, proof, err = dleq.Evaluate(k.skb, k.pub, blinded, rand.Reader)
		if ee := new(dleq.ElementError); errors.As(err, &ee) {
			return nil, nil, fmt.Errorf("token: blinded element %d: %w", ee.Index, protocol.Malformed("%v", ee.Err))
		}
		if err != nil {
			return nil, nil, fmt.Errorf("token: evaluate: %w", err)
		}
		return evaluated, proof, nil
	}
	elems := make([]group.Element, len(blinded))
	for i, b := range blinded {
		if elems[i], err = k.s.element(b); err != nil {
			return nil, nil, fmt.Errorf("token: blinded element %d: %w", i, err)
		}
	}
	ev, err := oprf.NewVerifiableServer(k.s.oprf, k.sk).Evaluate(&oprf.EvaluationRequest{Elements: elems})
	if err != nil {
		return nil, nil, fmt.Errorf("token: evaluate: %w", err)
	}
	evaluated = make([][]byte, len(ev.Elements))
	for i, e := range ev.Elements {
		if evaluated[i], err = e.MarshalBinaryCompress(); err != nil {
			return nil, nil, err
		}
	}
	if proof, err = ev.Proof.MarshalBinary(); err != nil {
		return nil, nil, err
	}
	return evaluated, proof, nil
}

// element decodes a non-identity element of the suite's group.
func (s *suite) element(b []byte) (group.Element, error) {
	if len(b) != s.ne {
		return nil, protocol.Malformed("element of %d bytes, want %d", len(b), s.ne)
	}
	e := s.g.NewElement()
	if err := e.UnmarshalBinary(b); err != nil {
		return nil, protocol.Malformed("element does not decode: %v", err)
	}
	if e.IsIdentity() {
		return nil, protocol.Malformed("identity element")
	}
	return e, nil
}

// Verify checks a token against this key (RFC 9578 §5.4): its type, key id
// and challenge digest must be this key's (kind and epoch), and its
// authenticator the VOPRF evaluation of its other fields. Errors wrap
// ErrInvalidToken. Verify does not know whether the token was spent. For
// TypeRistretto the evaluation is protocol/internal/dleq's FullEvaluate
// (gtank/ristretto255, constant time in the key).
func (k *PrivateKey) Verify(t *Token) error {
	return k.verify(t, ChallengeDigest(k.s.typ, k.kind, k.epoch))
}

func (k *PrivateKey) verify(t *Token, digest [32]byte) error {
	switch {
	case t == nil:
		return fmt.Errorf("%w: no token", ErrInvalidToken)
	case t.Type != k.s.typ:
		return fmt.Errorf("%w: type 0x%04x, want 0x%04x", ErrInvalidToken, t.Type, k.s.typ)
	case t.KeyID != k.keyID:
		return fmt.Errorf("%w: issued under another key (not the %s key of epoch %q)", ErrInvalidToken, k.kind, k.epoch)
	case t.ChallengeDigest != digest:
		return fmt.Errorf("%w: challenge is not the %s challenge of epoch %q", ErrInvalidToken, k.kind, k.epoch)
	case len(t.Authenticator) != k.s.nk:
		return fmt.Errorf("%w: authenticator of %d bytes, want %d", ErrInvalidToken, len(t.Authenticator), k.s.nk)
	}
	var want []byte
	var err error
	if k.s == suiteRistretto {
		// constant time in the key (protocol/internal/dleq)
		want, err = dleq.FullEvaluate(k.skb, t.input())
	} else {
		want, err = oprf.NewVerifiableServer(k.s.oprf, k.sk).FullEvaluate(t.input())
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if subtle.ConstantTimeCompare(want, t.Authenticator) != 1 {
		return fmt.Errorf("%w: wrong authenticator", ErrInvalidToken)
	}
	return nil
}

// Pending is a client's state between NewRequest and Finalize: the blinds,
// nonces and the token fields. It is secret (the blinds unlink the tokens
// from the request) and used once.
type Pending struct {
	s       *suite
	client  oprf.VerifiableClient
	fin     *oprf.FinalizeData
	req     *oprf.EvaluationRequest
	nonces  [][32]byte
	digest  [32]byte
	keyID   [32]byte
	public  []byte   // the issuer key's encoding, for the proof check
	blinded [][]byte // the request's elements, for the proof check
	spent   bool
	// rb is the TypeRistretto client state (protocol/internal/dleq);
	// client, fin and req serve the other suites (circl).
	rb *dleq.Blinds
}

// NewRequest blinds one token input per nonce for the issuer key public
// (RFC 9578 §5.1; public is PrivateKey.Public(), 32 bytes for
// TypeRistretto) of kind and epoch: it returns the client state and the
// blinded elements to send, one per nonce. Nonces are random (crypto/rand)
// for randomness tokens and ReportNonce for report tokens.
func NewRequest(public []byte, kind Kind, epoch string, nonces [][32]byte) (*Pending, [][]byte, error) {
	s, err := suiteOfPublic(public)
	if err != nil {
		return nil, nil, err
	}
	return newRequest(s, public, kind, epoch, nonces, nil)
}

// newRequest is NewRequest with the suite given and, for test vectors, the
// blinds (nil = random).
func newRequest(s *suite, public []byte, kind Kind, epoch string, nonces [][32]byte, blinds []oprf.Blind) (*Pending, [][]byte, error) {
	if !kind.Valid() {
		return nil, nil, fmt.Errorf("token: unknown kind %d", kind)
	}
	return newRequestDigest(s, public, ChallengeDigest(s.typ, kind, epoch), nonces, blinds)
}

func newRequestDigest(s *suite, public []byte, digest [32]byte, nonces [][32]byte, blinds []oprf.Blind) (*Pending, [][]byte, error) {
	if len(nonces) == 0 {
		return nil, nil, errors.New("token: no nonces")
	}
	pk := new(oprf.PublicKey)
	if err := pk.UnmarshalBinary(s.oprf, public); err != nil {
		return nil, nil, fmt.Errorf("token: issuer public key: %w", err)
	}
	p := &Pending{s: s, nonces: append([][32]byte(nil), nonces...),
		digest: digest, keyID: sha256.Sum256(public), public: append([]byte(nil), public...)}
	inputs := make([][]byte, len(nonces))
	for i, n := range nonces {
		t := Token{Type: s.typ, Nonce: n, ChallengeDigest: p.digest, KeyID: p.keyID}
		inputs[i] = t.input()
	}
	var err error
	if s == suiteRistretto {
		// RFC 9497 §3.3.2 Blind on gtank/ristretto255: constant time in
		// the secret blinds (protocol/internal/dleq)
		var bb [][]byte
		if blinds != nil {
			bb = make([][]byte, len(blinds))
			for i, b := range blinds {
				if bb[i], err = b.MarshalBinary(); err != nil {
					return nil, nil, err
				}
			}
		}
		if p.rb, p.blinded, err = dleq.Blind(inputs, bb, rand.Reader); err != nil {
			return nil, nil, fmt.Errorf("token: blind: %w", err)
		}
		return p, p.blinded, nil
	}
	p.client = oprf.NewVerifiableClient(s.oprf, pk)
	if blinds == nil {
		p.fin, p.req, err = p.client.Blind(inputs)
	} else {
		p.fin, p.req, err = p.client.DeterministicBlind(inputs, blinds)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("token: blind: %w", err)
	}
	out := make([][]byte, len(p.req.Elements))
	for i, e := range p.req.Elements {
		if out[i], err = e.MarshalBinaryCompress(); err != nil {
			return nil, nil, err
		}
	}
	p.blinded = out
	return p, out, nil
}

// ErrProof is wrapped by Finalize when the issuer's DLEQ proof does not
// verify: the issuer evaluated under another key than the one the client
// pinned (it could tag this client's tokens), or the answer was altered.
var ErrProof = errors.New("token: issuance proof failed: the issuer did not evaluate under the expected public key")

// Finalize checks the issuer's batch DLEQ proof and unblinds the evaluated
// elements into tokens, in nonce order (RFC 9578 §5.3, RFC 9497 §3.3.2
// Finalize; for TypeRistretto the proof check, RFC 9497 §2.2.2
// VerifyProof, runs in variable time over its public inputs, and the
// unblinding in constant time with one batched inversion of the blinds:
// protocol/internal/dleq). Errors wrap ErrProof for a failing proof and
// protocol.ErrMalformed for undecodable elements. A Pending finalizes once.
func (p *Pending) Finalize(evaluated [][]byte, proof []byte) ([]*Token, error) {
	if p.spent {
		return nil, errors.New("token: request already finalized")
	}
	if len(evaluated) != len(p.nonces) {
		return nil, protocol.Malformed("%d evaluated elements for %d blinded", len(evaluated), len(p.nonces))
	}
	if p.rb != nil {
		// VerifyProof (variable time, public inputs) and the unblinding
		// (constant time, one batched inversion): protocol/internal/dleq
		outs, err := p.rb.VerifyFinalize(p.public, evaluated, proof)
		switch {
		case errors.Is(err, dleq.ErrProof):
			return nil, ErrProof
		case err != nil:
			return nil, protocol.Malformed("%v", err)
		}
		return p.tokens(outs), nil
	}
	ev := &oprf.Evaluation{Elements: make([]group.Element, len(evaluated)), Proof: new(circldleq.Proof)}
	for i, b := range evaluated {
		e, err := p.s.element(b)
		if err != nil {
			return nil, fmt.Errorf("evaluated element %d: %w", i, err)
		}
		ev.Elements[i] = e
	}
	if len(proof) != 2*p.s.ns {
		return nil, protocol.Malformed("proof of %d bytes, want %d", len(proof), 2*p.s.ns)
	}
	if err := ev.Proof.UnmarshalBinary(p.s.g, proof); err != nil {
		return nil, protocol.Malformed("proof: %v", err)
	}
	outs, err := p.client.Finalize(p.fin, ev)
	if err != nil {
		if errors.Is(err, oprf.ErrInvalidProof) {
			return nil, ErrProof
		}
		return nil, fmt.Errorf("token: finalize: %w", err)
	}
	return p.tokens(outs), nil
}

// tokens marks p spent and makes the tokens of the authenticators outs.
func (p *Pending) tokens(outs [][]byte) []*Token {
	p.spent = true
	toks := make([]*Token, len(outs))
	for i, o := range outs {
		toks[i] = &Token{Type: p.s.typ, Nonce: p.nonces[i], ChallengeDigest: p.digest, KeyID: p.keyID, Authenticator: o}
	}
	return toks
}

// Len is the number of tokens requested.
func (p *Pending) Len() int { return len(p.nonces) }
