// Package aggregator is crowdlog's threshold aggregation (CrowdLogging §3.1,
// STAR §4): it collects reports keyed by (tag, commitment), recovers an
// artifact's key once k distinct shares exist, decrypts every report of that
// group and emits the decrypted items.
//
// Verifiable shares: every report carries the Feldman commitment to its
// polynomial (protocol/feldman.go). Reports with different commitments under
// one tag are kept apart, so a poisoner's own polynomial never mixes with
// the honest one. Every share that takes part in a recovery or whose report
// is decrypted is checked against the commitment first:
//   - at k distinct shares (vss.Commitment.RecoverVerified), all k in one
//     batch: the polynomial f through them (vss.Interpolate) is checked
//     against the commitment
//     (Commitment.VerifyPolynomial: Bellare–Garay–Rabin small-exponents
//     test on f's coefficients, soundness error 2^−128, ~25 µs per share at
//     k = 5). The k shares are all valid iff f is the committed polynomial,
//     and then f(0) is the secret. When the batch fails, every share is
//     checked alone (VerifyShare), the bad ones are dropped with their
//     reports ("bad-share"), and from then on the group is suspect: each new
//     share is checked alone on arrival, so bad shares never reach a
//     recovery;
//   - reports repeating a verified share's x (FT_u impressions) must carry
//     the same y;
//   - reports arriving after the recovery are checked against the verified
//     f (y == f(x): a few scalar multiplications, the same verdict as
//     Feldman's equation).
//
// No number of bad shares blocks or corrupts recovery (the old AEAD subset
// search gave up after MaxAttempts). The core (Partition) is a pure state
// machine over one Kafka partition's messages (deterministic up to the
// batch check's 2^−128 error); Service runs it over a Kafka consumer group.
// Apply is Prepare (the stateless, concurrency-safe part: peel, parse,
// token and presentation verification) followed by ApplyPrepared (the
// state step, in message order).
package aggregator

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sort"
	"sync"

	"github.com/cloudflare/circl/group"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// Message is one record of the reports topic as the core sees it.
type Message struct {
	Value   []byte
	Control bool // carries protocol.ControlHeader: Value is a protocol.EpochOpen or protocol.EpochClose (protocol.ParseControl)
}

// Stats counts what a Partition did. Dropped reasons for reports:
// malformed (bad onion layer or report), unknown-key, duplicate (a report
// id already seen: relays deliver at least once), late (epoch already
// closed), unknown-epoch (with RequireOpen: an (app, epoch) never opened by
// an EpochOpen), epoch-full (the epoch's groups below threshold already
// hold MaxPendingReports reports or MaxPendingBytes bytes in this
// partition), bad-share (a share that fails the Feldman check against its
// report's commitment), bad-commitment (commitment points that do not
// decode), bad-ciphertext (AEAD fails under the recovered key); with
// ReportKeys: no-token, bad-token (does not parse, is not bound to the
// report, or does not verify), spent-token (a report token accepted
// before: a replayed report), token-key (no report-token key for the
// epoch); with ARCKeys, FT_u reports: bad-presentation (missing, not
// verifying for the report's artifact, or its tag does not give the
// share's x), arc-key (no ARC key for the epoch). For control
// messages: malformed-control, open-refused (an EpochOpen beyond
// MaxOpenEpochs open epochs of its app), open-after-close (an EpochOpen of
// a closed epoch).
type Stats struct {
	Reports       int64 // reports accepted
	Decrypted     int64 // reports decrypted and emitted
	Recoveries    int64 // groups whose key was recovered
	FailedRecover int64 // recovery attempts whose k shares failed the batch check (without verification: whose key failed the AEAD)
	Dropped       map[string]int64
}

type epochKey struct{ app, epoch string }

// epochState is the per-(app, epoch) accounting of a Partition. held counts
// the report ids remembered by the epoch's groups below threshold (pending
// reports, and reports dropped from such groups: their ids stay for
// duplicate detection); heldBytes charges each of them its size
// (reportBytes) on arrival. Both fall by a group's share when it recovers.
type epochState struct {
	app, epoch      string
	open            bool // opened by an EpochOpen (not just seen without RequireOpen)
	held, heldBytes int64
	// spent holds the spend ids (token.Token.SpendID) of the report tokens
	// accepted in this epoch and partition (with ReportKeys): a report
	// token seen again is a replayed report ("spent-token"). Part of the
	// replayed state, so a rebuilt partition gives the same verdicts.
	spent map[[32]byte]struct{}
}

// Defaults of the Partition's bounds (Service options and `crowdlog
// aggregate` flags set them).
const (
	// DefaultMaxOpenEpochs is the number of epochs per app that may be
	// open at once.
	DefaultMaxOpenEpochs = 8
	// DefaultMaxPendingReports bounds the reports held below threshold per
	// (app, epoch) and partition.
	DefaultMaxPendingReports = 4_000_000
	// DefaultMaxPendingBytes bounds their bytes (reportBytes) per (app,
	// epoch) and partition: 2 GiB, about 4,000,000 reports of k = 5.
	DefaultMaxPendingBytes = 2 << 30
)

// reportOverhead approximates what a held report costs besides its
// variable fields (Report struct, share, pending slot, id in seen), bytes.
const reportOverhead = 256

// reportBytes is what a held report is charged against MaxPendingBytes.
func reportBytes(r *star.Report) int64 {
	return int64(reportOverhead + len(r.App) + len(r.Epoch) + len(r.Commitment) + len(r.Ciphertext))
}

// groupID keys aggregation state (Partition.tags) by everything a
// report's metadata claims: one tag may carry several polynomials (an
// honest one and poisoners'), told apart by their commitments, and a report
// whose app, epoch, policy or k disagree with the honest ones forms a group
// of its own instead of claiming theirs (its AEAD binds the header, so it
// never opens; pipelines/attack.TestAttackPoisonedGroup). It is SHA-256
// over those fields, each of variable length with its length first, so two
// different claims collide only with a SHA-256 collision: 32 bytes a group
// in the map, which most pending groups, of one report each, pay in full.
type groupID [32]byte

// groupIDOf is r's groupID: app, epoch, policy, k, tag and the encoded
// commitment (k×32 bytes, length-checked by ParseReport).
func groupIDOf(r *star.Report) groupID {
	h := sha256.New()
	var b [4]byte
	h.Write([]byte("crowdlog-v1 group"))
	for _, f := range []string{r.App, r.Epoch} {
		binary.BigEndian.PutUint32(b[:], uint32(len(f)))
		h.Write(b[:])
		h.Write([]byte(f))
	}
	b[0] = byte(r.Policy)
	binary.BigEndian.PutUint16(b[1:3], r.K)
	h.Write(b[:3])
	h.Write(r.Tag[:])
	binary.BigEndian.PutUint32(b[:], uint32(len(r.Commitment)))
	h.Write(b[:])
	h.Write(r.Commitment)
	var id groupID
	h.Sum(id[:0])
	return id
}

type tagState struct {
	ep        *epochState // the group's app and epoch too
	heldBytes int64       // Σ reportBytes of the ids in seen while below threshold
	policy    star.Policy
	k         int
	key       *[32]byte
	// commitRaw is the encoded commitment C_0 ‖ … ‖ C_{k−1} (a copy),
	// commit its decoded form, built on first use (commitment): most
	// pending groups never verify a share before their epoch closes.
	commitRaw []byte
	commit    *vss.Commitment
	suspect   bool // a batch check failed: every new share is verified on arrival
	dead      bool // the commitment does not decode: every report is dropped
	tag       [32]byte
	shares    []vss.Share // distinct x, arrival order (at most k−1 before recovery)
	seen      idSet       // ids of the group's reports (duplicates are dropped)
	pending   []pendingReport
	poly      *vss.Polynomial // after a verified recovery: the committed polynomial
	// arcOK holds the share x-coordinates whose report carried a verified
	// ARC presentation (FT_u with ARCKeys): repeated impressions of one
	// (credential, artifact) carry the same x and are not verified again.
	// Only good verdicts are kept, so a bad presentation at an x never
	// blocks a good one; a repeat must carry the verified tag.
	arcOK map[[32]byte][32]byte // x → SHA-256 of the verified presentation tag
}

// MaxAttempts bounds the k-subsets tried per arriving share when recovery
// without share verification (the comparison baseline in tests) fails the
// AEAD check.
const MaxAttempts = 64

// Partition is the aggregation state of one reports partition. It is
// deterministic: the same message sequence gives the same outputs, which is
// what makes restart by replay exact. Epoch opens and closes are messages
// of that sequence too, so the bounds below hold identically on replay.
type Partition struct {
	ID, Count int // partition number and the topic's partition count
	Keys      []*onion.KeyPair
	// RequireOpen drops reports of an (app, epoch) that no EpochOpen
	// opened ("unknown-epoch"; "late" after its close), so clients cannot
	// make the aggregator keep state for epochs they name. Service always
	// sets it; NewPartition leaves it off for offline tools that apply
	// reports without the topic's control messages (pipelines/attack).
	RequireOpen bool
	// MaxOpenEpochs bounds the open epochs per app; an EpochOpen beyond it
	// is refused ("open-refused"). ≤ 0: DefaultMaxOpenEpochs.
	MaxOpenEpochs int
	// MaxPendingReports and MaxPendingBytes bound what the groups of one
	// (app, epoch) below threshold hold in this partition (reports;
	// bytes as reportBytes charges them); a report beyond either is dropped
	// ("epoch-full"), a report of a group that already recovered never is.
	// ≤ 0: DefaultMaxPendingReports, DefaultMaxPendingBytes.
	MaxPendingReports int64
	MaxPendingBytes   int64
	tags              map[groupID]*tagState
	closed            map[epochKey]bool
	epochs            map[epochKey]*epochState // open epochs (and, without RequireOpen, epochs seen)
	openPerApp        map[string]int
	Stats             Stats
	// CoarseSummary rounds each undecrypted group's report count down to a
	// power of two in the epoch-close summary (protocol.SummaryBucket), so a summary
	// row says "Tags groups had between Reports and 2·Reports−1 reports"
	// instead of an exact count that a frequency-matching reader can pin to
	// one auxiliary query (docs/attacks.md, attack.TestFrequencySummary).
	// Shares (distinct users, < k) stay exact. Off by default: with it,
	// Σ Reports·Tags is only a lower bound of the undecrypted reports.
	CoarseSummary bool
	// ReportKeys returns the report-token key of an epoch (token.KindReport;
	// keydir.LoadTokenKey). Set, a report is accepted only with a valid
	// report token for its epoch bound to it (tokens.go): "no-token",
	// "bad-token", "spent-token", "token-key". nil: tokens off.
	ReportKeys func(epoch string) (*token.PrivateKey, error)
	// ARCKeys returns the ARC issuer key of an epoch (keydir.LoadARCKey).
	// Set, an FT_u report is accepted only with an ARC presentation that
	// verifies for its artifact and whose tag gives its share's x
	// ("bad-presentation", "arc-key"). nil: off.
	ARCKeys func(epoch string) (*arc.PrivateKey, error)
	// Every member of a group must set ReportKeys and ARCKeys alike, and
	// the keys of an epoch must exist before its first report arrives: a
	// report is judged once, and again identically on replay, only when
	// its epoch's keys load the same way each time.
	keysMu      sync.Mutex // reportKeys, arcKeys: Prepare runs concurrently
	reportKeys  map[string]*token.PrivateKey
	arcKeys     map[string]*arcVerifier
	arcVerified int64        // presentations accepted by a full verdict, not the per-(group, x) rule (tests)
	cache       *verifyCache // shared by a Service's partitions (nil: none)
	noVerify    bool         // baseline for benchmarks: no commitment checks, AEAD subset search
}

// PendingGroup is one (tag, commitment) group below threshold: what a thief
// of the aggregator's memory (or of the reports topic plus the aggregator
// key) holds about an artifact that has not opened. Tag and Commitment are
// hex (Commitment = vss.CommitmentHash of the vector); Reports counts
// its reports (impressions), Shares its distinct shares (distinct users
// under FT_u, always < K). The shares themselves and the ciphertexts are
// useless below K and are not included.
type PendingGroup struct {
	App        string `json:"app"`
	Epoch      string `json:"epoch"`
	Policy     string `json:"policy"`
	K          int    `json:"k"`
	Tag        string `json:"tag"`
	Commitment string `json:"commitment"`
	Reports    int    `json:"reports"`
	Shares     int    `json:"shares"`
}

// Pending returns every group of the partition still below threshold,
// sorted by tag then commitment: the pending state an auditor examines
// (`crowdlog attack snapshot`).
func (p *Partition) Pending() []PendingGroup {
	var out []PendingGroup
	for _, t := range p.tags {
		if t.key != nil || t.dead {
			continue
		}
		ch := vss.CommitmentHash(t.commitRaw)
		out = append(out, PendingGroup{App: t.ep.app, Epoch: t.ep.epoch, Policy: t.policy.String(), K: t.k,
			Tag: hex.EncodeToString(t.tag[:]), Commitment: hex.EncodeToString(ch[:]),
			Reports: len(t.pending), Shares: len(t.shares)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tag != out[j].Tag {
			return out[i].Tag < out[j].Tag
		}
		return out[i].Commitment < out[j].Commitment
	})
	return out
}

// NewPartition returns empty state for partition id of count, opening
// aggregator layers with keys, with RequireOpen off and the default bounds.
func NewPartition(id, count int, keys []*onion.KeyPair) *Partition {
	return &Partition{ID: id, Count: count, Keys: keys, tags: map[groupID]*tagState{},
		closed: map[epochKey]bool{}, epochs: map[epochKey]*epochState{}, openPerApp: map[string]int{},
		Stats: Stats{Dropped: map[string]int64{}}}
}

// PendingTags returns the number of (tag, commitment) groups still below
// threshold.
func (p *Partition) PendingTags() int {
	n := 0
	for _, t := range p.tags {
		if t.key == nil && !t.dead {
			n++
		}
	}
	return n
}

func (p *Partition) drop(reason string) { p.Stats.Dropped[reason]++ }

// Apply processes one message and returns what to emit, in order:
// ApplyPrepared(Prepare(m)). It never fails: bad messages are counted in
// Stats.Dropped and skipped.
func (p *Partition) Apply(m Message) []protocol.Decrypted {
	pm := p.Prepare(m)
	return p.ApplyPrepared(&pm)
}

// ApplyReport processes one report whose onion layer was already peeled
// (Apply after onion.Peel and star.ParseReport); attack and load
// tests use it to skip HPKE. Same rules and counters as Apply: a report id
// seen before in its group is dropped as "duplicate", so a replayed report
// never adds an impression.
func (p *Partition) ApplyReport(r *star.Report) []protocol.Decrypted {
	c := p.check(r, false)
	return p.applyReport(r, &c)
}

// applyReport is the state step of a report whose stateless checks c were
// computed (check) under this partition's keys or, when c was computed with
// other ReportKeys/ARCKeys settings, are computed again.
func (p *Partition) applyReport(r *star.Report, c *reportChecks) []protocol.Decrypted {
	ek := epochKey{r.App, r.Epoch}
	e := p.epochs[ek]
	if e == nil {
		switch {
		case p.closed[ek]:
			p.drop("late")
			return nil
		case p.RequireOpen:
			p.drop("unknown-epoch")
			return nil
		}
		e = &epochState{app: r.App, epoch: r.Epoch}
		p.epochs[ek] = e
	}
	if c.later || c.tokenOn != (p.ReportKeys != nil) || c.arcOn != (p.ARCKeys != nil) {
		// the epoch is open (or, without RequireOpen, seen): its keys
		// may be loaded now
		cc := p.check(r, true)
		c = &cc
	}
	if p.ReportKeys != nil {
		if reason := p.checkToken(e, c); reason != "" {
			p.drop(reason)
			return nil
		}
	}
	gid := groupIDOf(r)
	t := p.tags[gid]
	if t != nil {
		if t.seen.has(r.ID) {
			p.drop("duplicate")
			return nil
		}
	}
	var size int64
	if t == nil || t.key == nil {
		size = reportBytes(r)
		if e.held >= p.maxPendingReports() || e.heldBytes+size > p.maxPendingBytes() {
			p.drop("epoch-full")
			return nil
		}
	}
	if t == nil {
		if _, err := vss.NewCommitment(r.Commitment, int(r.K)); err != nil { // ParseReport checked the size; kept for safety
			p.drop("malformed")
			return nil
		}
		// a copy: r's fields alias the decrypted layer, which the group must not keep alive
		t = &tagState{ep: e, policy: r.Policy, k: int(r.K), commitRaw: bytes.Clone(r.Commitment), tag: r.Tag}
		p.tags[gid] = t
	}
	t.seen.add(r.ID)
	if t.key == nil {
		e.held++
		e.heldBytes += size
		t.heldBytes += size
	}
	if t.dead {
		p.drop("bad-commitment")
		return nil
	}
	if p.ARCKeys != nil && r.Policy == star.FTu {
		if reason := p.checkPresentation(t, r, c); reason != "" {
			p.drop(reason)
			return nil
		}
	}
	if t.key != nil {
		if !p.noVerify && !p.laterShareOK(t, r.Share) {
			p.drop("bad-share")
			return nil
		}
		p.Stats.Reports++
		return p.open(t, []pendingReport{{id: r.ID, share: r.Share, ct: r.Ciphertext}})
	}
	if t.hasX(r.Share.X) {
		// same user (FT_u) repeating: an impression, not a share; its
		// ciphertext is checked by the AEAD once the key is known
		p.Stats.Reports++
		t.pending = append(t.pending, pendingOf(r))
		return nil
	}
	if t.suspect && !p.noVerify {
		if ok, err := t.commitment().VerifyShare(r.Share); err != nil {
			p.kill(t)
			p.drop("bad-commitment")
			return nil
		} else if !ok {
			p.drop("bad-share")
			return nil
		}
	}
	p.Stats.Reports++
	t.pending = append(t.pending, pendingOf(r))
	t.shares = append(t.shares, r.Share)
	if len(t.shares) < t.k {
		return nil
	}
	var ok bool
	if p.noVerify {
		ok = p.recover(t)
	} else {
		ok = p.recoverVerified(t)
	}
	if !ok {
		return nil
	}
	p.Stats.Recoveries++
	t.ep.held -= int64(t.seen.len()) // recovered: what it holds no longer counts against the epoch's bounds
	t.ep.heldBytes -= t.heldBytes
	t.heldBytes = 0
	out := p.open(t, t.pending)
	t.pending, t.shares, t.commit, t.commitRaw = nil, nil, nil, nil
	return out
}

// pendingReport is what a group below threshold keeps of one report: its
// id, its share and its own copy of the ciphertext. The rest of the report
// is the group's (app and epoch in tagState.ep, policy, k and tag tagState
// fields, the commitment tagState.commitRaw), and its token and ARC presentation were
// checked on arrival. Keeping the parsed *star.Report instead kept the whole
// decrypted onion layer alive (its fields alias it), 2.1 KB per pending
// report with the group's maps (BenchmarkBoundPendingBytes).
type pendingReport struct {
	id    [16]byte
	share vss.Share
	ct    []byte
}

// pendingOf is r as a group keeps it while below threshold.
func pendingOf(r *star.Report) pendingReport {
	return pendingReport{id: r.ID, share: r.Share, ct: bytes.Clone(r.Ciphertext)}
}

// report rebuilds the report that pr was kept from, as far as opening its
// payload needs it (star.OpenPayload: the header in the AEAD's associated
// data, the ciphertext).
func (t *tagState) report(pr pendingReport) *star.Report {
	return &star.Report{App: t.ep.app, Epoch: t.ep.epoch, Policy: t.policy, K: uint16(t.k), ID: pr.id, Tag: t.tag,
		Share: pr.share, Ciphertext: pr.ct}
}

// commitment is the group's decoded commitment, built from commitRaw on
// first use (its length was checked when the group began).
func (t *tagState) commitment() *vss.Commitment {
	if t.commit == nil {
		t.commit, _ = vss.NewCommitment(t.commitRaw, t.k)
	}
	return t.commit
}

// hasX reports whether the group already holds a share at x (the same
// user under FT_u repeating an impression). A scan: before recovery a
// group holds at most k−1 shares.
func (t *tagState) hasX(x group.Scalar) bool {
	for _, s := range t.shares {
		if s.X.IsEqual(x) {
			return true
		}
	}
	return false
}

// idSet is the set of report ids of one group: a slice while small (most
// pending groups hold one report), a map beyond idSetFew.
type idSet struct {
	few  [][16]byte
	many map[[16]byte]struct{}
}

const idSetFew = 16

func (s *idSet) has(id [16]byte) bool {
	if s.many != nil {
		_, ok := s.many[id]
		return ok
	}
	for _, v := range s.few {
		if v == id {
			return true
		}
	}
	return false
}

func (s *idSet) add(id [16]byte) {
	if s.many == nil && len(s.few) < idSetFew {
		s.few = append(s.few, id)
		return
	}
	if s.many == nil {
		s.many = make(map[[16]byte]struct{}, 2*idSetFew)
		for _, v := range s.few {
			s.many[v] = struct{}{}
		}
		s.few = nil
	}
	s.many[id] = struct{}{}
}

func (s *idSet) len() int {
	if s.many != nil {
		return len(s.many)
	}
	return len(s.few)
}

func xKey(s vss.Share) [32]byte {
	var x [32]byte
	xb, _ := s.X.MarshalBinary()
	copy(x[:], xb)
	return x
}

// recoverVerified recovers the key of a group with k distinct shares,
// using only verified shares (vss.Commitment.RecoverVerified: the k shares
// in one batch unless the group is suspect, whose shares were verified on
// arrival). When the batch fails, the group becomes suspect: the shares
// that fail alone are dropped with their reports ("bad-share"), and
// recovery waits for more shares if fewer than k remain. The key comes from
// f(0) of the committed polynomial f, and f checks later shares. Pending
// reports that repeat a verified x with another y are dropped ("bad-share")
// before anything is decrypted.
func (p *Partition) recoverVerified(t *tagState) bool {
	rec, err := t.commitment().RecoverVerified(t.shares, t.suspect)
	p.Stats.FailedRecover += int64(rec.Failed)
	if rec.BatchFailed {
		t.suspect = true
	}
	if errors.Is(err, protocol.ErrMalformed) { // the commitment does not decode
		p.kill(t)
		return false
	}
	p.dropBadShares(t, rec.Bad)
	if err != nil { // fewer than k verified shares (or, kept for safety, duplicate x)
		return false
	}
	f := rec.Poly
	key := star.KeyFromSecret(t.tag, f.Secret())
	t.key, t.poly = &key, &f
	p.dropBadRepeats(t)
	return true
}

// dropBadRepeats drops the pending reports whose share has a verified x but
// another y (a tampered repeat: only one y lies on the polynomial at x).
func (p *Partition) dropBadRepeats(t *tagState) {
	if len(t.pending) == len(t.shares) { // no repeats: each report carries one share
		return
	}
	byX := make(map[[32]byte]vss.Share, len(t.shares))
	for _, s := range t.shares {
		byX[xKey(s)] = s
	}
	pending := t.pending[:0]
	for _, r := range t.pending {
		if v, ok := byX[xKey(r.share)]; !ok || !v.Y.IsEqual(r.share.Y) {
			p.Stats.Reports--
			p.drop("bad-share")
			continue
		}
		pending = append(pending, r)
	}
	t.pending = pending
}

// laterShareOK checks the share of a report that arrives after its group
// recovered: y == f(x) for the verified polynomial f, which is Feldman's
// equation without group operations.
func (p *Partition) laterShareOK(t *tagState, s vss.Share) bool {
	return t.poly.Contains(s)
}

// dropBadShares removes the shares of t at indexes bad (ascending, as
// vss.Recovery.Bad gives them) together with the pending reports that carry
// them ("bad-share").
func (p *Partition) dropBadShares(t *tagState, bad []int) {
	if len(bad) == 0 {
		return
	}
	badX := make(map[[32]byte]bool, len(bad))
	kept := t.shares[:0]
	for i, s := range t.shares {
		if len(bad) > 0 && bad[0] == i {
			bad = bad[1:]
			badX[xKey(s)] = true
			continue
		}
		kept = append(kept, s)
	}
	t.shares = kept
	pending := t.pending[:0]
	for _, r := range t.pending {
		if badX[xKey(r.share)] {
			p.Stats.Reports--
			p.drop("bad-share")
			continue
		}
		pending = append(pending, r)
	}
	t.pending = pending
}

// kill drops every pending report of a group whose commitment does not
// decode; later reports of the group are dropped on arrival.
func (p *Partition) kill(t *tagState) {
	for range t.pending {
		p.Stats.Reports--
		p.drop("bad-commitment")
	}
	t.dead = true
	t.pending, t.shares, t.commit, t.commitRaw = nil, nil, nil, nil
}

// recover tries k-subsets that contain the newest share (older subsets were
// tried when their last share arrived), in a fixed order, up to MaxAttempts
// (vss.SearchSubsets); a key is right when it opens one of the pending
// reports (AEAD check). f(0) comes from vss.Interpolate, as in
// recoverVerified, so the two differ only by verification (BenchmarkApply
// compares them).
func (p *Partition) recover(t *tagState) bool {
	var key [32]byte
	_, failed, err := vss.SearchSubsets(t.shares, t.k, MaxAttempts, func(f vss.Polynomial) bool {
		key = star.KeyFromSecret(t.tag, f.Secret())
		for _, r := range t.pending {
			if _, err := star.OpenPayload(key, t.report(r)); err == nil {
				return true
			}
		}
		return false
	})
	p.Stats.FailedRecover += int64(failed)
	if err != nil {
		return false
	}
	t.key = &key
	return true
}

func (p *Partition) open(t *tagState, reports []pendingReport) []protocol.Decrypted {
	out := make([]protocol.Decrypted, 0, len(reports))
	for _, pr := range reports {
		r := t.report(pr)
		pl, err := star.OpenPayload(*t.key, r)
		if err != nil {
			p.drop("bad-ciphertext")
			continue
		}
		p.Stats.Decrypted++
		out = append(out, protocol.Decrypted{Kind: protocol.KindItem, App: r.App, Epoch: r.Epoch,
			Policy: r.Policy.String(), K: int(r.K), Tag: hex.EncodeToString(r.Tag[:]),
			Report: hex.EncodeToString(r.ID[:]), Unit: hex.EncodeToString(pl.Unit[:]),
			Item: pl.Primary, Variant: pl.Secondary})
	}
	return out
}

func (p *Partition) maxOpenEpochs() int {
	if p.MaxOpenEpochs > 0 {
		return p.MaxOpenEpochs
	}
	return DefaultMaxOpenEpochs
}

func (p *Partition) maxPendingReports() int64 {
	if p.MaxPendingReports > 0 {
		return p.MaxPendingReports
	}
	return DefaultMaxPendingReports
}

func (p *Partition) maxPendingBytes() int64 {
	if p.MaxPendingBytes > 0 {
		return p.MaxPendingBytes
	}
	return DefaultMaxPendingBytes
}

// OpenEpochs returns the number of open epochs of app in this partition.
func (p *Partition) OpenEpochs(app string) int { return p.openPerApp[app] }

// openEpoch applies an EpochOpen: the epoch becomes open unless it is
// closed ("open-after-close": its summary was emitted, reopening would
// release a second time) or app already has MaxOpenEpochs open epochs
// ("open-refused": close one first). Opening an open epoch does nothing
// (the operator may repeat the command).
func (p *Partition) openEpoch(app, epoch string) {
	ek := epochKey{app, epoch}
	if p.closed[ek] {
		p.drop("open-after-close")
		return
	}
	e := p.epochs[ek]
	if e != nil && e.open {
		return
	}
	if p.openPerApp[app] >= p.maxOpenEpochs() {
		p.drop("open-refused")
		return
	}
	if e == nil {
		e = &epochState{app: app, epoch: epoch}
		p.epochs[ek] = e
	}
	e.open = true
	p.openPerApp[app]++
	// load the epoch's keys now, so Prepare finds them (a key that does
	// not load is tried again at the epoch's first report)
	if p.ReportKeys != nil {
		p.reportKey(epoch, true)
	}
	if p.ARCKeys != nil {
		p.arcKey(epoch, true)
	}
}

// closeEpoch summarizes the epoch's undecrypted tags as counts only
// (CrowdLogging §3.3), deletes every tag of the epoch (pending shares
// included) and emits the partition's closed marker (epoch close, docs/architecture.md).
func (p *Partition) closeEpoch(c protocol.EpochClose) []protocol.Decrypted {
	ek := epochKey{c.App, c.Epoch}
	if p.closed[ek] {
		return []protocol.Decrypted{p.closedMarker(c)}
	}
	type pk struct {
		policy star.Policy
		k      int
	}
	type rk struct{ reports, shares uint64 }
	hist := map[pk]map[rk]uint64{}
	for gid, t := range p.tags {
		if t.ep.app != c.App || t.ep.epoch != c.Epoch {
			continue
		}
		if t.key == nil && !t.dead {
			g := pk{t.policy, t.k}
			if hist[g] == nil {
				hist[g] = map[rk]uint64{}
			}
			reports := uint64(len(t.pending))
			if p.CoarseSummary {
				reports = protocol.SummaryBucket(reports)
			}
			hist[g][rk{reports, uint64(len(t.shares))}]++
		}
		delete(p.tags, gid)
	}
	p.closed[ek] = true
	if e := p.epochs[ek]; e != nil {
		if e.open {
			p.openPerApp[c.App]--
			if p.openPerApp[c.App] == 0 {
				delete(p.openPerApp, c.App)
			}
		}
		delete(p.epochs, ek)
	}
	var out []protocol.Decrypted
	groups := make([]pk, 0, len(hist))
	for g := range hist {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].policy != groups[j].policy {
			return groups[i].policy < groups[j].policy
		}
		return groups[i].k < groups[j].k
	})
	for _, g := range groups {
		var rows []protocol.SummaryRow
		for r, n := range hist[g] {
			rows = append(rows, protocol.SummaryRow{Reports: r.reports, Shares: r.shares, Tags: n})
		}
		sort.Slice(rows, func(i, j int) bool {
			if rows[i].Reports != rows[j].Reports {
				return rows[i].Reports > rows[j].Reports
			}
			return rows[i].Shares > rows[j].Shares
		})
		out = append(out, protocol.Decrypted{Kind: protocol.KindSummary, App: c.App, Epoch: c.Epoch,
			Policy: g.policy.String(), K: g.k, Summary: rows, Partition: p.ID, Partitions: p.Count})
	}
	return append(out, p.closedMarker(c))
}

func (p *Partition) closedMarker(c protocol.EpochClose) protocol.Decrypted {
	return protocol.Decrypted{Kind: protocol.KindClosed, App: c.App, Epoch: c.Epoch,
		Partition: p.ID, Partitions: p.Count}
}
