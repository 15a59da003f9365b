package prio3

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/cloudflare/circl/kem"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// HPKE infos (RFC 9180 §5.1) of the three sealed objects; the suite is the
// onion layers' (onion.Suite: X25519, HKDF-SHA256, ChaCha20-Poly1305).
var (
	infoReport   = []byte("crowdlog-v1 prio3 report")
	infoHelper   = []byte("crowdlog-v1 prio3 helper share")
	infoAggShare = []byte("crowdlog-v1 prio3 aggregate share")
)

// encSize is X25519's encapsulated key size.
const encSize = 32

// MaxReport bounds a report's plaintext: 16 B·L·b for the leader share at
// L = 10,000, b = 16 is 2.56 MB.
const MaxReport = 4 << 20

// Day is a UTC day, days since 1970-01-01.
type Day uint32

// DayOf returns t's UTC day.
func DayOf(t time.Time) Day { return Day(t.UTC().Unix() / 86400) }

// Start is the day's first instant (UTC).
func (d Day) Start() time.Time { return time.Unix(int64(d)*86400, 0).UTC() }

func (d Day) String() string { return d.Start().Format("2006-01-02") }

// ReportID is a report's id and the VDAF nonce: 16 random bytes.
type ReportID [NonceSize]byte

// Report is a client's upload for one campaign-day, as the leader reads it
// after opening it (DAP's Report: metadata, public share, the leader's
// input share in the clear inside the leader's seal, the helper's input
// share sealed to the helper).
type Report struct {
	Campaign     string
	Day          Day
	ID           ReportID
	PublicShare  []byte // VDAF-14 public share: the two joint-randomness parts, 2 × 32 B
	LeaderShare  []byte // encoded leader input share: measurement and proof shares, 16 B each element, and a 32 B blind
	SealedHelper []byte // enc (32 B) ‖ HPKE ciphertext of the helper's input share (64 B: two seeds)
	// HelperToken is the encoded Privacy Pass token (protocol/token,
	// KindPrio3Helper, 162 B) that the helper verifies and spends before it
	// prepares the report: issued by the helper's operator, one per enrolled
	// identity per campaign-day, its nonce HelperNonce. Empty when the
	// client has none (a helper that requires tokens refuses the report).
	HelperToken []byte
	// LeaderToken is the encoded Privacy Pass token (protocol/token,
	// KindPrio3Leader, 162 B) that the leader verifies and spends before it
	// prepares the report: issued by the leader's operator, one per
	// enrolled identity per campaign-day, its nonce HelperNonce too (the
	// token kinds' keys differ). Empty when the client has none (a leader
	// that requires tokens refuses the report). Never forwarded.
	LeaderToken []byte
}

// MaxHelperToken bounds Report.HelperToken, Report.LeaderToken and
// PrepItem.HelperToken.
const MaxHelperToken = 512

// HelperNonce is the nonce of the report's helper token
// (token.Prio3Nonce): campaign, day, id, public share and sealed helper
// share, so the token cannot be moved to another report.
func (r *Report) HelperNonce() [32]byte {
	return token.Prio3Nonce(r.Campaign, uint32(r.Day), r.ID, r.PublicShare, r.SealedHelper)
}

// Clip returns counts clipped to c.Max() (presence: 1 when > 0) and how
// many entries were reduced. The client clips: the proof makes a larger
// value impossible to prepare, not quietly capped. For SumVec with L1 > 0
// the clipped vector's sum is then bounded by L1: the keywords with the
// highest raw counts are kept (ties: the earlier keyword), the first that
// does not fit whole keeps what is left of L1, the others become 0 — as a
// presence client keeps its MaxWeight most searched keywords.
func (c Config) Clip(counts []uint64) ([]uint64, int) {
	out := make([]uint64, len(counts))
	clipped := 0
	m := c.Max()
	var sum uint64
	for i, x := range counts {
		if x > m {
			clipped++
			x = m
		}
		out[i] = x
		sum += x
	}
	if c.Kind != KindSumVec || c.L1 == 0 || sum <= c.L1 {
		return out, clipped
	}
	var set []int
	for i, x := range out {
		if x > 0 {
			set = append(set, i)
		}
	}
	slices.SortStableFunc(set, func(a, b int) int { return cmp.Compare(counts[b], counts[a]) })
	left := c.L1
	for _, i := range set {
		x := min(out[i], left)
		if x != out[i] {
			if counts[i] <= m { // else counted above
				clipped++
			}
			out[i] = x
		}
		left -= x
	}
	return out, clipped
}

// ErrTooManyKeywords: a presence measurement with more than MaxWeight
// keywords set. The client must choose which keywords to report.
var ErrTooManyKeywords = fmt.Errorf("prio3: presence report with more keywords than the campaign's max weight")

// Shard builds a client's upload for campaign and day from counts (one per
// keyword, len = Length), clipped first (clipped = entries reduced): a
// fresh report id (the nonce), VDAF-14 sharding, the helper's input share
// sealed to helper and the whole report sealed to leader. The upload is
// what the onion's innermost layer carries to the leader.
func (v *VDAF) Shard(campaign string, day Day, counts []uint64, leader, helper onion.PublicKey) (upload []byte, id ReportID, clipped int, err error) {
	r, clipped, err := v.ShardReport(campaign, day, counts, helper)
	if err != nil {
		return nil, id, clipped, err
	}
	upload, err = r.Seal(leader)
	return upload, r.ID, clipped, err
}

// ShardReport is Shard without the leader's seal: the report with the
// helper's share sealed, for the client to attach its helper token
// (HelperNonce) before Seal.
func (v *VDAF) ShardReport(campaign string, day Day, counts []uint64, helper onion.PublicKey) (r *Report, clipped int, err error) {
	var id ReportID
	if len(counts) != v.Config.Length {
		return nil, 0, fmt.Errorf("prio3: %d counts for a campaign of %d keywords", len(counts), v.Config.Length)
	}
	m, clipped := v.Config.Clip(counts)
	if v.Config.Kind == KindPresence {
		w := 0
		for _, x := range m {
			if x != 0 {
				w++
			}
		}
		if w > v.Config.MaxWeight {
			return nil, clipped, fmt.Errorf("%w: %d > %d", ErrTooManyKeywords, w, v.Config.MaxWeight)
		}
	}
	if _, err := rand.Read(id[:]); err != nil {
		return nil, 0, err
	}
	rnd := make([]byte, v.RandSize())
	if _, err := rand.Read(rnd); err != nil {
		return nil, 0, err
	}
	pub, ls, hs, err := v.shard(m, id, rnd)
	if err != nil {
		return nil, clipped, fmt.Errorf("prio3: shard: %w", err)
	}
	r = &Report{Campaign: campaign, Day: day, ID: id, PublicShare: pub, LeaderShare: ls}
	if err := r.SealHelper(helper, hs); err != nil {
		return nil, clipped, err
	}
	return r, clipped, nil
}

// SealHelper seals the helper's encoded input share to helper into
// r.SealedHelper, bound to r's campaign, day, id and public share (set them
// first).
func (r *Report) SealHelper(helper onion.PublicKey, share []byte) error {
	s, err := seal(helper.Key, infoHelper, r.helperAAD(), share)
	r.SealedHelper = s
	return err
}

// helperAAD is the AAD of the helper's sealed input share (DAP's
// InputShareAad: task, metadata, public share): it binds the share to its
// campaign, day, id and public share.
func (r *Report) helperAAD() []byte {
	w := protocol.Writer{}
	w.U8(WireVersion)
	w.Bytes8([]byte(r.Campaign))
	w.U32(uint32(r.Day))
	w.Raw(r.ID[:])
	w.Bytes32(r.PublicShare)
	return w.B
}

func seal(pk kem.PublicKey, info, aad, msg []byte) ([]byte, error) {
	snd, err := onion.Suite.NewSender(pk, info)
	if err != nil {
		return nil, fmt.Errorf("prio3: hpke: %w", err)
	}
	enc, s, err := snd.Setup(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("prio3: hpke: %w", err)
	}
	ct, err := s.Seal(msg, aad)
	if err != nil {
		return nil, fmt.Errorf("prio3: hpke: %w", err)
	}
	return append(enc, ct...), nil
}

func open(sk kem.PrivateKey, info, aad, b []byte) ([]byte, error) {
	if len(b) < encSize+16 {
		return nil, protocol.Malformed("prio3: sealed object of %d bytes", len(b))
	}
	rcv, err := onion.Suite.NewReceiver(sk, info)
	if err != nil {
		return nil, fmt.Errorf("prio3: hpke: %w", err)
	}
	o, err := rcv.Setup(b[:encSize])
	if err != nil {
		return nil, protocol.Malformed("prio3: hpke setup: %v", err)
	}
	pt, err := o.Open(b[encSize:], aad)
	if err != nil {
		return nil, protocol.Malformed("prio3: hpke open: %v", err)
	}
	return pt, nil
}

// MarshalBinary encodes the report's plaintext:
// version(1) ‖ campaign(len8) ‖ day(u32) ‖ id(16) ‖ public(len32) ‖
// leader share(len32) ‖ sealed helper share(len32) ‖ helper token(len16)
// [‖ leader token(len16), only when set].
func (r *Report) MarshalBinary() ([]byte, error) {
	if !blind.ValidCampaign(r.Campaign) {
		return nil, fmt.Errorf("prio3: invalid campaign name %q", r.Campaign)
	}
	if max(len(r.HelperToken), len(r.LeaderToken)) > MaxHelperToken {
		return nil, fmt.Errorf("prio3: token of %d bytes exceeds %d", max(len(r.HelperToken), len(r.LeaderToken)), MaxHelperToken)
	}
	w := protocol.Writer{B: make([]byte, 0, 64+len(r.PublicShare)+len(r.LeaderShare)+len(r.SealedHelper))}
	w.U8(WireVersion)
	w.Bytes8([]byte(r.Campaign))
	w.U32(uint32(r.Day))
	w.Raw(r.ID[:])
	w.Bytes32(r.PublicShare)
	w.Bytes32(r.LeaderShare)
	w.Bytes32(r.SealedHelper)
	w.Bytes16(r.HelperToken)
	if len(r.LeaderToken) > 0 {
		w.Bytes16(r.LeaderToken)
	}
	return w.B, nil
}

func readVersion(r *protocol.Reader, what string) {
	if v := r.U8(what + " version"); r.Err == nil && v != WireVersion {
		r.Err = protocol.Malformed("%s version %d, want %d (upgrade the sender or this service)", what, v, WireVersion)
	}
}

func readToken(r *protocol.Reader) []byte {
	t := r.Bytes16("helper token")
	if r.Err == nil && len(t) > MaxHelperToken {
		r.Err = protocol.Malformed("helper token of %d bytes exceeds %d", len(t), MaxHelperToken)
	}
	if len(t) == 0 {
		return nil
	}
	return t
}

func readCampaign(r *protocol.Reader) string {
	c := string(r.Bytes8("campaign"))
	if r.Err == nil && !blind.ValidCampaign(c) {
		r.Err = protocol.Malformed("invalid campaign name %q", c)
	}
	return c
}

// ParseReport decodes a report's plaintext. Errors wrap
// protocol.ErrMalformed.
func ParseReport(b []byte) (*Report, error) {
	if len(b) > MaxReport {
		return nil, protocol.Malformed("prio3: report of %d bytes exceeds %d", len(b), MaxReport)
	}
	rd := protocol.Reader{B: b}
	readVersion(&rd, "prio3 report")
	r := &Report{Campaign: readCampaign(&rd), Day: Day(rd.U32("day"))}
	copy(r.ID[:], rd.Take(NonceSize, "report id"))
	r.PublicShare = rd.Bytes32("public share")
	r.LeaderShare = rd.Bytes32("leader share")
	r.SealedHelper = rd.Bytes32("sealed helper share")
	r.HelperToken = readToken(&rd)
	if rd.Err == nil && len(rd.B) > 0 {
		if r.LeaderToken = readToken(&rd); rd.Err == nil && r.LeaderToken == nil {
			return nil, protocol.Malformed("prio3 report with an empty leader token")
		}
	}
	if err := rd.Done("prio3 report"); err != nil {
		return nil, err
	}
	return r, nil
}

// Seal seals the report to the leader: version(1) ‖ key id(1) ‖ enc(32) ‖
// HPKE ciphertext (AAD = the first two bytes).
func (r *Report) Seal(leader onion.PublicKey) ([]byte, error) {
	pt, err := r.MarshalBinary()
	if err != nil {
		return nil, err
	}
	hdr := []byte{WireVersion, leader.ID}
	ct, err := seal(leader.Key, infoReport, hdr, pt)
	if err != nil {
		return nil, err
	}
	return append(hdr, ct...), nil
}

// OpenReport opens an upload with whichever of keys has its key id (two
// during a rotation) and parses it. Errors: onion.ErrUnknownKey; wrapping
// protocol.ErrMalformed for bad framing or failed decryption.
func OpenReport(keys []*onion.KeyPair, upload []byte) (*Report, error) {
	if len(upload) < 2 || len(upload) > MaxReport+64 {
		return nil, protocol.Malformed("prio3: upload of %d bytes", len(upload))
	}
	if upload[0] != WireVersion {
		return nil, protocol.Malformed("prio3: upload version %d, want %d", upload[0], WireVersion)
	}
	for _, k := range keys {
		if k.ID == upload[1] {
			pt, err := open(k.Private, infoReport, upload[:2], upload[2:])
			if err != nil {
				return nil, err
			}
			return ParseReport(pt)
		}
	}
	return nil, fmt.Errorf("%w: %d", onion.ErrUnknownKey, upload[1])
}

// OpenHelperShare opens the helper's input share of report metadata
// (campaign, day, id, public share) with the helper's key. Errors wrap
// protocol.ErrMalformed.
func OpenHelperShare(helper *onion.KeyPair, campaign string, day Day, id ReportID, public, sealed []byte) ([]byte, error) {
	r := Report{Campaign: campaign, Day: day, ID: id, PublicShare: public}
	return open(helper.Private, infoHelper, r.helperAAD(), sealed)
}

// Checksum is a batch's report-id checksum: the XOR of SHA-256 of every
// committed report id (DAP §4.6 report_count and checksum).
type Checksum [32]byte

// Add folds id into c.
func (c *Checksum) Add(id ReportID) {
	h := sha256.Sum256(id[:])
	for i := range c {
		c[i] ^= h[i]
	}
}

func u64(w *protocol.Writer, x uint64) { w.B = binary.BigEndian.AppendUint64(w.B, x) }

func readU64(r *protocol.Reader, what string) uint64 {
	p := r.Take(8, what)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}
