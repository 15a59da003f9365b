package blind

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// ErrMalformedCoordination is wrapped by every decoding error of
// coordinator messages.
var ErrMalformedCoordination = errors.New("coordinator: malformed message")

// ErrBadSignature is wrapped when a signed coordination message does not
// verify under the key it must come from.
var ErrBadSignature = errors.New("coordinator: bad signature")

// Purposes of signed coordination messages: the signature covers
// "crowdlog-v2 pdd <purpose>\x00" ‖ body, so a signature made for one
// message kind never verifies as another.
const (
	PurposeRegister = "register" // client, own new signing key (proof of possession)
	PurposePing     = "ping"     // client, registered signing key
	PurposeDeposit  = "deposit"  // client, registered signing key
	PurposeBundles  = "bundles"  // client, registered signing key
	PurposeRecovery = "recovery" // aggregator credential
	PurposeAdvance  = "advance"  // operator credential
)

// Signed is a signed coordination message (Ed25519, RFC 8032): Body is the
// request's JSON and Sig = Ed25519(key, "crowdlog-v2 pdd "+purpose+"\x00" ‖
// Body). Every client request carries its client id and a sequence number
// Seq that must grow from one request to the next, so a replayed message is
// refused.
type Signed struct {
	Body json.RawMessage `json:"body"`
	Sig  []byte          `json:"sig"`
}

func signedBytes(purpose string, body []byte) []byte {
	return append([]byte("crowdlog-v2 pdd "+purpose+"\x00"), body...)
}

// SignMessage encodes v as JSON and signs it for purpose.
func SignMessage(priv ed25519.PrivateKey, purpose string, v any) (Signed, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return Signed{}, err
	}
	return Signed{Body: body, Sig: ed25519.Sign(priv, signedBytes(purpose, body))}, nil
}

// Verify checks the signature under pub for purpose. Errors wrap
// ErrBadSignature.
func (s *Signed) Verify(pub []byte, purpose string) error {
	if len(pub) != ed25519.PublicKeySize || len(s.Sig) != ed25519.SignatureSize ||
		!ed25519.Verify(ed25519.PublicKey(pub), signedBytes(purpose, s.Body), s.Sig) {
		return fmt.Errorf("%w: %s message not signed by the expected key", ErrBadSignature, purpose)
	}
	return nil
}

// parseSigned decodes a signed envelope and its body into v.
func parseSigned(b []byte, v any) (*Signed, error) {
	var s Signed
	if err := decode(b, &s); err != nil {
		return nil, err
	}
	if len(s.Sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("%w: unsigned message (sign it with the client's registered key)", ErrMalformedCoordination)
	}
	if err := decode(s.Body, v); err != nil {
		return nil, err
	}
	return &s, nil
}

var clientID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// RegisterRequest registers a client's long-term X25519 public key (PDD §3.2
// Initialization) and its Ed25519 signing key, which signs every later
// request of the client (sent as Signed, signed by SignKey itself).
type RegisterRequest struct {
	PublicKey []byte `json:"public_key"`
	SignKey   []byte `json:"sign_key"`
}

// RegisterReply carries the client id the coordinator assigned.
type RegisterReply struct {
	ClientID string `json:"client_id,omitempty"`
	Error    string `json:"error,omitempty"`
	// Campaign, Keywords, L and ListHash are the coordinator's campaign
	// (as its Instructions give them), so that a client refuses to start
	// when its campaign or keyword list is not the coordinator's; absent
	// from older coordinators.
	Campaign string `json:"campaign,omitempty"`
	Keywords string `json:"keywords,omitempty"`
	L        int    `json:"l,omitempty"`
	ListHash []byte `json:"list_hash,omitempty"`
}

// PingRequest is a client's daily contact (PDD §3.4): it marks the client
// active today and asks for its instructions.
type PingRequest struct {
	ClientID string `json:"client_id"`
	Campaign string `json:"campaign"`
	Seq      uint64 `json:"seq"`
}

// Task is one submission a client owes: its counts of day Round for group
// Group, as member Member of a roster of public keys Members.
type Task struct {
	Round    int32    `json:"round"`
	Group    uint32   `json:"group"`
	Member   int      `json:"member"`
	Members  [][]byte `json:"members"`
	T        int      `json:"t"`
	Deadline int32    `json:"deadline"`
	// Sig is the coordinator's Ed25519 signature of the task (SignTask;
	// absent from a coordinator without a signing key).
	Sig []byte `json:"sig,omitempty"`
}

// Instance is the task's protocol instance.
func (t *Task) Instance(campaign string) Instance {
	return Instance{Campaign: campaign, Round: t.Round, Group: t.Group}
}

// RecoveryTask asks a survivor for its recovery answer: the group's task
// and the members that never submitted. The sealed bundles addressed to
// this member are not in it (n of them, about 44·n bytes each, would
// outgrow a NATS message): the survivor fetches them page by page with
// BundlesRequest.
type RecoveryTask struct {
	Task
	Dropped []uint16 `json:"dropped"`
}

// Instructions is the ping reply: today's day, the campaign's keyword list
// (name, L and hash, which the client checks against its own copy), owed
// submissions and recovery tasks.
type Instructions struct {
	Day        int32          `json:"day"`
	Campaign   string         `json:"campaign"`
	Keywords   string         `json:"keywords"`
	L          int            `json:"l"`
	ListHash   []byte         `json:"list_hash"`
	Tasks      []Task         `json:"tasks,omitempty"`
	Recoveries []RecoveryTask `json:"recoveries,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// DepositRequest is chunk Chunk of Chunks of member From's deposit for one
// instance: some of its n sealed bundles, and in the last chunk
// (Chunk == Chunks−1) only, its commitments (Roots, one 32-byte Merkle root
// per holder, n of them). A whole deposit is about 44·n² bytes, so it is
// sent as several signed requests (SplitDeposit), each with its own growing
// Seq and at most MaxMessageBytes of JSON. The coordinator stores each
// chunk's bundles; on the last chunk it checks that all n bundles of the
// dealer are stored and only then accepts the commitments, so a lost chunk
// fails the deposit and the client sends it all again. Chunks 0 reads as 1
// (a deposit in one request). ClientID must be the roster's member From.
type DepositRequest struct {
	ClientID string         `json:"client_id"`
	Seq      uint64         `json:"seq"`
	Roots    [][]byte       `json:"roots"`
	Campaign string         `json:"campaign"`
	Round    int32          `json:"round"`
	Group    uint32         `json:"group"`
	From     uint16         `json:"from"`
	Bundles  []SealedBundle `json:"bundles"`
	Chunk    int            `json:"chunk"`
	Chunks   int            `json:"chunks"`
}

// Last reports whether d is its deposit's last chunk (the one carrying the
// roots).
func (d *DepositRequest) Last() bool { return d.Chunk == max(d.Chunks, 1)-1 }

// BundlesRequest asks for one page of the sealed bundles addressed to
// member Member of an instance: those of dealers From ≥ Offset, in dealer
// order. The coordinator answers only the roster's member Member (ClientID),
// only while the instance's recovery request is stored and names it a
// survivor.
type BundlesRequest struct {
	ClientID string `json:"client_id"`
	Seq      uint64 `json:"seq"`
	Campaign string `json:"campaign"`
	Round    int32  `json:"round"`
	Group    uint32 `json:"group"`
	Member   int    `json:"member"`
	Offset   int    `json:"offset"`
}

// BundlesReply is one page of bundles (at most MaxMessageBytes of JSON,
// From ascending, To the requesting member) and Next, the Offset of the
// next page, or −1 when this page is the last.
type BundlesReply struct {
	Bundles []SealedBundle `json:"bundles,omitempty"`
	Next    int            `json:"next"`
	Error   string         `json:"error,omitempty"`
}

// Sizes of chunked coordination messages.
const (
	// MaxMessageBytes bounds the JSON of one deposit chunk or bundles page
	// (signed envelope included): 512 KiB, half of NATS's default maximum
	// payload of 1 MiB.
	MaxMessageBytes = 512 << 10
	// MessageOverhead bounds the JSON bytes of a deposit chunk or bundles
	// page outside its bundles and roots: ids, campaign (≤ 64 bytes),
	// numbers, field names, the signature.
	MessageOverhead = 1 << 10
	// MaxChunks bounds a deposit's chunk count.
	MaxChunks = 1 << 16
)

// BundleJSONSize bounds the bytes sb takes in a JSON message, its
// separating comma included: the base64 ciphertext (4/3 of its length,
// padded) and 48 bytes of field names and numbers.
func BundleJSONSize(sb SealedBundle) int {
	return base64.StdEncoding.EncodedLen(len(sb.Ciphertext)) + 48
}

// RootsJSONSize bounds the bytes n 32-byte commitment roots take in a JSON
// message: 44 base64 characters, quotes and a comma each.
func RootsJSONSize(n int) int { return 47 * n }

// SplitDeposit splits a whole deposit d (every bundle and every root, Seq
// unset) into chunks whose JSON, signed, stays within maxBytes each
// (MaxMessageBytes on the wire): bundles in order, as many per chunk as fit;
// the roots in the last chunk, which may carry no bundle when they do not
// fit beside the last bundles. Chunk and Chunks are set; the caller sets
// each chunk's Seq and signs it. Errors: a bundle or the roots that alone
// exceed maxBytes − MessageOverhead, or more than MaxChunks chunks.
func SplitDeposit(d DepositRequest, maxBytes int) ([]DepositRequest, error) {
	budget := maxBytes - MessageOverhead
	chunk := func(bs []SealedBundle) DepositRequest {
		c := d
		c.Roots, c.Bundles, c.Seq = nil, bs, 0
		return c
	}
	var out []DepositRequest
	var cur []SealedBundle
	size := 0
	for _, sb := range d.Bundles {
		s := BundleJSONSize(sb)
		if s > budget {
			return nil, fmt.Errorf("blind: a bundle of %d bytes does not fit in a deposit chunk of %d bytes", len(sb.Ciphertext), maxBytes)
		}
		if size+s > budget {
			out = append(out, chunk(cur))
			cur, size = nil, 0
		}
		cur = append(cur, sb)
		size += s
	}
	rs := RootsJSONSize(len(d.Roots))
	if rs > budget {
		return nil, fmt.Errorf("blind: %d commitment roots (%d bytes of JSON) do not fit in a deposit chunk of %d bytes", len(d.Roots), rs, maxBytes)
	}
	if size+rs > budget {
		out = append(out, chunk(cur))
		cur = nil
	}
	last := chunk(cur)
	last.Roots = d.Roots
	out = append(out, last)
	if len(out) > MaxChunks {
		return nil, fmt.Errorf("blind: a deposit of %d chunks (at most %d)", len(out), MaxChunks)
	}
	for k := range out {
		out[k].Chunk, out[k].Chunks = k, len(out)
	}
	return out, nil
}

// AdvanceRequest starts day Day (the operator's or a log replay's clock;
// with a wall clock the coordinator advances by itself).
type AdvanceRequest struct {
	Day int32 `json:"day"`
}

// AdvanceReply reports the groups formed for round Day−1.
type AdvanceReply struct {
	Day     int32  `json:"day"`
	Groups  int    `json:"groups"`
	Active  int    `json:"active"`
	Grouped int    `json:"grouped"`
	Error   string `json:"error,omitempty"`
}

// Reply is the generic acknowledgement.
type Reply struct {
	Error string `json:"error,omitempty"`
}

func decode(b []byte, v any) error {
	if len(b) > 64<<20 {
		return fmt.Errorf("%w: %d bytes", ErrMalformedCoordination, len(b))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedCoordination, err)
	}
	return nil
}

// ParsePing decodes and validates a signed ping; the caller verifies the
// signature with the client's registered key. Errors wrap
// ErrMalformedCoordination.
func ParsePing(b []byte) (*PingRequest, *Signed, error) {
	var p PingRequest
	s, err := parseSigned(b, &p)
	if err != nil {
		return nil, nil, err
	}
	if !clientID.MatchString(p.ClientID) || !ValidCampaign(p.Campaign) {
		return nil, nil, fmt.Errorf("%w: bad client id or campaign", ErrMalformedCoordination)
	}
	return &p, s, nil
}

// ParseRegister decodes, validates and verifies a signed registration (the
// signature must verify under the SignKey it registers). Errors wrap
// ErrMalformedCoordination or ErrBadSignature.
func ParseRegister(b []byte) (*RegisterRequest, error) {
	var r RegisterRequest
	s, err := parseSigned(b, &r)
	if err != nil {
		return nil, err
	}
	if len(r.PublicKey) != 32 || len(r.SignKey) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: keys of %d and %d bytes, want 32 (X25519) and 32 (Ed25519)", ErrMalformedCoordination, len(r.PublicKey), len(r.SignKey))
	}
	if err := s.Verify(r.SignKey, PurposeRegister); err != nil {
		return nil, err
	}
	return &r, nil
}

// ParseDeposit decodes and validates a signed deposit chunk: campaign and
// client id, 0 ≤ Chunk < Chunks ≤ MaxChunks (Chunks 0 is read as 1), roots
// of 32 bytes and only in the last chunk, bundles from From of 48 bytes to
// 1 MiB. Whether the deposit holds one bundle and one root per member is
// the coordinator's check on the last chunk (it knows n). The caller
// verifies the signature with the client's registered key. Errors wrap
// ErrMalformedCoordination.
func ParseDeposit(b []byte) (*DepositRequest, *Signed, error) {
	var d DepositRequest
	s, err := parseSigned(b, &d)
	if err != nil {
		return nil, nil, err
	}
	if !ValidCampaign(d.Campaign) || !clientID.MatchString(d.ClientID) {
		return nil, nil, fmt.Errorf("%w: campaign or client id", ErrMalformedCoordination)
	}
	if d.Chunks == 0 {
		d.Chunks = 1
	}
	if d.Chunk < 0 || d.Chunk >= d.Chunks || d.Chunks > MaxChunks {
		return nil, nil, fmt.Errorf("%w: chunk %d of %d (want 0 ≤ chunk < chunks ≤ %d)", ErrMalformedCoordination, d.Chunk, d.Chunks, MaxChunks)
	}
	if !d.Last() && len(d.Roots) > 0 {
		return nil, nil, fmt.Errorf("%w: commitment roots in chunk %d of %d (only the last chunk carries them)", ErrMalformedCoordination, d.Chunk, d.Chunks)
	}
	for _, r := range d.Roots {
		if len(r) != 32 {
			return nil, nil, fmt.Errorf("%w: commitment root of %d bytes", ErrMalformedCoordination, len(r))
		}
	}
	for _, sb := range d.Bundles {
		if sb.From != d.From || len(sb.Ciphertext) < 48 || len(sb.Ciphertext) > 1<<20 {
			return nil, nil, fmt.Errorf("%w: bundle %d→%d", ErrMalformedCoordination, sb.From, sb.To)
		}
	}
	return &d, s, nil
}

// ParseBundles decodes and validates a signed bundles request: campaign,
// client id, 0 ≤ Member < 65536 and 0 ≤ Offset < 65536. The caller verifies
// the signature with the client's registered key. Errors wrap
// ErrMalformedCoordination.
func ParseBundles(b []byte) (*BundlesRequest, *Signed, error) {
	var r BundlesRequest
	s, err := parseSigned(b, &r)
	if err != nil {
		return nil, nil, err
	}
	if !ValidCampaign(r.Campaign) || !clientID.MatchString(r.ClientID) {
		return nil, nil, fmt.Errorf("%w: campaign or client id", ErrMalformedCoordination)
	}
	if r.Member < 0 || r.Member > 0xffff || r.Offset < 0 || r.Offset > 0xffff {
		return nil, nil, fmt.Errorf("%w: member %d, offset %d", ErrMalformedCoordination, r.Member, r.Offset)
	}
	return &r, s, nil
}

// ParseRecovery decodes a signed recovery request from the aggregator; the
// caller verifies the signature with the aggregator's credential.
func ParseRecovery(b []byte) (*Request, *Signed, error) {
	var r Request
	s, err := parseSigned(b, &r)
	if err != nil {
		return nil, nil, err
	}
	if !ValidCampaign(r.Instance.Campaign) {
		return nil, nil, fmt.Errorf("%w: campaign", ErrMalformedCoordination)
	}
	if err := r.Check(-1, r.N); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrMalformedCoordination, err)
	}
	return &r, s, nil
}

// ParseAdvance decodes a signed advance request; the caller verifies the
// signature with the operator's credential.
func ParseAdvance(b []byte) (*AdvanceRequest, *Signed, error) {
	var a AdvanceRequest
	s, err := parseSigned(b, &a)
	if err != nil {
		return nil, nil, err
	}
	return &a, s, nil
}
