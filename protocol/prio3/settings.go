package prio3

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"

	"github.com/crowdlog/crowdlog/protocol"
)

// msgSettings is the type byte of a SignedSettings: 7 since the
// announcement carries the status (ε_c, δ); type 6, the format before,
// had none and is refused (a leader could otherwise hide its status rule
// from the device's floor by announcing the old format).
const msgSettings byte = 7

// SettingsDomain separates the leader's signatures over its settings
// from every other signature of its key (SignedReqDomain).
const SettingsDomain = "crowdlog prio3 campaign settings v1\x00"

// DigestDomain prefixes the input of Settings.Digest.
const DigestDomain = "crowdlog prio3 campaign digest v1\x00"

// MaxLeaderKeys bounds the report keys a settings announcement lists (two
// during a rotation).
const MaxLeaderKeys = 8

// ErrSettings is wrapped by SignedSettings.Verify when the signature does
// not verify under the pinned key.
var ErrSettings = errors.New("prio3: campaign settings not signed by the pinned leader key")

// LeaderKey is one of the leader's HPKE report public keys (RFC 9180
// X25519, onion.PublicKey): its key id and 32-byte encoding.
type LeaderKey struct {
	ID  byte
	Key [32]byte
}

// Settings are what the leader of a campaign runs with, as it announces
// them to clients (protocol.Prio3SettingsSubject): the measurement (kind,
// L, b, max weight, chunk length with 0 resolved to DefaultChunk, the L1
// bound S), the hash of the keyword list (keywords.List.Hash: SHA-256 of
// the words, one per line), the fewest reports a day is released with,
// the ε of each aggregator's noise per person-day (0: exact shares), the
// leader's report public keys, and the (ε_c, δ) of each day's
// released/withheld status (StatusEpsilon 0: the exact minimum batch
// rule, StatusDelta then 0; StatusThreshold). A client whose own settings differ
// would send reports the leader cannot prepare (a VDAF of another length
// or bit width fails the proof; another list counts other keywords).
type Settings struct {
	Campaign     string
	Measurement  Config
	ListHash     [32]byte
	MinBatchSize uint64
	Epsilon      float64
	LeaderKeys   []LeaderKey
	// StatusEpsilon is ε_c of each day's status (finite, ≥ 0; 0 = the
	// exact minimum batch rule), StatusDelta its δ (0 < δ < ½ with ε_c >
	// 0, exactly 0 without): CheckSettingsStatus.
	StatusEpsilon float64
	StatusDelta   float64
}

// CheckSettingsStatus validates an announced status (ε_c, δ): CheckStatus,
// and δ = 0 with ε_c = 0 (one encoding per rule).
func CheckSettingsStatus(epsC, delta float64) error {
	if err := CheckStatus(epsC, delta); err != nil {
		return err
	}
	if epsC == 0 && delta != 0 {
		return fmt.Errorf("%w: status delta %v without a status epsilon (the exact rule announces δ 0)", ErrConfig, delta)
	}
	return nil
}

// Digest is the campaign digest: SHA-256 of DigestDomain ‖ campaign(len8)
// ‖ kind(1) ‖ L(u32) ‖ b(1) ‖ max weight(u32) ‖ chunk(u32, resolved) ‖
// S(u64) ‖ list hash(32) — the measurement a client must share with the
// aggregators, nothing operational (keys, ε, batch size). Operators
// publish it with the campaign; a client compares.
func (s *Settings) Digest() [32]byte {
	w := protocol.Writer{B: make([]byte, 0, 128)}
	w.Raw([]byte(DigestDomain))
	s.measurement(&w, s.Measurement.Resolved())
	return sha256.Sum256(w.B)
}

// Resolved is c with Chunk 0 replaced by DefaultChunk(c): the chunk length
// the VDAF runs with (New).
func (c Config) Resolved() Config {
	if c.Chunk == 0 {
		c.Chunk = DefaultChunk(c)
	}
	return c
}

func (s *Settings) measurement(w *protocol.Writer, m Config) {
	w.Bytes8([]byte(s.Campaign))
	w.U8(byte(m.Kind))
	w.U32(uint32(m.Length))
	w.U8(byte(m.Bits))
	w.U32(uint32(m.MaxWeight))
	w.U32(uint32(m.Chunk))
	u64(w, m.L1)
	w.Raw(s.ListHash[:])
}

// body is the signed part: version ‖ type 6 ‖ campaign(len8) ‖ kind(1) ‖
// L(u32) ‖ b(1) ‖ max weight(u32) ‖ chunk(u32) ‖ S(u64) ‖ list hash(32) ‖
// min batch size(u64) ‖ ε(u64, IEEE 754 bits) ‖ n(1) ‖ n × (key id(1) ‖
// key(32)) ‖ status ε_c(u64, IEEE 754 bits) ‖ status δ(u64, IEEE 754
// bits).
func (s *Settings) body() ([]byte, error) {
	if len(s.Campaign) == 0 || len(s.Campaign) > 255 {
		return nil, fmt.Errorf("prio3: settings: campaign name of %d bytes", len(s.Campaign))
	}
	if len(s.LeaderKeys) > MaxLeaderKeys {
		return nil, fmt.Errorf("prio3: settings: %d leader keys, at most %d", len(s.LeaderKeys), MaxLeaderKeys)
	}
	if math.IsNaN(s.Epsilon) || math.IsInf(s.Epsilon, 0) || s.Epsilon < 0 {
		return nil, fmt.Errorf("prio3: settings: ε %v", s.Epsilon)
	}
	if err := CheckSettingsStatus(s.StatusEpsilon, s.StatusDelta); err != nil {
		return nil, fmt.Errorf("prio3: settings: %w", err)
	}
	w := protocol.Writer{B: make([]byte, 0, 176+33*len(s.LeaderKeys))}
	w.U8(WireVersion)
	w.U8(msgSettings)
	s.measurement(&w, s.Measurement)
	u64(&w, s.MinBatchSize)
	u64(&w, math.Float64bits(s.Epsilon))
	w.U8(byte(len(s.LeaderKeys)))
	for _, k := range s.LeaderKeys {
		w.U8(k.ID)
		w.Raw(k.Key[:])
	}
	u64(&w, math.Float64bits(s.StatusEpsilon))
	u64(&w, math.Float64bits(s.StatusDelta))
	return w.B, nil
}

// SignedSettings is a leader's settings announcement: Settings signed
// with the leader operator's Ed25519 key (RFC 8032;
// keydir.Prio3LeaderSignKey, the key the helper already verifies the
// leader's requests with), so a client that pins that public key knows
// the settings are the leader's, whoever carried them.
type SignedSettings struct {
	Settings Settings
	Sig      [ed25519.SignatureSize]byte
	body     []byte
}

// SignSettings signs s (its chunk length resolved, Config.Resolved) with
// key and returns the announcement's encoding: body ‖ signature(64), the
// signature over SettingsDomain ‖ body.
func SignSettings(key ed25519.PrivateKey, s *Settings) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("prio3: no leader signing key (crowdlog keys generate --role prio3-leader)")
	}
	r := *s
	r.Measurement = s.Measurement.Resolved()
	b, err := r.body()
	if err != nil {
		return nil, err
	}
	sig := ed25519.Sign(key, append([]byte(SettingsDomain), b...))
	return append(b, sig...), nil
}

// Verify checks the announcement's signature under pub (the pinned
// leader signing key); errors wrap ErrSettings.
func (a *SignedSettings) Verify(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, append([]byte(SettingsDomain), a.body...), a.Sig[:]) {
		return ErrSettings
	}
	return nil
}

// ParseSignedSettings decodes an announcement (the signature is not
// checked: Verify). Errors wrap protocol.ErrMalformed.
func ParseSignedSettings(b []byte) (*SignedSettings, error) {
	if len(b) > 4096 {
		return nil, protocol.Malformed("prio3 settings of %d bytes", len(b))
	}
	r := protocol.Reader{B: b}
	readVersion(&r, "prio3 settings")
	if t := r.U8("prio3 settings type"); r.Err == nil && t != msgSettings {
		r.Err = protocol.Malformed("prio3 settings: message type %d, want %d", t, msgSettings)
	}
	a := &SignedSettings{}
	s := &a.Settings
	s.Campaign = readCampaign(&r)
	s.Measurement.Kind = Kind(r.U8("kind"))
	s.Measurement.Length = int(r.U32("length"))
	s.Measurement.Bits = int(r.U8("bits"))
	s.Measurement.MaxWeight = int(r.U32("max weight"))
	s.Measurement.Chunk = int(r.U32("chunk"))
	s.Measurement.L1 = readU64(&r, "L1 bound")
	copy(s.ListHash[:], r.Take(32, "list hash"))
	s.MinBatchSize = readU64(&r, "min batch size")
	s.Epsilon = math.Float64frombits(readU64(&r, "epsilon"))
	if r.Err == nil && (math.IsNaN(s.Epsilon) || math.IsInf(s.Epsilon, 0) || s.Epsilon < 0) {
		r.Err = protocol.Malformed("prio3 settings: ε not a finite number ≥ 0")
	}
	n := int(r.U8("leader keys"))
	if r.Err == nil && n > MaxLeaderKeys {
		r.Err = protocol.Malformed("prio3 settings: %d leader keys, at most %d", n, MaxLeaderKeys)
	}
	for i := 0; i < n && r.Err == nil; i++ {
		var k LeaderKey
		k.ID = r.U8("key id")
		copy(k.Key[:], r.Take(32, "leader key"))
		s.LeaderKeys = append(s.LeaderKeys, k)
	}
	s.StatusEpsilon = math.Float64frombits(readU64(&r, "status epsilon"))
	s.StatusDelta = math.Float64frombits(readU64(&r, "status delta"))
	if r.Err == nil {
		if err := CheckSettingsStatus(s.StatusEpsilon, s.StatusDelta); err != nil {
			r.Err = protocol.Malformed("prio3 settings: %v", err)
		}
	}
	bodyLen := len(b) - len(r.B)
	copy(a.Sig[:], r.Take(ed25519.SignatureSize, "signature"))
	if err := r.Done("prio3 settings"); err != nil {
		return nil, err
	}
	a.body = b[:bodyLen]
	return a, nil
}
