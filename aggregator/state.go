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
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudflare/circl/group"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/pipelinespec"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// Message is one record of the reports topic as the core sees it.
type Message struct {
	Value   []byte
	Control bool // carries protocol.ControlHeader: Value is a protocol.EpochOpen or protocol.EpochClose (protocol.ParseControl)
	// Time is the record's Kafka timestamp; a signed control message is
	// checked against it (ControlKey). Zero (kafka-go's reading of a
	// timestamp ≤ 0): the control message is refused, unless the
	// Partition has ControlUntimed.
	Time time.Time
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
// share's x), arc-key (no ARC key for the epoch), unit-mismatch (its
// group opened and the decrypted unit id is not star.ARCUnitID of the
// verified presentation tag at its x); with Pipelines: pipeline-mismatch
// (sealed for a pipeline definition this aggregator does not serve). For control
// messages: malformed-control, open-refused (an EpochOpen beyond
// MaxOpenEpochs open epochs of its app), open-after-close (an EpochOpen of
// a closed epoch); with ControlKey: unsigned-control, bad-control-signature,
// replayed-control (control.go).
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
	idx   uint32 // in Partition.eps (pendingGroup.ep)
	spill spill  // the epoch's pending reports' spill records (pending.go); nil until the first
	// pipes are the pipeline digests (star.Report.Pipeline) of the
	// epoch's pending groups, each once (pendingGroup.pipe indexes it):
	// most epochs have one.
	pipes   [][32]byte
	pipeIdx map[[32]byte]uint32
}

// pipe returns the index of digest d in e.pipes, adding it when new.
func (e *epochState) pipe(d [32]byte) uint32 {
	if i, ok := e.pipeIdx[d]; ok {
		return i
	}
	if e.pipeIdx == nil {
		e.pipeIdx = map[[32]byte]uint32{}
	}
	i := uint32(len(e.pipes))
	e.pipes = append(e.pipes, d)
	e.pipeIdx[d] = i
	return i
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

// groupIDOf is r's groupID: app, epoch, policy, k, pipeline digest, tag and the encoded
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
	h.Write(r.Pipeline[:])
	h.Write(r.Tag[:])
	binary.BigEndian.PutUint32(b[:], uint32(len(r.Commitment)))
	h.Write(b[:])
	h.Write(r.Commitment)
	var id groupID
	h.Sum(id[:0])
	return id
}

// tagState is a group that recovered its key, or whose commitment does
// not decode (dead). Groups below threshold are flat (pendingGroup,
// pending.go) and become a tagState when they recover or die.
type tagState struct {
	ep       *epochState // the group's app and epoch too
	policy   star.Policy
	k        int
	pipeline [32]byte        // the reports' pipeline digest (star.Report.Pipeline)
	key      *[32]byte       // nil: dead
	poly     *vss.Polynomial // the committed polynomial: checks later shares
	dead     bool            // the commitment does not decode: every report is dropped
	tag      [32]byte
	seen     idSet // ids of the group's reports (duplicates are dropped)
	// arcOK holds the share x-coordinates whose report carried a verified
	// ARC presentation (FT_u with ARCKeys): repeated impressions of one
	// (credential, artifact) carry the same x and are not verified again.
	// Only good verdicts are kept, so a bad presentation at an x never
	// blocks a good one; a repeat must carry the verified tag. Pending
	// groups keep theirs in Partition.pendARC.
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
	// SpillDir is where the spill records of pending reports go (their
	// share y and ciphertext: what recovery needs only once a group
	// reaches k), one unlinked file per open epoch, each record sealed
	// under a key held only in memory (spill.go). "": chunks of the heap.
	SpillDir string
	tags     map[groupID]*tagState // recovered and dead groups
	// pending groups (pending.go): pend indexes groups, whose report
	// chains are in reps; freeGroup and freeRep head the free slots (−1:
	// none); big indexes large groups; pendARC holds their verified
	// presentation tags (tagState.arcOK).
	pend       groupIndex
	groups     chunked[pendingGroup]
	reps       chunked[rep]
	freeGroup  int32
	freeRep    int32
	big        map[groupID]*bigGroup
	pendARC    map[groupID]map[[32]byte][32]byte
	eps        []*epochState // by epochState.idx; nil once closed
	err        error         // the first spill error (Err)
	closed     map[epochKey]bool
	epochs     map[epochKey]*epochState // open epochs (and, without RequireOpen, epochs seen)
	openPerApp map[string]int
	Stats      Stats
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
	// Pipelines, when not nil, are the pipeline digests (star.Report.Pipeline)
	// this aggregator serves: a report sealed for any other definition —
	// or for none — is dropped ("pipeline-mismatch") before it joins a
	// group, and OnPipelineMismatch, when set, is called with its digest.
	// nil: every digest is aggregated, each in groups of its own.
	Pipelines          map[[32]byte]bool
	OnPipelineMismatch func(got [32]byte)
	// PipelineSealing, when set, gives for a served digest the k and the
	// sealing its definition says (pipelinespec.Spec.ShamirK, Sealing): a
	// report claiming the digest under another k or policy is dropped
	// ("pipeline-mismatch") instead of waiting in groups that can never
	// recover. Digests absent from it are not checked.
	PipelineSealing map[[32]byte]Sealing
	// OnAdmit, when set, is called with every report's claimed context
	// and the admission's outcome: reason "" when admitted (its pipeline
	// served, its epoch open, its token valid at arrival), else the drop
	// reason counted (pipeline-mismatch, late, unknown-epoch, no-token, …).
	// The service's announcement counts (pipelinespec.Announcement).
	OnAdmit func(c pipelinespec.Context, reason string)
	// ARCKeys returns the ARC issuer key of an epoch (keydir.LoadARCKey).
	// Set, an FT_u report is accepted only with an ARC presentation that
	// verifies for its artifact and whose tag gives its share's x
	// ("bad-presentation", "arc-key"). nil: off.
	ARCKeys func(epoch string) (*arc.PrivateKey, error)
	// VerifyOnArrival verifies every report's token and presentation when
	// it arrives (Prepare), as before verification at the threshold
	// (threshold.go); off, reports are verified only once their group
	// reaches k distinct candidate shares. Benchmarks compare the two;
	// both give the same releases on honest input.
	VerifyOnArrival bool
	// Every member of a group must set ReportKeys and ARCKeys alike, and
	// the keys of an epoch must exist before its first report arrives: a
	// report is judged once, and again identically on replay, only when
	// its epoch's keys load the same way each time.
	keysMu      sync.Mutex // reportKeys, arcKeys: Prepare runs concurrently
	reportKeys  map[string]*token.PrivateKey
	arcKeys     map[string]*arcVerifier
	arcVerified int64        // presentations accepted by a full verdict, not the per-(group, x) rule (tests)
	arcChecks   atomic.Int64 // full ARC verifications attempted (Prepare runs concurrently; tests)
	tokenChecks atomic.Int64 // report-token verifications at the threshold (tests)
	// preemptControl: a candidate that fails verification at the
	// threshold drops every report at its x (dropAtX) — the rule that
	// verification at the threshold must not have; only the control of
	// the junk-presentations attack sets it.
	preemptControl bool
	cache          *verifyCache  // shared by a Service's partitions (nil: none)
	tokensSpent    *atomic.Int64 // Service.TokensSpent (nil: not counted); counts only, never read back
	snap           *snapStore    // with snapshots: the spill goes to named segments there (snapshot.go)
	noVerify       bool          // baseline for benchmarks: no commitment checks, AEAD subset search
	// ControlKey is the pipeline operator's Ed25519 public key (RFC 8032):
	// set, only version 3 control messages it signed for this partition of
	// protocol.ReportsTopic and a pipeline in Pipelines (nil: any), with a
	// Kafka timestamp within their validity, are applied (control.go;
	// "unsigned-control", "bad-control-signature", "unbound-control",
	// "replayed-control"). nil: every control message that parses is
	// applied.
	ControlKey ed25519.PublicKey
	// ControlUntimed is for offline tools that judge control messages
	// without Kafka timestamps (Message.Time zero): the validity window is
	// not checked. Off (the service), a control message without a
	// timestamp is refused ("replayed-control").
	ControlUntimed bool
	controlIssued  int64 // the newest issue time (Unix s) of a signed control message accepted (control.go)
	// legacyControl restores the control checks of version 2 (a zero
	// timestamp skips the window, no pipeline or topic binding, version
	// 2 accepted): only the controls of the control-replay attack set it.
	legacyControl bool
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
	for gi := int32(0); gi < p.groups.n; gi++ {
		g := p.group(gi)
		if !g.used {
			continue
		}
		e := p.eps[g.ep]
		head, err := p.load(e, g.head)
		if err != nil {
			p.fail(err)
			continue
		}
		ch := vss.CommitmentHash(head.commitment)
		out = append(out, PendingGroup{App: e.app, Epoch: e.epoch, Policy: g.policy.String(), K: int(g.k),
			Tag: hex.EncodeToString(head.tag[:]), Commitment: hex.EncodeToString(ch[:]),
			Reports: int(g.live), Shares: int(g.shares)})
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
		freeGroup: -1, freeRep: -1, big: map[groupID]*bigGroup{},
		pendARC: map[groupID]map[[32]byte][32]byte{},
		closed:  map[epochKey]bool{}, epochs: map[epochKey]*epochState{}, openPerApp: map[string]int{},
		Stats: Stats{Dropped: map[string]int64{}}}
}

// Close releases the partition's spill stores (its files are unlinked
// already: closing frees their disk space). The state is unusable after.
func (p *Partition) Close() error {
	var first error
	for i, e := range p.eps {
		if e != nil && e.spill != nil {
			if err := e.spill.close(); err != nil && first == nil {
				first = err
			}
			e.spill = nil
		}
		p.eps[i] = nil
	}
	return first
}

// newEpoch adds the state of an epoch seen for the first time.
func (p *Partition) newEpoch(app, epoch string) *epochState {
	e := &epochState{app: app, epoch: epoch, idx: uint32(len(p.eps))}
	p.eps = append(p.eps, e)
	p.epochs[epochKey{app, epoch}] = e
	return e
}

// PendingTags returns the number of (tag, commitment) groups still below
// threshold.
func (p *Partition) PendingTags() int { return p.pend.n }

// pendingReports is the number of reports the partition holds below
// threshold, over its open epochs.
func (p *Partition) pendingReports() (n int64) {
	for _, e := range p.eps {
		if e != nil {
			n += e.held
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
	e, c, ok := p.admit(r, c)
	if !ok {
		return nil
	}
	gid := groupIDOf(r)
	gi, pending := p.pend.find(p, &gid)
	t := p.tags[gid]
	if pending && p.hasID(gi, gid, r.ID) || t != nil && t.seen.has(r.ID) {
		p.drop("duplicate")
		return nil
	}
	var size int64
	if t == nil || t.key == nil {
		size = reportBytes(r)
		if c.deferred { // its token and presentation wait in the spill too
			size += int64(len(r.Token) + len(r.Presentation))
		}
		if e.held >= p.maxPendingReports() || e.heldBytes+size > p.maxPendingBytes() {
			p.drop("epoch-full")
			return nil
		}
	}
	if t != nil {
		return p.applyOpened(t, r, c, size)
	}
	return p.applyPending(e, gi, gid, pending, r, c, size)
}

// admit is the first part of applyReport: r's pipeline must be served,
// its epoch open (or, without RequireOpen, it is opened), and its token
// valid (checked at arrival when verification is deferred); c is computed
// again when the epoch's keys may be loaded now. It returns r's epoch and
// checks, ok false when r was dropped (counted).
func (p *Partition) admit(r *star.Report, c *reportChecks) (*epochState, *reportChecks, bool) {
	e, c, reason := p.admitReason(r, c)
	if p.OnAdmit != nil {
		p.OnAdmit(pipelinespec.Context{Pipeline: r.Pipeline, App: r.App, Epoch: r.Epoch}, reason)
	}
	return e, c, reason == ""
}

// admitReason is admit's decision: the epoch and checks, or the drop
// reason counted.
func (p *Partition) admitReason(r *star.Report, c *reportChecks) (*epochState, *reportChecks, string) {
	if p.Pipelines != nil && !p.Pipelines[r.Pipeline] {
		p.drop("pipeline-mismatch")
		if p.OnPipelineMismatch != nil {
			p.OnPipelineMismatch(r.Pipeline)
		}
		return nil, c, "pipeline-mismatch"
	}
	if want, ok := p.PipelineSealing[r.Pipeline]; ok && (int(r.K) != want.K || r.Policy != want.Policy) {
		p.drop("pipeline-mismatch")
		return nil, c, "pipeline-mismatch"
	}
	ek := epochKey{r.App, r.Epoch}
	e := p.epochs[ek]
	if e == nil {
		switch {
		case p.closed[ek]:
			p.drop("late")
			return nil, c, "late"
		case p.RequireOpen:
			p.drop("unknown-epoch")
			return nil, c, "unknown-epoch"
		}
		e = p.newEpoch(r.App, r.Epoch)
	}
	if c.later || c.tokenOn != (p.ReportKeys != nil) || c.arcOn != (p.ARCKeys != nil) || c.deferred != p.deferred() {
		// the epoch is open (or, without RequireOpen, seen): its keys
		// may be loaded now
		cc := p.check(r, true)
		c = &cc
	}
	reason := ""
	if c.deferred {
		reason = p.arrivalToken(e, c)
	} else if p.ReportKeys != nil {
		reason = p.checkToken(e, c)
	}
	if reason != "" {
		p.drop(reason)
		return nil, c, reason
	}
	return e, c, ""
}

// applyPending is the state step of a report r of epoch e whose group gid
// (index gi when pending) has not recovered, size what r is charged: it
// joins the group (a new one when not pending) as a share, an impression
// (its x repeats) or a dropped report (its presentation or share fails),
// and the group recovers when it holds k (verified) shares.
func (p *Partition) applyPending(e *epochState, gi int32, gid groupID, pending bool, r *star.Report, c *reportChecks, size int64) []protocol.Decrypted {
	if !pending {
		if _, err := vss.NewCommitment(r.Commitment, int(r.K)); err != nil { // ParseReport checked the size; kept for safety
			p.drop("malformed")
			return nil
		}
		gi = p.newGroup(pendingGroup{gid: gid, head: -1, tail: -1, ep: e.idx, k: r.K, policy: r.Policy, pipe: e.pipe(r.Pipeline)})
	}
	e.held++
	e.heldBytes += size
	x := xKey(r.Share)
	var unverified uint32
	if c.deferred {
		unverified = repUnverified
		if reason := p.arrivalPresentation(e, r, c); reason != "" {
			p.appendRep(gi, gid, r, &x, size, repDropped)
			p.drop(reason)
			return nil
		}
	} else if p.ARCKeys != nil && r.Policy == star.FTu {
		ok := p.pendARC[gid]
		reason := p.checkPresentation(&ok, x, c)
		if ok != nil {
			p.pendARC[gid] = ok
		}
		if reason != "" {
			p.appendRep(gi, gid, r, &x, size, repDropped)
			p.drop(reason)
			return nil
		}
	}
	if p.hasX(gi, gid, x) {
		// same user (FT_u) repeating: an impression, not a share; its
		// y is checked at recovery, its ciphertext by the AEAD
		p.Stats.Reports++
		p.appendRep(gi, gid, r, &x, size, unverified)
		return nil
	}
	if p.group(gi).suspect && !p.noVerify && !p.verifySuspect(gi, gid, r, &x, size) {
		return nil
	}
	p.Stats.Reports++
	if !p.appendRep(gi, gid, r, &x, size, repShare|unverified) {
		return nil
	}
	if int(p.group(gi).shares) < int(r.K) {
		return nil
	}
	if c.deferred && (!p.verifyGroup(gi, gid) || int(p.group(gi).shares) < int(r.K)) {
		return nil // fewer than k verified shares: the group waits for more
	}
	return p.recoverGroup(gi, gid, r)
}

// verifySuspect checks r's share against its commitment (the group's:
// groupID covers it) in a suspect group; a share that fails is kept as
// dropped and counted (bad-share), a commitment that does not decode
// kills the group (bad-commitment). It reports whether the share passed.
func (p *Partition) verifySuspect(gi int32, gid groupID, r *star.Report, x *[32]byte, size int64) bool {
	com, err := vss.NewCommitment(r.Commitment, int(r.K))
	var ok bool
	if err == nil {
		ok, err = com.VerifyShare(r.Share)
	}
	if err != nil {
		p.appendRep(gi, gid, r, x, size, repDropped)
		p.kill(gi, gid, r.Tag)
		p.drop("bad-commitment")
		return false
	} else if !ok {
		p.appendRep(gi, gid, r, x, size, repDropped)
		p.drop("bad-share")
		return false
	}
	return true
}

// applyOpened is the state step of a report of a group that recovered (or
// died: its commitment does not decode), size what it is charged while
// the group has no key.
func (p *Partition) applyOpened(t *tagState, r *star.Report, c *reportChecks, size int64) []protocol.Decrypted {
	t.seen.add(r.ID)
	if t.key == nil {
		t.ep.held++
		t.ep.heldBytes += size
	}
	if t.dead {
		p.drop("bad-commitment")
		return nil
	}
	if c.deferred {
		reason := p.arrivalPresentation(t.ep, r, c)
		if reason == "" {
			reason = p.verifyReport(t.ep, r, xKey(r.Share), r.Token, r.Presentation, &t.arcOK)
		}
		if reason != "" {
			p.drop(reason)
			return nil
		}
	} else if p.ARCKeys != nil && r.Policy == star.FTu {
		if reason := p.checkPresentation(&t.arcOK, xKey(r.Share), c); reason != "" {
			p.drop(reason)
			return nil
		}
	}
	if !p.noVerify && !p.laterShareOK(t, r.Share) {
		p.drop("bad-share")
		return nil
	}
	p.Stats.Reports++
	return p.emit(nil, *t.key, r, p.boundUnit(t.arcOK, t.policy, xKey(r.Share)))
}

// unitCheck is what emit checks a decrypted payload's unit id against:
// with bound set, the unit must be want (star.ARCUnitID of the verified
// presentation tag behind the report's share), and a report with no
// verified tag (known false) is dropped.
type unitCheck struct {
	bound, known bool
	want         [16]byte
}

// boundUnit returns the unit check of a report at share x of a group of
// policy pol whose verified presentation tags are arcOK (tagState.arcOK,
// Partition.pendARC): under FT_u with ARCKeys the unit id a release counts
// is the credential's (star.ARCUnitID), so one credential is at most one
// user of an artifact however many unit ids its holder seals; otherwise
// units are not bound (nothing to check them against).
func (p *Partition) boundUnit(arcOK map[[32]byte][32]byte, pol star.Policy, x [32]byte) unitCheck {
	if p.ARCKeys == nil || pol != star.FTu {
		return unitCheck{}
	}
	d, ok := arcOK[x]
	var u unitCheck
	u.bound, u.known = true, ok
	copy(u.want[:], d[:16])
	return u
}

// recoverGroup recovers the key of pending group gi, which has just
// reached k distinct shares with r, using only verified shares
// (vss.Commitment.RecoverVerified: the k shares in one batch unless the
// group is suspect, whose shares were verified on arrival). When the
// batch fails, the group becomes suspect: the shares that fail alone are
// dropped with their reports ("bad-share"), and recovery waits for more
// shares if fewer than k remain. The key comes from f(0) of the committed
// polynomial f, and f checks later shares. Pending reports that repeat a
// verified x with another y are dropped ("bad-share") before anything is
// decrypted. On success the group becomes a tagState and every pending
// report is opened, in arrival order.
func (p *Partition) recoverGroup(gi int32, gid groupID, r *star.Report) []protocol.Decrypted {
	g := p.group(gi)
	e := p.eps[g.ep]
	shares, at, atCt, ok := p.groupShares(gi)
	if !ok {
		return nil
	}
	key, poly, ok := p.recoverKey(gi, gid, r, shares, at)
	if !ok {
		return nil
	}
	p.Stats.Recoveries++
	t := &tagState{ep: e, policy: g.policy, k: int(g.k), pipeline: e.pipes[g.pipe], key: &key, poly: poly, tag: r.Tag, arcOK: p.pendARC[gid]}
	byX := make(map[[32]byte]vss.Share, len(shares))
	for j, i := range at {
		byX[p.rep(i).x] = shares[j]
	}
	var opened []int32
	var cts [][]byte
	next := 0 // in at: the shares come in chain order
	for i := g.head; i >= 0; i = p.rep(i).next {
		rp := p.rep(i)
		t.seen.add(rp.id)
		e.held-- // recovered: what it holds no longer counts against the epoch's bounds
		e.heldBytes -= rp.size()
		share := next < len(at) && at[next] == i
		if share {
			next++
		}
		if !rp.live() { // a share dropped as bad above, or dropped on arrival
			continue
		}
		if share {
			opened, cts = append(opened, i), append(cts, atCt[next-1])
			continue
		}
		// a repeat (the shares' own records were read above)
		sp, err := p.load(e, i)
		if err != nil {
			p.fail(err)
			return nil
		}
		if !p.noVerify {
			// only one y lies on the polynomial at x
			if s, ok := byX[rp.x]; !ok || !bytes.Equal(scalarBytes(s.Y), sp.y) {
				p.dropRep(gi, gid, i, "bad-share")
				continue
			}
		}
		opened, cts = append(opened, i), append(cts, sp.ct)
	}
	out := make([]protocol.Decrypted, 0, len(opened))
	for j, i := range opened {
		out = p.emit(out, key, &star.Report{App: e.app, Epoch: e.epoch, Policy: g.policy, K: g.k, Pipeline: t.pipeline, ID: p.rep(i).id,
			Tag: r.Tag, Ciphertext: cts[j]}, p.boundUnit(t.arcOK, g.policy, p.rep(i).x))
	}
	p.releaseGroup(gi, gid)
	p.tags[gid] = t
	return out
}

// groupShares reads the shares of pending group gi from its spill, in
// chain order: each share, its rep and its report's ciphertext (the spill
// record is read once); ok false after a spill failure (Err).
func (p *Partition) groupShares(gi int32) (shares []vss.Share, at []int32, atCt [][]byte, ok bool) {
	g := p.group(gi)
	e := p.eps[g.ep]
	for i := g.head; i >= 0; i = p.rep(i).next {
		if !p.rep(i).share() {
			continue
		}
		sp, err := p.load(e, i)
		var s vss.Share
		if err == nil {
			s, err = p.shareOf(i, sp)
		}
		if err != nil {
			p.fail(err)
			return nil, nil, nil, false
		}
		shares, at, atCt = append(shares, s), append(at, i), append(atCt, sp.ct)
	}
	return shares, at, atCt, true
}

// recoverKey recovers group gi's artifact key from shares (at: their
// reps) for r's tag: verified against r's commitment (RecoverVerified;
// bad shares are dropped, bad-share; a commitment that does not decode
// kills the group), or without verification by a key search. ok false
// when no key was recovered: the group waits for more shares or died.
func (p *Partition) recoverKey(gi int32, gid groupID, r *star.Report, shares []vss.Share, at []int32) (key [32]byte, poly *vss.Polynomial, ok bool) {
	g := p.group(gi)
	if p.noVerify {
		key, ok = p.searchKey(gi, r, shares)
		return key, nil, ok
	}
	com, err := vss.NewCommitment(r.Commitment, int(r.K))
	var rec vss.Recovery
	if err == nil {
		rec, err = com.RecoverVerified(shares, g.suspect)
	}
	p.Stats.FailedRecover += int64(rec.Failed)
	if rec.BatchFailed {
		g.suspect = true
	}
	if errors.Is(err, protocol.ErrMalformed) { // the commitment does not decode
		p.kill(gi, gid, r.Tag)
		return key, nil, false
	}
	if len(rec.Bad) > 0 {
		bad := map[[32]byte]bool{}
		for _, b := range rec.Bad {
			bad[p.rep(at[b]).x] = true
		}
		for i := g.head; i >= 0; i = p.rep(i).next {
			if p.rep(i).live() && bad[p.rep(i).x] {
				p.dropRep(gi, gid, i, "bad-share")
			}
		}
	}
	if err != nil { // fewer than k verified shares (or, kept for safety, duplicate x)
		return key, nil, false
	}
	f := rec.Poly
	return star.KeyFromSecret(r.Tag, f.Secret()), &f, true
}

func scalarBytes(s group.Scalar) []byte {
	b, _ := s.MarshalBinary()
	return b
}

// kill drops every pending report of group gi, whose commitment does not
// decode; later reports of the group are dropped on arrival.
func (p *Partition) kill(gi int32, gid groupID, tag [32]byte) {
	g := p.group(gi)
	t := &tagState{ep: p.eps[g.ep], policy: g.policy, k: int(g.k), pipeline: p.eps[g.ep].pipes[g.pipe], dead: true, tag: tag}
	for i := g.head; i >= 0; i = p.rep(i).next {
		t.seen.add(p.rep(i).id)
		if p.rep(i).live() {
			p.dropRep(gi, gid, i, "bad-commitment")
		}
	}
	p.releaseGroup(gi, gid)
	p.tags[gid] = t
}

// laterShareOK checks the share of a report that arrives after its group
// recovered: y == f(x) for the verified polynomial f, which is Feldman's
// equation without group operations.
func (p *Partition) laterShareOK(t *tagState, s vss.Share) bool {
	return t.poly.Contains(s)
}

// searchKey tries k-subsets of shares that contain the newest share
// (older subsets were tried when their last share arrived), in a fixed
// order, up to MaxAttempts (vss.SearchSubsets); a key is right when it
// opens one of the group's pending reports (AEAD check). f(0) comes from
// vss.Interpolate, as in recoverGroup, so the two differ only by
// verification (BenchmarkApply compares them).
func (p *Partition) searchKey(gi int32, r *star.Report, shares []vss.Share) ([32]byte, bool) {
	g := p.group(gi)
	e := p.eps[g.ep]
	var trial []*star.Report
	for i := g.head; i >= 0; i = p.rep(i).next {
		if !p.rep(i).live() {
			continue
		}
		sp, err := p.load(e, i)
		if err != nil {
			p.fail(err)
			return [32]byte{}, false
		}
		trial = append(trial, &star.Report{App: e.app, Epoch: e.epoch, Policy: g.policy, K: g.k, Pipeline: e.pipes[g.pipe], ID: p.rep(i).id,
			Tag: r.Tag, Ciphertext: sp.ct})
	}
	var key [32]byte
	_, failed, err := vss.SearchSubsets(shares, int(g.k), MaxAttempts, func(f vss.Polynomial) bool {
		key = star.KeyFromSecret(r.Tag, f.Secret())
		for _, tr := range trial {
			if _, err := star.OpenPayload(key, tr); err == nil {
				return true
			}
		}
		return false
	})
	p.Stats.FailedRecover += int64(failed)
	return key, err == nil
}

// emit opens r under key and appends its decrypted item to out
// ("bad-ciphertext" when the AEAD fails; "unit-mismatch" when unit binds
// the payload's unit id to a credential and the payload carries another).
func (p *Partition) emit(out []protocol.Decrypted, key [32]byte, r *star.Report, unit unitCheck) []protocol.Decrypted {
	pl, err := star.OpenPayload(key, r)
	if err != nil {
		p.drop("bad-ciphertext")
		return out
	}
	if unit.bound && (!unit.known || pl.Unit != unit.want) {
		p.drop("unit-mismatch")
		return out
	}
	p.Stats.Decrypted++
	return append(out, protocol.Decrypted{Kind: protocol.KindItem, App: r.App, Epoch: r.Epoch,
		Policy: r.Policy.String(), K: int(r.K), Pipeline: pipelineHex(r.Pipeline), Tag: hex.EncodeToString(r.Tag[:]),
		Report: hex.EncodeToString(r.ID[:]), Unit: hex.EncodeToString(pl.Unit[:]),
		Item: pl.Primary, Variant: pl.Secondary})
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
		e = p.newEpoch(app, epoch)
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
		pipe   [32]byte
	}
	type rk struct{ reports, shares uint64 }
	hist := map[pk]map[rk]uint64{}
	e := p.epochs[ek]
	if e != nil {
		for gi := int32(0); gi < p.groups.n; gi++ {
			g := p.group(gi)
			if !g.used || g.ep != e.idx {
				continue
			}
			k := pk{g.policy, int(g.k), e.pipes[g.pipe]}
			if hist[k] == nil {
				hist[k] = map[rk]uint64{}
			}
			reports := uint64(g.live)
			if p.CoarseSummary {
				reports = protocol.SummaryBucket(reports)
			}
			hist[k][rk{reports, uint64(g.shares)}]++
			p.releaseGroup(gi, g.gid)
		}
		for gid, t := range p.tags {
			if t.ep == e {
				delete(p.tags, gid)
			}
		}
		if e.spill != nil {
			if err := e.spill.discard(); err != nil { // the pending shares are deleted, on disk too
				p.fail(err)
			}
			e.spill = nil
		}
		p.eps[e.idx] = nil
		if e.open {
			p.openPerApp[c.App]--
			if p.openPerApp[c.App] == 0 {
				delete(p.openPerApp, c.App)
			}
		}
		delete(p.epochs, ek)
	}
	p.closed[ek] = true
	var out []protocol.Decrypted
	groups := make([]pk, 0, len(hist))
	for g := range hist {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].policy != groups[j].policy {
			return groups[i].policy < groups[j].policy
		}
		if groups[i].k != groups[j].k {
			return groups[i].k < groups[j].k
		}
		return bytes.Compare(groups[i].pipe[:], groups[j].pipe[:]) < 0
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
			Policy: g.policy.String(), K: g.k, Pipeline: pipelineHex(g.pipe), Summary: rows, Partition: p.ID, Partitions: p.Count})
	}
	return append(out, p.closedMarker(c))
}

func (p *Partition) closedMarker(c protocol.EpochClose) protocol.Decrypted {
	return protocol.Decrypted{Kind: protocol.KindClosed, App: c.App, Epoch: c.Epoch,
		Partition: p.ID, Partitions: p.Count}
}

// pipelineHex is a pipeline digest as protocol.Decrypted carries it: 64
// hex digits, "" for the zero digest (a report sealed without one).
func pipelineHex(d [32]byte) string {
	if d == ([32]byte{}) {
		return ""
	}
	return hex.EncodeToString(d[:])
}
