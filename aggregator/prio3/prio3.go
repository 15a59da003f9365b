// Package prio3 holds the two aggregators of PDD's Prio3 mode as pure state
// machines — Leader and Helper, each with an Apply method that takes one
// event (an encoded message from protocol/prio3, or a clock tick) and
// returns the encoded messages to send. The state machines have no
// transport: LeaderService and HelperService (service.go) are the loops
// around them (Kafka uploads and shares, NATS request/reply between the
// aggregators, snapshots, metrics), built from Options (`crowdlog
// aggregate-prio3`), and only route Output.Msg to Output.To.
//
// Flow (draft-ietf-ppm-dap §4 with a one-round Prio3, draft-irtf-cfrg-vdaf-14
// §7.2.2): a client's upload reaches the leader (EventUpload), which opens
// it, runs PrepInit as aggregator 0 and queues it; EventTick sends the queued
// reports of each day to the helper in one AggregateReq; the helper opens
// its input share, runs PrepInit as aggregator 1, combines both prep shares
// (the proof check), commits its output share and answers with the prep
// message or the reason it rejected the report; the leader commits on the
// answer. A batch is (campaign, day), closed at the day's end + Grace.
// Collection (EventCollect at the leader) asks the helper for its aggregate
// share with the leader's count and checksum; the helper hands its share,
// sealed to the collector, only when both equal its own and the batch holds
// at least MinBatchSize reports.
//
// Counters (Stats) are exposed on the state for the service to export as
// crowdlog_prio3_rejected_total{role,reason}, crowdlog_prio3_prepared_total{role}
// and crowdlog_prio3_collect_refused_total{role,reason}.
package prio3

import (
	"errors"
	"fmt"
	"time"

	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// Config is one aggregator's campaign configuration.
type Config struct {
	Campaign    string
	Measurement p3.Config
	// KeyEpoch is the verify-key epoch the leader prepares under; the helper
	// accepts any epoch in VerifyKeys.
	KeyEpoch uint32
	// VerifyKeys: epoch → the 32-byte VDAF verify key shared by leader and
	// helper only (VDAF-14 §7.2.2 verify_key).
	VerifyKeys map[uint32][p3.VerifyKeySize]byte
	// Grace after a day's end (UTC) during which its batch still accepts
	// reports.
	Grace time.Duration
	// MinBatchSize is the fewest reports a batch may be collected with.
	MinBatchSize uint64
	// Keys: the leader's report keys or the helper's input-share keys (two
	// during a rotation).
	Keys []*onion.KeyPair
	// Collector is the release stage's public key the aggregate shares are
	// sealed to.
	Collector onion.PublicKey
	// MaxRequestBytes bounds one encoded AggregateReq in its signature
	// envelope (p3.SignedReqOverhead more; leader): a tick
	// splits a day's queued reports into requests of at most this many
	// bytes, so each fits the transport's message limit (NATS
	// max_payload). 0 means DefaultMaxRequestBytes. A single report larger
	// than the bound still goes alone.
	MaxRequestBytes int
	// Retain is how long after a batch closes (day end + Grace) its state
	// is kept: the aggregate, its noise draw, the batch log. Past it the
	// services drop the batch, but only a collected one (the leader's
	// collected or refused batches; the helper's batches whose share it
	// handed out or refused as small_batch, or that closed with fewer than
	// MinBatchSize reports, so can never be collected): a batch that could
	// still be collected is kept whatever its age. The batch is closed by
	// then: a later report of it is late either way. 0 keeps every batch.
	Retain time.Duration
	// Epsilon > 0 adds integer Laplace noise of scale S/ε (S =
	// Measurement.Sensitivity(), one person's daily L1 bound) to each
	// entry of this aggregator's aggregate share, drawn once per batch
	// (noise.go): ε per person-day; 0 = exact shares. The
	// collector must be told the same ε (release-pdd --epsilon), which each
	// share carries authenticated (AggShare.Epsilon).
	Epsilon float64
	// StatusEpsilon (leader) > 0 decides each day's status from a noisy
	// count: released iff count ≥ MinBatchSize and count + Lap(1/ε_c) ≥
	// MinBatchSize + StatusThreshold(ε_c, StatusDelta), drawn once per
	// batch, so released/withheld is (ε_c, StatusDelta)-DP (status.go);
	// the service then also withholds every day of the campaign's span
	// without reports. 0: the exact rule (count ≥ MinBatchSize), whose
	// status tells one person's presence at a count of MinBatchSize − 1.
	StatusEpsilon float64
	// StatusDelta is the δ of the status (0 < δ < ½; used only with
	// StatusEpsilon > 0; DefaultStatusDelta).
	StatusDelta float64
	// TokenSeed (helper only), when set, is the helper's operator's
	// 32-byte token seed: the helper prepares a report only with a valid
	// helper token (protocol/token KindPrio3Helper, key
	// token.DeriveKey(KindPrio3Helper, token.Prio3Epoch(campaign, day),
	// seed)) whose nonce is the report's (token.Prio3Nonce: campaign, day,
	// id, public share, sealed helper share). The issuer of the helper's
	// operator issues one per enrolled identity per campaign-day, so the
	// leader can add no report of its own and a client not two. A token is
	// spent with the report id it binds: the batch's committed ids (kept
	// in the state) refuse its second use as a replay. nil: no token
	// needed (the leader alone chooses who counts).
	TokenSeed []byte
	// LeaderTokenSeed (leader only), when set, is the leader's operator's
	// 32-byte token seed: the leader prepares a report only with a valid,
	// unspent leader token (protocol/token KindPrio3Leader, the same nonce
	// as the helper token), so the helper's operator, who can mint helper
	// tokens, can add no report of its own either. nil: no leader token
	// needed.
	LeaderTokenSeed []byte
}

// DefaultMaxRequestBytes is the default Config.MaxRequestBytes: 1 MiB,
// half the 2 MiB NATS max_payload of crowdlog's deployments (about 190
// reports of a SumVec L = 10,000, b = 4 campaign, whose leader prep share
// is about 5 KB).
const DefaultMaxRequestBytes = 1 << 20

// Dest is where an output message goes.
type Dest byte

const (
	ToHelper Dest = iota + 1
	ToLeader
	ToCollector
)

// Output is an encoded protocol/prio3 message and its destination.
type Output struct {
	To  Dest
	Msg []byte
}

// EventKind is what an Event carries.
type EventKind byte

const (
	EventUpload        EventKind = iota + 1 // leader: Msg = a client's upload
	EventTick                               // leader: send queued reports to the helper
	EventAggregateResp                      // leader: Msg = the helper's AggregateResp
	EventCollect                            // leader: collect batch Day
	EventAggShare                           // leader: Msg = the helper's AggShare
	EventAggregateReq                       // helper: Msg = the leader's AggregateReq
	EventCollectReq                         // helper: Msg = the leader's CollectReq
)

// Event is one input of Apply: Now is the event's time (the service's
// clock; tests pass any), Day the batch of EventCollect.
type Event struct {
	Now  time.Time
	Kind EventKind
	Msg  []byte
	Day  p3.Day
}

// Errors of Apply. A dropped report is not an error: it is counted in Stats.
var (
	ErrWrongRole  = errors.New("prio3: event not for this role")
	ErrBatchOpen  = errors.New("prio3: batch still open (wait for the day's end + grace)")
	ErrInFlight   = errors.New("prio3: batch has reports in preparation (tick and wait for the helper)")
	ErrSmallBatch = p3.ErrSmallBatch
	ErrRefused    = errors.New("prio3: the helper refused the aggregate share")
	ErrConfig     = errors.New("prio3: invalid aggregator configuration")
)

// Stats are a role's counters (monotonic; kept in the encoded state).
type Stats struct {
	Uploads  uint64
	Prepared uint64 // reports committed to a batch
	// Rejected: reason → reports dropped. The leader also counts the
	// helper's reasons as "helper_<reason>".
	Rejected map[string]uint64
	// CollectRefused: reason → refused collections.
	CollectRefused map[string]uint64
	Collected      uint64
}

func (s *Stats) reject(reason string) {
	if s.Rejected == nil {
		s.Rejected = map[string]uint64{}
	}
	s.Rejected[reason]++
}

func (s *Stats) refuse(reason string) {
	if s.CollectRefused == nil {
		s.CollectRefused = map[string]uint64{}
	}
	s.CollectRefused[reason]++
}

// batch is one (campaign, day)'s committed state: O(L) for the aggregate
// and the noise draw, plus DigestSize + NonceSize bytes per committed report
// for the replay check and idempotent retries (dropped once the batch is
// collected: no report of a closed batch is accepted or retried then).
type batch struct {
	count    uint64
	checksum p3.Checksum
	agg      p3.Aggregate
	// ids: committed report ids → the helper's digest of the request item
	// (itemDigest; zero at the leader); nil once collected.
	ids map[p3.ReportID]digest
	// fresh: the ids committed since the service last logged the batch
	// (batchlog.go), in commit order.
	fresh []p3.ReportID
	// noise: the batch's noise vector (L entries), drawn at its first seal
	// under ε noiseEps; nil when none was drawn (noise.go).
	noise    []int64
	noiseEps float64
	// collected: the batch's share went to the collector (leader) or to
	// the leader (helper), or its collection was refused for good
	// (small_batch at the helper); only such a batch is ever forgotten.
	collected bool
	// logged: what the service's batch log already holds (batchlog.go).
	noiseLogged, collectedLogged bool
}

// DigestSize is the bytes of an item digest the helper keeps per
// committed report (a truncated SHA-256; itemDigest).
const DigestSize = 16

// digest is a truncated itemDigest: equal digests mean the leader sent
// the same request item again (a retry), different ones a second report
// under a committed id (a replay).
type digest [DigestSize]byte

func newBatch(v *p3.VDAF) *batch {
	return &batch{agg: v.NewAggregate(), ids: map[p3.ReportID]digest{}}
}

func (b *batch) add(v *p3.VDAF, id p3.ReportID, out *p3.OutShare, d digest) {
	v.Update(&b.agg, out)
	b.checksum.Add(id)
	b.count++
	b.ids[id] = d
	b.fresh = append(b.fresh, id)
}

// markCollected records that b's share is out for good and drops its
// report ids (a closed batch takes no report, so none is checked against
// them again).
func (b *batch) markCollected() {
	b.collected = true
	b.ids = nil
}

// future reports whether day is after now's next day (UTC): no honest
// client's clock is that far ahead, and accepting it would open batches
// nobody collects for days.
func future(day p3.Day, now time.Time) bool { return day > p3.DayOf(now)+1 }

// expired reports whether day's batch state may be dropped at now
// (Config.Retain after its close; never with Retain 0).
func expired(cfg *Config, day p3.Day, now time.Time) bool {
	return cfg.Retain > 0 && !now.Before(day.Start().Add(24*time.Hour+cfg.Grace+cfg.Retain))
}

// closed reports whether day's batch is closed at now.
func closed(cfg *Config, day p3.Day, now time.Time) bool {
	return !now.Before(day.Start().Add(24*time.Hour + cfg.Grace))
}

func checkConfig(cfg *Config) (*p3.VDAF, error) {
	if len(cfg.Keys) == 0 {
		return nil, fmt.Errorf("%w: no HPKE keys", ErrConfig)
	}
	if len(cfg.VerifyKeys) == 0 {
		return nil, fmt.Errorf("%w: no verify key", ErrConfig)
	}
	if cfg.MinBatchSize == 0 {
		return nil, fmt.Errorf("%w: min batch size 0 would reveal single clients", ErrConfig)
	}
	if err := checkEpsilon(cfg.Epsilon); err != nil {
		return nil, err
	}
	if err := checkStatus(cfg.StatusEpsilon, cfg.StatusDelta); err != nil {
		return nil, err
	}
	if cfg.LeaderTokenSeed != nil && len(cfg.LeaderTokenSeed) != token.SeedSize {
		return nil, fmt.Errorf("%w: leader token seed of %d bytes, want %d", ErrConfig, len(cfg.LeaderTokenSeed), token.SeedSize)
	}
	if cfg.TokenSeed != nil && len(cfg.TokenSeed) != token.SeedSize {
		return nil, fmt.Errorf("%w: helper token seed of %d bytes, want %d", ErrConfig, len(cfg.TokenSeed), token.SeedSize)
	}
	v, err := p3.New(cfg.Campaign, cfg.Measurement)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return v, nil
}

// sealShare builds role's AggShare of b for the collector, with the
// batch's noise when it has a draw or cfg.Epsilon > 0 (noisyAggregate).
func sealShare(cfg *Config, role byte, day p3.Day, b *batch) ([]byte, error) {
	if b == nil {
		return nil, fmt.Errorf("prio3: no state for batch %s (forgotten after --retain?)", day)
	}
	share, eps, err := noisyAggregate(cfg, b)
	if err != nil {
		return nil, err
	}
	a := &p3.AggShare{Role: role, Campaign: cfg.Campaign, Day: day, Count: b.count, Checksum: b.checksum, Epsilon: eps}
	if err := p3.SealAggShare(cfg.Collector, a, share); err != nil {
		return nil, err
	}
	return a.MarshalBinary()
}
