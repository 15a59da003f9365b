package star

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"io"

	"github.com/cloudflare/circl/group"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/vss"
	"golang.org/x/crypto/chacha20poly1305"
)

// Policy is the threshold policy a report was sealed for (CrowdLogging §3.2).
type Policy byte

const (
	// FTa is the artifact-frequency threshold: an artifact opens once k
	// reports of it exist; share x-coordinates are random (CrowdLogging
	// §3.2.1).
	FTa Policy = 1
	// FTu is the user-frequency threshold: an artifact opens once k distinct
	// users reported it; a user's share x is derived from the user's secret
	// and the tag, so repeats add no share (CrowdLogging §3.2.2).
	FTu Policy = 2
)

// String returns the CLI spelling: "ft-a" or "ft-u".
func (p Policy) String() string {
	switch p {
	case FTa:
		return "ft-a"
	case FTu:
		return "ft-u"
	}
	return fmt.Sprintf("policy(%d)", byte(p))
}

// ParsePolicy parses "ft-a" or "ft-u"; errors name the accepted values.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "ft-a", "fta", "FT_a":
		return FTa, nil
	case "ft-u", "ftu", "FT_u":
		return FTu, nil
	}
	return 0, fmt.Errorf("unknown threshold policy %q: use ft-a (k reports) or ft-u (k distinct users)", s)
}

// UserSecret is a client's long-term 32-byte secret. It never leaves the
// client; it determines FT_u share coordinates and pseudonymous unit ids.
type UserSecret [32]byte

// NewUserSecret draws a UserSecret from crypto/rand.
func NewUserSecret() (UserSecret, error) {
	var s UserSecret
	_, err := io.ReadFull(rand.Reader, s[:])
	return s, err
}

// Sealing is everything the OPRF output ω of one (app, epoch, artifact)
// determines: the tag, the Shamir polynomial whose f(0) keys the AEAD, and the
// policy parameters. Every client with the same artifact derives the same
// Sealing (STAR §4; CrowdLogging §3.1's deterministic E(N(q)) is played by
// the tag).
type Sealing struct {
	App, Epoch string
	Policy     Policy
	K          int
	// Pipeline is the digest of the pipeline definition the sealing is
	// bound to (Context.Pipeline); its reports carry it. Zero: none.
	Pipeline [32]byte
	Tag      [32]byte
	poly     vss.Polynomial
	key      [32]byte
	commit   []byte // Feldman commitment C_0 ‖ … ‖ C_{k−1}
}

// DeriveSealing derives a Sealing from ω (the 64-byte RFC 9497 output) and
// the whole release context (app, epoch, policy, k), so that no two
// contexts share a tag, a polynomial or a commitment: shares sealed for
// FT_a and FT_u, or for k = 3 and k = 5, of one artifact lie on unrelated
// polynomials and never combine (docs/wire.md, "Sealing derivation"):
//
//	ctx    = u8 len(app) ‖ app ‖ u8 len(epoch) ‖ epoch ‖ u8 policy ‖ u16 k
//	tag    = HKDF-SHA-256(IKM = ω, salt = "crowdlog-v2", info = "crowdlog-v2 tag" ‖ ctx, L = 32)
//	seed   = HKDF-SHA-256(IKM = ω, salt = "crowdlog-v2", info = "crowdlog-v2 poly" ‖ ctx, L = 32)
//	a_i    = HashToScalar(seed ‖ u16 i, "crowdlog-v1 poly")   (vss.DerivePolynomial)
//	key    = SHA-256("crowdlog-v1 key" ‖ tag ‖ f(0))
//	C_i    = a_i·G                                          (Feldman commitment)
//
// HKDF is RFC 5869; k fixed-base multiplications (~20 µs each) once per
// artifact. Errors when k is outside 1..MaxK, the policy is unknown, or app
// or epoch is longer than 255 bytes.
func DeriveSealing(omega []byte, app, epoch string, policy Policy, k int) (Sealing, error) {
	return DeriveSealingIn(omega, Context{App: app, Epoch: epoch, Policy: policy, K: k})
}

// Context is the whole release context a sealing is bound to. Meaning is
// the canonical text of the application's options that change what an
// artifact string means (e.g. "url-level=domain"; ingest/apps.Meaning), ""
// when none do; it is appended to ctx as u8 len ‖ meaning only when not
// empty, so it never travels in a report but keeps clients with different
// options from sharing tags and polynomials.
//
// Pipeline is the SHA-256 digest of the pipeline definition (the fields
// that change what a report means: app and options, policy and its
// parameters; pipelines/pipeline.Digest). When not zero, ctx ends with
// u8 len ‖ meaning (also when meaning is empty) ‖ pipeline[32], so shares
// of two definitions never combine, and every report of the sealing
// carries the digest (Report.Pipeline, bound by the AEAD) for the roles
// downstream to check.
type Context struct {
	App, Meaning, Epoch string
	Policy              Policy
	K                   int
	Pipeline            [32]byte
}

// DeriveSealingIn is DeriveSealing with the application's Meaning bound
// too (docs/wire.md). Errors as DeriveSealing, and when Meaning is longer
// than 255 bytes.
func DeriveSealingIn(omega []byte, c Context) (Sealing, error) {
	app, epoch, policy, k := c.App, c.Epoch, c.Policy, c.K
	if k < 1 || k > vss.MaxK {
		return Sealing{}, fmt.Errorf("protocol: threshold k=%d outside 1..%d", k, vss.MaxK)
	}
	if policy != FTa && policy != FTu {
		return Sealing{}, fmt.Errorf("protocol: unknown policy %d", policy)
	}
	if len(app) > 255 || len(epoch) > 255 || len(c.Meaning) > 255 {
		return Sealing{}, fmt.Errorf("protocol: app (%d bytes), epoch (%d bytes) or app options (%d bytes) longer than 255 bytes", len(app), len(epoch), len(c.Meaning))
	}
	ctx := contextBytes(app, epoch, policy, k)
	if c.Meaning != "" || c.Pipeline != ([32]byte{}) {
		ctx = append(append(ctx, byte(len(c.Meaning))), c.Meaning...)
	}
	if c.Pipeline != ([32]byte{}) {
		ctx = append(ctx, c.Pipeline[:]...)
	}
	s := Sealing{App: app, Epoch: epoch, Policy: policy, K: k, Pipeline: c.Pipeline}
	copy(s.Tag[:], bound(omega, "crowdlog-v2 tag", ctx))
	s.poly = vss.DerivePolynomial(bound(omega, "crowdlog-v2 poly", ctx), k)
	s.key = aeadKey(s.Tag, s.poly.Secret())
	s.commit = vss.CommitPolynomial(s.poly)
	return s, nil
}

// contextBytes is the release context of DeriveSealing: u8 len(app) ‖ app ‖
// u8 len(epoch) ‖ epoch ‖ u8 policy ‖ u16 k (big-endian). Callers check the
// lengths.
func contextBytes(app, epoch string, policy Policy, k int) []byte {
	b := make([]byte, 0, 5+len(app)+len(epoch))
	b = append(b, byte(len(app)))
	b = append(b, app...)
	b = append(b, byte(len(epoch)))
	b = append(b, epoch...)
	return append(b, byte(policy), byte(k>>8), byte(k))
}

// bound is HKDF-SHA-256 (RFC 5869) of ω with salt "crowdlog-v2" and info
// label ‖ ctx, 32 bytes.
func bound(omega []byte, label string, ctx []byte) []byte {
	out, err := hkdf.Key(sha256.New, omega, []byte("crowdlog-v2"), label+string(ctx), 32)
	if err != nil { // only for L > 255·32
		panic(err)
	}
	return out
}

// TagFromOmega is the tag part of DeriveSealing alone (HKDF-SHA-256 of ω
// with the release context), ~2 µs (DeriveSealing also builds the
// commitment, k fixed-base multiplications). Anyone holding ω — every
// client of the artifact, or an attacker who can compute ω (LocalOmega, or
// a stolen epoch key) — gets the tag; pipelines/attack uses it to probe
// pending tags. app and epoch longer than 255 bytes are cut to 255 (no
// sealing has them).
func TagFromOmega(omega []byte, app, epoch string, policy Policy, k int) [32]byte {
	var t [32]byte
	copy(t[:], bound(omega, "crowdlog-v2 tag", contextBytes(clip(app), clip(epoch), policy, k)))
	return t
}

func clip(s string) string {
	if len(s) > 255 {
		return s[:255]
	}
	return s
}

// LocalOmega is the paper's "hash mode" ω = SHA-512("crowdlog-v1 local" ‖
// OPRFInput(app, epoch, artifact)) (CrowdLogging §3.1 seals with a
// deterministic hash of the artifact), 64 bytes like an RFC 9497 output.
//
// WARNING: for comparison and tests only (STAR, Davidson et al., CCS 2022, §4). Without a
// secret key anyone can compute ω for a guessed artifact, so a compromised
// aggregator (or a thief of the reports topic) finds every pending artifact
// of a candidate list: the offline probe of CrowdLogging §5.4, demonstrated
// by attack.TestAttackProbe. Production clients use the VOPRF (Blind/Finalize).
func LocalOmega(app, epoch, artifact string) []byte {
	h := sha512.New()
	h.Write([]byte("crowdlog-v1 local"))
	h.Write(oprf.OPRFInput(app, epoch, artifact))
	return h.Sum(nil)
}

// Commitment returns the Feldman commitment to the sealing's polynomial
// (CommitmentSize(K) bytes), identical for every client of the artifact.
func (s *Sealing) Commitment() []byte { return append([]byte(nil), s.commit...) }

// WithTag returns a copy sealed under another tag: same polynomial and
// commitment, AEAD key re-derived for tag. Honest clients never need it; it
// models a poisoner that seals its own consistent polynomial under a tag it
// learned (attack tests; docs/threat-model.md).
func (s Sealing) WithTag(tag [32]byte) Sealing {
	s.Tag = tag
	s.key = aeadKey(tag, s.poly.Secret())
	return s
}

func aeadKey(tag [32]byte, secret group.Scalar) [32]byte {
	b, _ := secret.MarshalBinary()
	h := sha256.New()
	h.Write([]byte("crowdlog-v1 key"))
	h.Write(tag[:])
	h.Write(b)
	var k [32]byte
	copy(k[:], h.Sum(nil))
	return k
}

// ShareX returns the x-coordinate of a user's share: for FT_u
// HashToScalar(secret ‖ tag) so a user adds one share however often it
// repeats the artifact; for FT_a a fresh random scalar per report.
func (s *Sealing) ShareX(user *UserSecret) group.Scalar {
	if s.Policy == FTu {
		msg := append(append([]byte{}, user[:]...), s.Tag[:]...)
		return protocol.G.HashToScalar(msg, []byte("crowdlog-v1 ftu-x"))
	}
	return protocol.G.RandomNonZeroScalar(rand.Reader)
}

// UnitID returns the user's pseudonymous unit id for this tag:
// HMAC-SHA-256(secret, "unit" ‖ tag)[:16]. It is stable per (user, artifact,
// epoch), differs across artifacts (so it links nothing), travels inside the
// AEAD ciphertext and lets the aggregator count distinct users exactly.
func (s *Sealing) UnitID(user *UserSecret) [16]byte {
	m := hmac.New(sha256.New, user[:])
	m.Write([]byte("unit"))
	m.Write(s.Tag[:])
	var u [16]byte
	copy(u[:], m.Sum(nil))
	return u
}

// Seal builds one report of the artifact for user: a fresh random report id,
// the tag, the user's share, the polynomial's commitment and the AEAD (XChaCha20-Poly1305, random nonce,
// the report header as associated data) of payload with its Unit set. One call = one
// impression.
func (s *Sealing) Seal(user *UserSecret, primary, secondary string) (*Report, error) {
	return s.seal(rand.Reader, user, s.ShareX(user), primary, secondary)
}

// seal is Seal with the report id and AEAD nonce drawn from rnd and the
// share's x given (golden test vectors use fixed values).
func (s *Sealing) seal(rnd io.Reader, user *UserSecret, x group.Scalar, primary, secondary string) (*Report, error) {
	r := &Report{App: s.App, Epoch: s.Epoch, Policy: s.Policy, K: uint16(s.K), Pipeline: s.Pipeline, Tag: s.Tag, Commitment: s.commit}
	if _, err := io.ReadFull(rnd, r.ID[:]); err != nil {
		return nil, err
	}
	r.Share = s.poly.Eval(x)
	p := Payload{Primary: primary, Secondary: secondary, Unit: s.UnitID(user)}
	pt, err := p.MarshalBinary()
	if err != nil {
		return nil, err
	}
	r.Ciphertext, err = sealAEAD(rnd, s.key, r.associatedData(), pt)
	return r, err
}

func sealAEAD(rnd io.Reader, key [32]byte, ad []byte, pt []byte) ([]byte, error) {
	a, err := chacha20poly1305.NewX(key[:])
	if err != nil {
		return nil, err
	}
	out := make([]byte, a.NonceSize(), a.NonceSize()+len(pt)+a.Overhead())
	if _, err := io.ReadFull(rnd, out); err != nil {
		return nil, err
	}
	return a.Seal(out, out, pt, ad), nil
}

// associatedData is the AEAD associated data of a report: every field of
// its metadata the aggregator groups and releases by, so a report whose
// metadata was altered (another epoch, policy, k, app, id or tag) does not
// open even under its group's key:
//
//	"crowdlog-v2 report" ‖ u8 len(app) ‖ app ‖ u8 len(epoch) ‖ epoch ‖ u8 policy ‖ u16 k [‖ pipeline[32]] ‖ id[16] ‖ tag[32]
//
// (pipeline only when the report carries a digest).
func (r *Report) associatedData() []byte {
	const label = "crowdlog-v2 report"
	b := make([]byte, 0, len(label)+5+len(r.App)+len(r.Epoch)+80)
	b = append(b, label...)
	b = append(b, contextBytes(clip(r.App), clip(r.Epoch), r.Policy, int(r.K))...)
	if r.Pipeline != ([32]byte{}) {
		b = append(b, r.Pipeline[:]...)
	}
	b = append(b, r.ID[:]...)
	return append(b, r.Tag[:]...)
}

// KeyFromSecret returns the AEAD key for a recovered polynomial secret f(0).
func KeyFromSecret(tag [32]byte, secret group.Scalar) [32]byte { return aeadKey(tag, secret) }

// OpenPayload decrypts a report's ciphertext with the AEAD key recovered for
// its tag. Errors (wrapping ErrMalformed for bad encodings) when the key is
// wrong or the ciphertext was tampered with.
func OpenPayload(key [32]byte, r *Report) (Payload, error) {
	a, err := chacha20poly1305.NewX(key[:])
	if err != nil {
		return Payload{}, err
	}
	if len(r.Ciphertext) < a.NonceSize()+a.Overhead() {
		return Payload{}, protocol.Malformed("ciphertext of %d bytes", len(r.Ciphertext))
	}
	n := a.NonceSize()
	pt, err := a.Open(nil, r.Ciphertext[:n], r.Ciphertext[n:], r.associatedData())
	if err != nil {
		return Payload{}, fmt.Errorf("protocol: AEAD open failed (wrong key or tampered report): %w", err)
	}
	return ParsePayload(pt)
}

// Payload is the AEAD plaintext of a report: Primary is the normalized
// artifact (what is counted and released), Secondary the original form, Unit
// the pseudonymous unit id (see Sealing.UnitID). CrowdLogging §3.1.
type Payload struct {
	Primary, Secondary string
	Unit               [16]byte
}

// MaxField is the largest Primary or Secondary in bytes.
const MaxField = 16 << 10

// MarshalBinary encodes: version ‖ u16 len ‖ primary ‖ u16 len ‖ secondary ‖
// unit[16]. Errors when a field exceeds MaxField.
func (p *Payload) MarshalBinary() ([]byte, error) {
	if len(p.Primary) > MaxField || len(p.Secondary) > MaxField {
		return nil, fmt.Errorf("protocol: artifact longer than %d bytes", MaxField)
	}
	w := protocol.Writer{B: make([]byte, 0, 1+4+len(p.Primary)+len(p.Secondary)+16)}
	w.U8(protocol.Version)
	w.Bytes16([]byte(p.Primary))
	w.Bytes16([]byte(p.Secondary))
	w.Raw(p.Unit[:])
	return w.B, nil
}

// ParsePayload decodes MarshalBinary's output; errors wrap ErrMalformed.
func ParsePayload(b []byte) (Payload, error) {
	r := protocol.Reader{B: b}
	r.ReadVersion("payload")
	var p Payload
	p.Primary = string(r.Bytes16("primary"))
	p.Secondary = string(r.Bytes16("secondary"))
	copy(p.Unit[:], r.Take(16, "unit"))
	if err := r.Done("payload"); err != nil {
		return Payload{}, err
	}
	return p, nil
}

// Report is what the aggregator sees after peeling its onion layer: the
// report id (replay/duplicate detection), the tag (grouping key), one Shamir
// share, the Feldman commitment to the share's polynomial (k×32 bytes; see
// feldman.go) and the AEAD ciphertext. CrowdLogging §3.1 / STAR §4.
type Report struct {
	App, Epoch string
	Policy     Policy
	K          uint16
	// Pipeline is the digest of the pipeline definition the report was
	// sealed for (Context.Pipeline), zero when none: a report with one
	// encodes as version ReportVersionPipeline with the digest after k.
	Pipeline   [32]byte
	ID         [16]byte
	Tag        [32]byte
	Share      vss.Share
	Commitment []byte // C_0 ‖ … ‖ C_{K−1}, 32 bytes each
	Ciphertext []byte

	// Token is an encoded Privacy Pass token (protocol/token, KindReport)
	// whose nonce is token.ReportNonce(r.UnsignedBytes()): it pays for
	// this report at the aggregator and binds to every byte before it.
	// Empty when the deployment runs without tokens.
	Token []byte
	// Presentation is an encoded ARC presentation (protocol/arc; FT_u
	// only) for the presentation context ARCContext of this report's
	// fields with limit 1. It is not covered by Token's nonce (the
	// aggregator verifies it on its own). Empty when not used.
	Presentation []byte
}

// MaxTrailerField is the largest Token or Presentation in bytes.
const MaxTrailerField = 4 << 10

// ReportVersionPipeline is the version byte of a report that carries a
// pipeline digest: 03 ‖ … ‖ u16 k ‖ pipeline[32] ‖ id ‖ …; a report
// without one keeps protocol.Version and its layout.
const ReportVersionPipeline byte = 3

// MarshalBinary encodes: version ‖ u8 len app ‖ u8 len epoch ‖ policy ‖ u16 k
// [‖ pipeline[32], version ReportVersionPipeline] ‖ id[16] ‖ tag[32] ‖ x[32] ‖ y[32] ‖ u16 n ‖ n×32 commitment (n = k) ‖
// u32 len ciphertext, followed — only when Token or Presentation is not
// empty — by the trailing section u16 len ‖ token ‖ u16 len ‖ presentation
// (a report without them encodes exactly as before). Errors when
// the commitment is not k×32 bytes or a trailing field exceeds
// MaxTrailerField.
func (r *Report) MarshalBinary() ([]byte, error) {
	if len(r.Token) > MaxTrailerField || len(r.Presentation) > MaxTrailerField {
		return nil, fmt.Errorf("protocol: report token (%d bytes) or presentation (%d bytes) longer than %d bytes", len(r.Token), len(r.Presentation), MaxTrailerField)
	}
	w, err := r.marshalUnsigned(4 + len(r.Token) + len(r.Presentation))
	if err != nil {
		return nil, err
	}
	if len(r.Token) > 0 || len(r.Presentation) > 0 {
		w.Bytes16(r.Token)
		w.Bytes16(r.Presentation)
	}
	return w.B, nil
}

// UnsignedBytes is the report's encoding without the trailing section
// (Token, Presentation): what a report token's nonce binds
// (token.ReportNonce). Errors as MarshalBinary.
func (r *Report) UnsignedBytes() ([]byte, error) {
	w, err := r.marshalUnsigned(0)
	if err != nil {
		return nil, err
	}
	return w.B, nil
}

// marshalUnsigned writes the encoding up to and including the ciphertext,
// with extra bytes of spare capacity.
func (r *Report) marshalUnsigned(extra int) (*protocol.Writer, error) {
	if len(r.App) > 255 || len(r.Epoch) > 255 {
		return nil, fmt.Errorf("protocol: app or epoch name longer than 255 bytes")
	}
	if err := vss.CheckCommitmentSize(r.Commitment, int(r.K)); err != nil {
		return nil, err
	}
	x, err := r.Share.X.MarshalBinary()
	if err != nil {
		return nil, err
	}
	y, err := r.Share.Y.MarshalBinary()
	if err != nil {
		return nil, err
	}
	w := &protocol.Writer{B: make([]byte, 0, 192+len(r.Commitment)+len(r.Ciphertext)+len(r.App)+len(r.Epoch)+extra)}
	digest := r.Pipeline != ([32]byte{})
	if digest {
		w.U8(ReportVersionPipeline)
	} else {
		w.U8(protocol.Version)
	}
	w.Bytes8([]byte(r.App))
	w.Bytes8([]byte(r.Epoch))
	w.U8(byte(r.Policy))
	w.U16(r.K)
	if digest {
		w.Raw(r.Pipeline[:])
	}
	w.Raw(r.ID[:])
	w.Raw(r.Tag[:])
	w.Raw(x)
	w.Raw(y)
	w.U16(r.K)
	w.Raw(r.Commitment)
	w.Bytes32(r.Ciphertext)
	return w, nil
}

// ParseReport decodes MarshalBinary's output, with or without the trailing
// section. Errors wrap ErrMalformed for truncated or oversized input, an
// empty trailing section (both fields empty), unknown versions or policies, k outside
// 1..MaxK, a commitment count other than k, non-canonical scalars or x = 0.
// Commitment points are not decoded here (the aggregator decodes them once
// per (tag, commitment) group).
func ParseReport(b []byte) (*Report, error) {
	if len(b) > protocol.MaxReport {
		return nil, protocol.Malformed("report of %d bytes exceeds %d", len(b), protocol.MaxReport)
	}
	rd := protocol.Reader{B: b}
	v := rd.U8("report version")
	if rd.Err == nil && v != protocol.Version && v != ReportVersionPipeline {
		return nil, protocol.Malformed("report version %d, want %d or %d (upgrade the sender or this service)", v, protocol.Version, ReportVersionPipeline)
	}
	r := &Report{}
	r.App = string(rd.Bytes8("app"))
	r.Epoch = string(rd.Bytes8("epoch"))
	r.Policy = Policy(rd.U8("policy"))
	r.K = rd.U16("k")
	if v == ReportVersionPipeline {
		copy(r.Pipeline[:], rd.Take(32, "pipeline"))
		if rd.Err == nil && r.Pipeline == ([32]byte{}) {
			return nil, protocol.Malformed("report version %d with an all-zero pipeline digest (send version %d without one)", v, protocol.Version)
		}
	}
	copy(r.ID[:], rd.Take(16, "id"))
	copy(r.Tag[:], rd.Take(32, "tag"))
	xb := rd.Take(protocol.ScalarSize, "share x")
	yb := rd.Take(protocol.ScalarSize, "share y")
	n := int(rd.U16("commitment count"))
	if rd.Err == nil && n != int(r.K) {
		return nil, protocol.Malformed("commitment of %d points for k=%d", n, r.K)
	}
	r.Commitment = rd.Take(n*protocol.ElementSize, "commitment")
	r.Ciphertext = rd.Bytes32("ciphertext")
	if rd.Err == nil && len(rd.B) > 0 { // the trailing section (MarshalBinary)
		r.Token = rd.Bytes16("token")
		r.Presentation = rd.Bytes16("presentation")
		if rd.Err == nil && len(r.Token) == 0 && len(r.Presentation) == 0 {
			return nil, protocol.Malformed("empty report trailer (omit it when there is neither token nor presentation)")
		}
		if len(r.Token) > MaxTrailerField || len(r.Presentation) > MaxTrailerField {
			return nil, protocol.Malformed("report token (%d bytes) or presentation (%d bytes) longer than %d bytes", len(r.Token), len(r.Presentation), MaxTrailerField)
		}
	}
	if err := rd.Done("report"); err != nil {
		return nil, err
	}
	if r.Policy != FTa && r.Policy != FTu {
		return nil, protocol.Malformed("unknown policy %d", r.Policy)
	}
	if r.K < 1 || r.K > vss.MaxK {
		return nil, protocol.Malformed("threshold k=%d outside 1..%d", r.K, vss.MaxK)
	}
	r.Share.X, r.Share.Y = protocol.G.NewScalar(), protocol.G.NewScalar()
	if err := r.Share.X.UnmarshalBinary(xb); err != nil {
		return nil, protocol.Malformed("share x: %v", err)
	}
	if err := r.Share.Y.UnmarshalBinary(yb); err != nil {
		return nil, protocol.Malformed("share y: %v", err)
	}
	if r.Share.X.IsZero() {
		return nil, protocol.Malformed("share x = 0")
	}
	return r, nil
}
