package prio3

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/segmentio/kafka-go"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/retry"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// The services of Prio3 mode: a LeaderService and a HelperService, each a
// loop around its pure state machine (read → Apply → write), each
// restart-safe through a snapshot file in its state directory.
//
// Preparation is one synchronous NATS request/reply round per
// AggregateReq (protocol.Prio3HelperSubject): the helper commits and
// snapshots before it answers, and answers a retried identical request
// item with the same prep message (Helper.Apply), so the leader may retry
// a request whose answer it did not get without counting a report twice
// (draft-ietf-ppm-dap §4.6: aggregation jobs are idempotent at the helper).

// Defaults of the services' tunables.
const (
	DefaultMaxBatch       = 64
	DefaultMaxWait        = 200 * time.Millisecond
	DefaultStepFill       = time.Second
	DefaultRequestTimeout = time.Minute
	DefaultAttempts       = 3
)

// Snapshot file names in a service's state directory.
const (
	LeaderStateFile = "prio3-leader.state"
	HelperStateFile = "prio3-helper.state"
)

// Metric reasons of the services themselves (beside the state machines'
// per-report reasons): a message that does not parse or is for another
// campaign.
const (
	ReasonMalformedRequest  = "malformed_request"  // helper: a request it could not handle
	ReasonMalformedResponse = "malformed_response" // leader: a helper answer it could not apply
)

// Reasons the helper refuses a request before it changes any state
// (crowdlog_prio3_requests_refused_total{reason}; HelperService.Refused).
const (
	// RefusedReplySubject: the reply subject is not a requester inbox
	// (natsconn.ReplyAllowed): a message delivered by a push consumer, a
	// stream's republish or a publish naming another subject.
	RefusedReplySubject = "reply_subject"
	// RefusedUnsigned: not a p3.SignedReq (a bare AggregateReq or
	// CollectReq, or anything else).
	RefusedUnsigned = "unsigned"
	// RefusedSignature: a SignedReq whose signature does not verify under
	// the leader's key (HelperService.LeaderKey).
	RefusedSignature = "bad_signature"
	// RefusedStale: issued more than MaxSkew before or after the helper's
	// wall clock.
	RefusedStale = "stale"
	// RefusedReplay: a request id the helper has already accepted.
	RefusedReplay = "request_replay"
)

// refusedReasons are the series of crowdlog_prio3_requests_refused_total
// that exist at 0 from the start.
var refusedReasons = []string{RefusedReplySubject, RefusedUnsigned, RefusedSignature, RefusedStale, RefusedReplay}

// DefaultMaxSkew is the default HelperService.MaxSkew.
const DefaultMaxSkew = 5 * time.Minute

// counters is the copy of a role's Stats that metrics read (the state
// machine's own Stats change only in the service loop).
type counters struct {
	// written counts the bytes the service wrote to its state directory
	// (batch logs and snapshots; Written).
	written atomic.Int64
	mu      sync.Mutex
	stats   Stats
	service map[string]uint64 // service-level rejections
	refused map[string]uint64 // requests refused before any state change
}

func (c *counters) refuse(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused == nil {
		c.refused = map[string]uint64{}
	}
	c.refused[reason]++
}

// Written returns the bytes written to the state directory since the
// service started (batch logs and snapshots; not kept across restarts).
func (c *counters) Written() int64 { return c.written.Load() }

// Refused returns the requests refused before any state change, by reason
// (RefusedReplySubject, RefusedUnsigned, …; not kept across restarts).
func (c *counters) Refused() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.refused)
}

func (c *counters) set(s *Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats = Stats{Uploads: s.Uploads, Prepared: s.Prepared, Collected: s.Collected,
		Rejected: maps.Clone(s.Rejected), CollectRefused: maps.Clone(s.CollectRefused)}
}

func (c *counters) count(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.service == nil {
		c.service = map[string]uint64{}
	}
	c.service[reason]++
}

// Stats returns a copy of the role's counters as of its last step, the
// service's own rejections (malformed requests or responses) merged into
// Rejected.
func (c *counters) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Rejected = maps.Clone(s.Rejected)
	s.CollectRefused = maps.Clone(s.CollectRefused)
	if s.Rejected == nil {
		s.Rejected = map[string]uint64{}
	}
	if s.CollectRefused == nil {
		s.CollectRefused = map[string]uint64{}
	}
	for k, v := range c.service {
		s.Rejected[k] += v
	}
	return s
}

func nowFunc(f func() time.Time) func() time.Time {
	if f == nil {
		return time.Now
	}
	return f
}

// LeaderService is the leader aggregator process: it reads client uploads
// of its campaign from protocol.Prio3UploadsTopic (the partition the
// campaign's key hashes to, as the relays write, and any it read before;
// a partition the campaign moves to when the topic grows is picked up
// within PartitionRefresh; uploads keyed with another campaign are
// skipped unopened), prepares them with
// the helper over NATS (protocol.Prio3HelperSubject), collects each batch
// once the leader's clock passes the day's end + Config.Grace and writes
// both aggregate shares to protocol.Prio3SharesTopic (key campaign + "/" +
// day). One process per campaign: its state is one Leader.
//
// Restart safety: the snapshot (StateDir/LeaderStateFile, replaced
// atomically) holds the Leader's state but its batches (in their
// append-only batch logs, batchlog.go, written first) and its pending
// reports (named by their uploads' partition and offset), the next offset
// of every partition and the days collected. It is written after a step's
// uploads are applied and before any request reaches the helper, and again
// after the answers are applied, so after a crash the leader resumes from
// the snapshot's offsets: an upload applied before it is not read again,
// one after it is read again and prepared anew (the same prep share:
// Prio3's preparation is deterministic), and the uploads of reports that
// were pending are read again, prepared anew without the checks they
// already passed (Leader.repend), re-sent and answered idempotently by the
// helper if it committed them. So the uploads topic's retention must
// exceed the leader's longest outage. A batch
// collected but not yet recorded is collected again: the shares may be
// written twice (the same aggregate in another ciphertext); the release
// stage keeps one pair per (campaign, day).
type LeaderService struct {
	Config   Config
	Brokers  []string
	NATS     *nats.Conn // requests to the helper
	StateDir string     // required: the snapshot's directory
	// SignKey is the leader operator's Ed25519 key (RFC 8032;
	// keydir.Prio3LeaderSignKey): every request to the helper is sent as a
	// p3.SignedReq under it, with a fresh id and the wall-clock time per
	// attempt. Required.
	SignKey ed25519.PrivateKey
	// ListHash is the campaign's keyword list's hash (keywords.List.Hash):
	// when set, the leader announces its settings to clients, signed with
	// SignKey, on protocol.Prio3SettingsSubject (Settings, announce.go).
	ListHash [32]byte
	// Now is the leader's clock (nil: time.Now); read once per step.
	Now    func() time.Time
	Logger *slog.Logger
	// CampaignStart (Config.StatusEpsilon > 0), when not zero, is the
	// first day (UTC) of the campaign's span: the leader writes a
	// withheld notice for every closed day from it on that has no batch,
	// so a day without reports reads as a day of too few (status.go).
	// Zero: the span starts at the earliest day this leader could still
	// take a report for when it first ran (not closed at its first step,
	// or the earliest day of its state), which depends on no report.
	CampaignStart time.Time
	// MaxBatch uploads are applied per step (0: DefaultMaxBatch); a step
	// waits at most MaxWait for them (0: DefaultMaxWait).
	MaxBatch int
	MaxWait  time.Duration
	// StepFill: after a step's first upload the step waits up to StepFill
	// for more (up to MaxBatch) before applying them. Each step that
	// commits reports appends one batch-log record carrying the day's
	// running aggregate (L × 16 B: 160 KB at L = 10,000) at the leader
	// and, through its one answer, at the helper, so at a trickle of
	// uploads StepFill bounds those records to one per StepFill per
	// aggregator (86,400 × 160 KB = 13.8 GB a day at 1 s, whatever the
	// rate) for at most StepFill more latency per report (0:
	// DefaultStepFill; negative: no wait, each step takes what has
	// arrived).
	StepFill time.Duration
	// RequestTimeout bounds one helper request (0: DefaultRequestTimeout);
	// Attempts is the tries per request in a step (0: DefaultAttempts)
	// before the step gives up and the next one retries it.
	RequestTimeout time.Duration
	Attempts       int
	// CollectRetry is the pause (wall clock) before the leader asks again
	// for a batch the helper's clock still has open (0: 10 s).
	CollectRetry time.Duration
	// PartitionRefresh is how often the leader lists the uploads topic's
	// partitions, to read the one its campaign's uploads move to when the
	// topic grows (0: DefaultPartitionRefresh).
	PartitionRefresh time.Duration
	// DeleteApplied: the leader deletes (Kafka DeleteRecords, KIP-107) the
	// records of the uploads topic below Applied on each partition it
	// reads, but never past the lowest record of another campaign (or
	// without a key) there (trim.go), every DeleteEvery (0:
	// DefaultDeleteEvery), each request bounded by DeleteTimeout (0:
	// DefaultDeleteTimeout). A failed request is logged and counted
	// (DeleteFailures) and never stops the leader. The broker then holds
	// about the leader's lag of uploads instead of the topic's retention.
	// Its Kafka user needs Delete on the topic (infra/kafka
	// RolePrio3Delete). A state directory restored from a backup older
	// than a deletion lacks those uploads: its pending reports are lost.
	DeleteApplied bool
	DeleteEvery   time.Duration
	DeleteTimeout time.Duration

	counters
	// Steps counts the loop's completed steps (tests wait on it).
	Steps atomic.Int64
	// Shares counts aggregate-share pairs written to the shares topic.
	Shares atomic.Int64
	// OtherCampaign counts uploads-topic records keyed for another
	// campaign (or not keyed), skipped without being opened (uploads.go).
	OtherCampaign atomic.Int64
	// UploadsDeleted counts the uploads-topic records deleted
	// (DeleteApplied; the log start offsets' moves this process made);
	// DeleteFailures the deletion requests that failed.
	UploadsDeleted atomic.Int64
	DeleteFailures atomic.Int64
	deleteRounds   atomic.Int64 // deletion rounds done (tests wait on it)

	applied atomic.Pointer[map[int]int64] // Applied: set by each snapshot
}

// Applied returns, per partition of protocol.Prio3UploadsTopic this leader
// has read, the offset below which no upload is needed again, even after a
// crash: the last snapshot's next offset, lowered to the oldest upload
// whose report was still pending then (it is read again at a restart).
// Nil before the first snapshot of this Run. Records below it may be
// deleted (Kafka DeleteRecords; the scale benchmark does, as an operator
// whose partitions hold only this campaign can) without losing a report;
// records of other campaigns on the same partition are another leader's
// to decide.
func (s *LeaderService) Applied() map[int]int64 {
	if m := s.applied.Load(); m != nil {
		return maps.Clone(*m)
	}
	return nil
}

// upload is one message of the uploads topic. skip marks a record of
// another campaign, skipped unopened (no value): it only advances the
// partition's next offset, so a restart does not read it again.
type upload struct {
	partition int
	offset    int64
	value     []byte
	skip      bool
	// foreign: keyed for another campaign or not keyed (another
	// campaign's leader may need it: never deleted)
	foreign bool
}

// leaderRun is one LeaderService.Run's working state.
type leaderRun struct {
	s           *LeaderService
	l           *Leader
	next        map[int]int64 // partition → next offset to apply
	done        map[p3.Day]string
	outstanding [][]byte // AggregateReqs sent but not answered
	// retryAt: days whose collection the helper refused as batch_open
	// (its clock behind the leader's) → when to ask again (wall clock)
	retryAt map[p3.Day]time.Time
	store   *batchStore // the batch logs
	// redo: uploads whose reports were pending at the last snapshot, to
	// queue again when read (Leader.repend); at: pending report id → its
	// upload
	redo map[upLoc]bool
	at   map[p3.ReportID]upLoc
	w    *kafka.Writer
	log  *slog.Logger
	// watch: the records of other campaigns seen (DeleteApplied; else nil)
	watch *foreignWatch
	// spanStart: the first day of the campaign's span (withholdEmpty);
	// spanSet once known.
	spanStart p3.Day
	spanSet   bool
}

// statusPassed is the done value of a day whose noisy status test passed
// (status.go) and whose shares are not yet written: kept in the state so
// that a retry or a restart never draws the status again.
const statusPassed = "status_passed"

// Run serves until ctx ends (nil then) or the state or topic cannot be
// read (an error saying what to do).
func (s *LeaderService) Run(ctx context.Context) error {
	if s.StateDir == "" {
		return errors.New("prio3 leader: no state directory (--state-dir)")
	}
	if s.NATS == nil {
		return errors.New("prio3 leader: no NATS connection to the helper")
	}
	if len(s.SignKey) != ed25519.PrivateKeySize {
		return errors.New("prio3 leader: no signing key (--sign-key; crowdlog keys generate --role prio3-leader creates " + keydir.Prio3LeaderSignKey + ")")
	}
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("role", "prio3-leader", "campaign", s.Config.Campaign)
	if err := onion.PrepareKeys(s.Config.Keys); err != nil {
		return fmt.Errorf("prio3 leader: %w", err)
	}
	l, f, store, err := loadLeader(s.StateDir, s.Config)
	if err != nil {
		return err
	}
	if s.ListHash != ([32]byte{}) {
		sub, err := s.ServeSettings(log)
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
	}
	next := f.next
	run := &leaderRun{s: s, l: l, next: next, done: f.done, redo: f.redo, at: map[p3.ReportID]upLoc{}, store: store, log: log, retryAt: map[p3.Day]time.Time{}}
	if s.DeleteApplied {
		run.watch = newForeignWatch()
	}
	for day, v := range run.done {
		if v == statusPassed {
			l.markPassed(day)
		}
	}
	s.set(&l.Stats)
	parts, err := uploadPartitions(ctx, s.Brokers)
	if err != nil {
		return err
	}
	maxBatch := s.MaxBatch
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	in := make(chan upload, maxBatch)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	// the partitions to read: the campaign's (where the relays' key hash
	// puts its uploads) and every partition read before (saved offsets,
	// pending uploads); a partition that becomes the campaign's later (the
	// topic grown) is picked up by watchPartitions
	reading := map[int]bool{}
	// copies: the step loop changes next and redo while the watcher reads
	startNext, startRedo := maps.Clone(next), maps.Clone(run.redo)
	readPart := func(p int) {
		if reading[p] {
			return
		}
		reading[p] = true
		from, ok := startNext[p]
		if !ok {
			from = kafka.FirstOffset
		}
		for loc := range startRedo {
			// the pending reports' uploads, read again
			if loc.part == p && loc.off < from {
				from = loc.off
			}
		}
		run.watch.start(p, from)
		wg.Go(func() { s.read(rctx, p, from, in, log) })
	}
	for _, p := range s.ownPartitions(parts, startNext, startRedo) {
		readPart(p)
	}
	wg.Go(func() {
		s.watchPartitions(rctx, len(parts), func(parts []int) {
			for _, p := range s.ownPartitions(parts, nil, nil) {
				if !reading[p] {
					log.Info("prio3 leader: reading a new partition of the uploads topic", "partition", p, "partitions", len(parts))
				}
				readPart(p)
			}
		}, log)
	})
	run.w = &kafka.Writer{Addr: kafka.TCP(s.Brokers...), Topic: protocol.Prio3SharesTopic, Transport: infrakafka.Transport(ctx),
		Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond,
		// a request (batch) must stay under the topic's max.message.bytes
		// (infra/kafka: 2 MiB), or the broker refuses it and the write is
		// retried forever; one share is 16 B·L + 200 B (≤ 1 MiB at any L
		// an upload can carry)
		BatchBytes: 2_000_000, WriteTimeout: 30 * time.Second}
	defer infrakafka.CloseWriter(run.w)
	if s.DeleteApplied {
		wg.Go(func() { s.deleteApplied(rctx, run.watch, log) })
	}
	log.Info("prio3 leader: serving", "delete_applied_uploads", s.DeleteApplied, "partitions", len(parts), "restored", len(next) > 0, "pending_uploads_to_read_again", len(run.redo))
	for ctx.Err() == nil {
		if err := run.step(ctx, in, maxBatch); err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		s.Steps.Add(1)
	}
	return nil
}

// DefaultPartitionRefresh is how often the leader lists the uploads
// topic's partitions (LeaderService.PartitionRefresh).
const DefaultPartitionRefresh = 30 * time.Second

// ownPartitions returns the partitions the leader reads: the one the
// campaign's key hashes to among parts (kafka-go's Hash balancer, as the
// relays write: FNV-1a of the key modulo the partition count) and the
// partitions of next and redo (read before).
func (s *LeaderService) ownPartitions(parts []int, next map[int]int64, redo map[upLoc]bool) []int {
	set := map[int]bool{}
	if len(parts) > 0 {
		set[(&kafka.Hash{}).Balance(kafka.Message{Key: []byte(s.Config.Campaign)}, parts...)] = true
	}
	for p := range next {
		set[p] = true
	}
	for loc := range redo {
		set[loc.part] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// watchPartitions lists the uploads topic's partitions every
// PartitionRefresh and calls grown with them when their count changed
// from n, until ctx ends.
func (s *LeaderService) watchPartitions(ctx context.Context, n int, grown func([]int), log *slog.Logger) {
	every := s.PartitionRefresh
	if every <= 0 {
		every = DefaultPartitionRefresh
	}
	for sleep(ctx, every) == nil {
		parts, err := uploadPartitions(ctx, s.Brokers)
		if err != nil {
			log.Warn("prio3 leader: listing the uploads topic's partitions failed; trying again later", "err", err)
			continue
		}
		if len(parts) != n {
			n = len(parts)
			grown(parts)
		}
	}
}

// uploadPartitions lists the partitions of the uploads topic.
func uploadPartitions(ctx context.Context, brokers []string) ([]int, error) {
	if len(brokers) == 0 {
		return nil, errors.New("prio3 leader: no Kafka brokers (--kafka)")
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := infrakafka.Dialer(ctx).DialContext(dctx, "tcp", brokers[0])
	if err != nil {
		return nil, fmt.Errorf("prio3 leader: dial Kafka %s: %w", brokers[0], err)
	}
	defer conn.Close()
	ps, err := conn.ReadPartitions(protocol.Prio3UploadsTopic)
	if err != nil {
		return nil, fmt.Errorf("prio3 leader: topic %s: %w (create it with `crowdlog topics`)", protocol.Prio3UploadsTopic, err)
	}
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out, nil
}

// read feeds partition's uploads from offset from into in until ctx ends.
// A reader that fails is opened again at the next offset after a pause
// (1 s, doubling to 30 s).
func (s *LeaderService) read(ctx context.Context, partition int, from int64, in chan<- upload, log *slog.Logger) {
	pause := time.Second
	for {
		err := s.readFrom(ctx, partition, &from, in)
		if ctx.Err() != nil {
			return
		}
		log.Error("prio3 leader: reading a partition failed; opening it again", "partition", partition, "offset", from, "in", pause, "err", err)
		if sleep(ctx, pause) != nil {
			return
		}
		pause = min(2*pause, 30*time.Second)
	}
}

// readFrom reads partition from *from on, advancing *from past each
// upload handed to in.
func (s *LeaderService) readFrom(ctx context.Context, partition int, from *int64, in chan<- upload) error {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: s.Brokers, Topic: protocol.Prio3UploadsTopic, Partition: partition,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 250 * time.Millisecond, Dialer: infrakafka.Dialer(ctx),
		// an upload is 787 KB at L = 10,000, b = 4: kafka-go's default
		// queue of 100 messages would hold 79 MB per partition
		QueueCapacity: 8})
	defer r.Close()
	if err := r.SetOffset(*from); err != nil {
		return fmt.Errorf("set offset %d: %w", *from, err)
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return err
		}
		u := upload{partition: m.Partition, offset: m.Offset, value: m.Value, foreign: len(m.Key) == 0}
		if !s.forCampaign(&m) {
			u.foreign = true
			// through the step loop like an upload, in order: the saved
			// offset passes it only after every upload before it
			u.value, u.skip = nil, true
		}
		select {
		case in <- u:
			*from = m.Offset + 1
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// fetch returns up to max uploads (and the skipped records among them,
// which do not count): it waits up to wait for the first (nil when none
// came), then up to fill for more (fill ≤ 0: only those already there).
func fetch(ctx context.Context, in <-chan upload, max int, wait, fill time.Duration) []upload {
	t := time.NewTimer(wait)
	defer t.Stop()
	var out []upload
	n := 0
	take := func(u upload) {
		out = append(out, u)
		if !u.skip {
			n++
		}
	}
	select {
	case u := <-in:
		take(u)
	case <-t.C:
		return nil
	case <-ctx.Done():
		return nil
	}
	var filled <-chan time.Time // nil: take only what has arrived
	if fill > 0 {
		f := time.NewTimer(fill)
		defer f.Stop()
		filled = f.C
	}
	for n < max {
		if filled == nil {
			select {
			case u := <-in:
				take(u)
			default:
				return out
			}
			continue
		}
		select {
		case u := <-in:
			take(u)
		case <-filled:
			return out
		case <-ctx.Done():
			return out
		}
	}
	return out
}

// step is one pass of the leader's loop.
func (r *leaderRun) step(ctx context.Context, in <-chan upload, maxBatch int) error {
	s := r.s
	wait := s.MaxWait
	if wait <= 0 {
		wait = DefaultMaxWait
	}
	var batch []upload
	if len(r.outstanding) == 0 {
		fill := s.StepFill
		if fill == 0 {
			fill = DefaultStepFill
		}
		batch = fetch(ctx, in, maxBatch, wait, fill)
	} else if err := sleep(ctx, wait); err != nil {
		return nil
	}
	now := nowFunc(s.Now)()
	for _, u := range batch {
		loc := upLoc{part: u.partition, off: u.offset}
		r.watch.note(u.partition, u.offset, u.foreign)
		if next, ok := r.next[u.partition]; ok && u.offset < next {
			// read before the restart: queued again if its report was
			// pending, else already counted
			if r.redo[loc] {
				delete(r.redo, loc)
				if id, err := r.l.repend(u.value); err != nil {
					r.log.Error("prio3 leader: a pending upload read again no longer prepares; left out", "partition", u.partition, "offset", u.offset, "err", err)
				} else {
					r.at[id] = loc
				}
			}
			continue
		}
		if u.skip {
			r.next[u.partition] = u.offset + 1
			continue
		}
		// never an error: a dropped upload is counted in Stats.Rejected
		if _, err := r.l.Apply(Event{Now: now, Kind: EventUpload, Msg: u.value}); err != nil {
			return fmt.Errorf("prio3 leader: apply upload: %w", err)
		}
		if id, ok := r.l.lastQueued(); ok {
			r.at[id] = loc
		}
		r.next[u.partition] = u.offset + 1
	}
	outs, err := r.l.Apply(Event{Now: now, Kind: EventTick})
	if err != nil {
		return fmt.Errorf("prio3 leader: tick: %w", err)
	}
	for _, o := range outs {
		r.outstanding = append(r.outstanding, o.Msg)
	}
	changed := len(batch) > 0 || len(outs) > 0
	if changed {
		// before the helper sees a report: what it may commit is in the
		// leader's pending state on disk
		if err := r.save(); err != nil {
			return err
		}
	}
	if len(r.outstanding) > 0 {
		r.prepare(ctx, now)
		changed = true
	}
	if len(r.redo) == 0 && r.collect(ctx, now) {
		// (not before every pending upload is queued again: a batch
		// collected without them would not match the helper's)
		changed = true
	}
	for day, v := range r.done {
		if v == statusPassed {
			continue // still to be collected: kept whatever its age
		}
		if r.l.forget(day, now) {
			r.store.drop(day)
			delete(r.done, day)
			changed = true
		}
	}
	if changed {
		if err := r.save(); err != nil {
			return err
		}
	}
	s.set(&r.l.Stats)
	return nil
}

// prepare sends the outstanding AggregateReqs and applies the answers; a
// request without a usable answer stays outstanding for the next step.
func (r *leaderRun) prepare(ctx context.Context, now time.Time) {
	var left [][]byte
	for _, req := range r.outstanding {
		resp, err := r.s.ask(ctx, req, r.log)
		if err != nil {
			r.log.Warn("prio3 leader: the helper did not answer an aggregate request; retrying in the next step", "err", err)
			left = append(left, req)
			continue
		}
		if _, err := r.l.Apply(Event{Now: now, Kind: EventAggregateResp, Msg: resp}); err != nil {
			r.s.count(ReasonMalformedResponse)
			r.log.Error("prio3 leader: unusable aggregate response from the helper; retrying the request in the next step", "err", err)
			left = append(left, req)
			continue
		}
		// a response that left reports out: they go back to the queue
		if n := r.l.requeue(req); n > 0 {
			r.s.count(ReasonMalformedResponse)
			r.log.Error("prio3 leader: the helper's response left reports out; sending them again", "reports", n)
		}
	}
	r.outstanding = left
}

// collect collects every closed batch not yet done; it reports whether the
// state changed.
func (r *leaderRun) collect(ctx context.Context, now time.Time) bool {
	changed := false
	if r.l.cfg.StatusEpsilon > 0 {
		var ok bool
		if changed, ok = r.withholdEmpty(ctx, now); !ok {
			return changed
		}
	}
	for _, day := range r.l.Days() {
		if v, ok := r.done[day]; (ok && v != statusPassed) || !closed(&r.l.cfg, day, now) || time.Now().Before(r.retryAt[day]) {
			continue
		}
		outs, err := r.l.Apply(Event{Now: now, Kind: EventCollect, Day: day})
		switch {
		case errors.Is(err, ErrInFlight), errors.Is(err, ErrBatchOpen):
			continue
		case errors.Is(err, ErrSmallBatch):
			if !r.notice(ctx, day) {
				return changed
			}
			r.log.Warn("prio3 leader: batch withheld (under the minimum batch size, or its noisy count under the status threshold), never revealed; the collector is told", "day", day.String())
			changed = true
			continue
		case err != nil:
			r.log.Error("prio3 leader: collect", "day", day.String(), "err", err)
			continue
		}
		changed = true
		if r.l.cfg.StatusEpsilon > 0 && r.done[day] != statusPassed {
			// the status decision is on disk before the helper is asked:
			// a retry or a restart uses it, never a fresh draw
			r.done[day] = statusPassed
			if err := r.save(); err != nil {
				r.log.Error("prio3 leader: snapshot of a day's status failed; retrying in the next step", "day", day.String(), "err", err)
				continue
			}
		}
		resp, err := r.s.ask(ctx, outs[0].Msg, r.log)
		if err != nil {
			r.log.Warn("prio3 leader: the helper did not answer a collect request; retrying in the next step", "day", day.String(), "err", err)
			continue
		}
		shares, err := r.l.Apply(Event{Now: now, Kind: EventAggShare, Msg: resp})
		if errors.Is(err, ErrRefused) {
			a, _ := p3.ParseAggShare(resp)
			if a != nil && a.Reason == "batch_open" {
				pause := r.s.CollectRetry
				if pause <= 0 {
					pause = 10 * time.Second
				}
				r.retryAt[day] = time.Now().Add(pause)
				r.log.Warn("prio3 leader: the helper's clock still has the batch open; asking again later", "day", day.String(), "in", pause)
				continue
			}
			r.done[day] = "helper_refused"
			r.log.Error("prio3 leader: the helper refused the batch's aggregate share; the batch is not released (compare both aggregators' crowdlog_prio3_collect_refused_total)",
				"day", day.String(), "err", err)
			continue
		}
		if err != nil {
			r.s.count(ReasonMalformedResponse)
			r.log.Error("prio3 leader: unusable aggregate share from the helper; retrying in the next step", "day", day.String(), "err", err)
			continue
		}
		if b := r.l.batches[day]; r.l.cfg.Epsilon > 0 || (b != nil && b.noise != nil) {
			// the batch's noise draw is on disk before its noisy share
			// leaves: a crash and re-collection resends the same draw
			// (noise.go), never a fresh one the collector could average
			if err := r.save(); err != nil {
				r.log.Error("prio3 leader: snapshot before writing a noisy share failed; retrying in the next step", "day", day.String(), "err", err)
				continue
			}
		}
		key := []byte(r.l.cfg.Campaign + "/" + day.String())
		msgs := make([]kafka.Message, len(shares))
		for i, o := range shares {
			msgs[i] = kafka.Message{Key: key, Value: o.Msg}
		}
		if err := retry.Forever(ctx, r.log, "prio3 leader: write "+protocol.Prio3SharesTopic, 100*time.Millisecond, 5*time.Second,
			func() error { return r.w.WriteMessages(ctx, msgs...) }); err != nil {
			return changed
		}
		r.done[day] = "collected"
		r.s.Shares.Add(1)
		count := uint64(0)
		if a, err := p3.ParseAggShare(shares[0].Msg); err == nil {
			count = a.Count
		}
		r.log.Info("prio3 leader: batch collected", "day", day.String(), "reports", count)
	}
	return changed
}

// notice writes the leader's withheld notice of day to the shares topic
// (the collector records it below_min_batch: a refusal in the leader's
// role, no count) and marks the day done; false when ctx ended first.
func (r *leaderRun) notice(ctx context.Context, day p3.Day) bool {
	notice, _ := (&p3.AggShare{Role: 0, Campaign: r.l.cfg.Campaign, Day: day, Reason: p3.ReasonSmallBatch, Epsilon: r.l.cfg.Epsilon}).MarshalBinary()
	msg := kafka.Message{Key: []byte(r.l.cfg.Campaign + "/" + day.String()), Value: notice}
	if err := retry.Forever(ctx, r.log, "prio3 leader: write "+protocol.Prio3SharesTopic, 100*time.Millisecond, 5*time.Second,
		func() error { return r.w.WriteMessages(ctx, msg) }); err != nil {
		return false
	}
	r.done[day] = "small_batch"
	return true
}

// withholdEmpty (StatusEpsilon > 0) writes a withheld notice for every
// closed, unexpired day of the campaign's span that has no batch and no
// outcome yet, so that a day without reports reads as withheld, as a day
// of one report does (status.go). The span starts at
// LeaderService.CampaignStart, else at the earliest day not closed at
// this run's first step or the earliest day of the state's outcomes,
// whichever is first: a day before it took no report in any run (it was
// closed when the leader started), so its absence depends on no data. It
// reports whether the state changed and false for ok when ctx ended.
func (r *leaderRun) withholdEmpty(ctx context.Context, now time.Time) (changed, ok bool) {
	cfg := &r.l.cfg
	if !r.spanSet {
		start := p3.DayOf(now.Add(-24*time.Hour - cfg.Grace))
		for closed(cfg, start, now) {
			start++
		}
		for d := range r.done {
			start = min(start, d)
		}
		if !r.s.CampaignStart.IsZero() {
			start = p3.DayOf(r.s.CampaignStart)
		}
		r.spanStart, r.spanSet = start, true
	}
	have := map[p3.Day]bool{}
	for _, d := range r.l.Days() {
		have[d] = true
	}
	for d := r.spanStart; closed(cfg, d, now); d++ {
		if _, done := r.done[d]; done || have[d] || expired(cfg, d, now) {
			continue
		}
		if !r.notice(ctx, d) {
			return changed, false
		}
		r.log.Info("prio3 leader: a day of the campaign without reports withheld; the collector is told", "day", d.String())
		changed = true
	}
	return changed, true
}

// save appends what the batches' logs lack, then replaces the snapshot
// (offsets, outcomes, pending reports, the logs' lengths).
func (r *leaderRun) save() error {
	if err := os.MkdirAll(r.s.StateDir, 0o700); err != nil {
		return fmt.Errorf("prio3: state directory: %w", err)
	}
	if err := r.store.flush(r.l.batches); err != nil {
		return err
	}
	for id := range r.at {
		if len(r.l.pending[id]) == 0 {
			delete(r.at, id)
		}
	}
	b, err := encodeLeaderFile(r.l, &leaderFile{next: r.next, done: r.done, refs: r.store.refs, redo: r.redo}, r.at)
	if err != nil {
		return err
	}
	if err := writeState(r.s.StateDir, LeaderStateFile, b); err != nil {
		return err
	}
	r.s.written.Add(r.store.Written + int64(len(b)))
	r.store.Written = 0
	r.store.cleanup()
	low := maps.Clone(r.next)
	lower := func(loc upLoc) {
		if o, ok := low[loc.part]; !ok || loc.off < o {
			low[loc.part] = loc.off
		}
	}
	for _, loc := range r.at {
		lower(loc)
	}
	for loc := range r.redo {
		lower(loc)
	}
	r.s.applied.Store(&low)
	return nil
}

// ask sends req to the helper and returns its answer: Attempts tries of at
// most RequestTimeout each, with a growing pause between them.
func (s *LeaderService) ask(ctx context.Context, req []byte, log *slog.Logger) ([]byte, error) {
	attempts := s.Attempts
	if attempts <= 0 {
		attempts = DefaultAttempts
	}
	timeout := s.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	pause := 100 * time.Millisecond
	var err error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			log.Debug("prio3 leader: retrying a helper request", "attempt", i+1, "err", err)
			if sleep(ctx, pause) != nil {
				return nil, ctx.Err()
			}
			pause = min(2*pause, 5*time.Second)
		}
		var signed []byte
		if signed, err = p3.SignReq(s.SignKey, req, time.Now()); err != nil {
			return nil, fmt.Errorf("sign a helper request: %w", err)
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		var m *nats.Msg
		m, err = s.NATS.RequestWithContext(rctx, protocol.Prio3HelperSubject, signed)
		cancel()
		if err == nil {
			return m.Data, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("no answer on %s after %d attempts of %s: %w (is `crowdlog aggregate-prio3 --role helper` running on this NATS, and may this credential publish there?)",
		protocol.Prio3HelperSubject, attempts, timeout, err)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// HelperService is the helper aggregator process: it answers the leader's
// AggregateReq and CollectReq on protocol.Prio3HelperSubject (through
// natsconn.Respond: replies only to a requester inbox). Before it changes
// any state it checks the request (check): the reply subject is a
// requester inbox, the request is a p3.SignedReq under LeaderKey, issued
// within MaxSkew of the helper's wall clock, with an id not seen before;
// anything else is refused, counted by reason (Refused,
// crowdlog_prio3_requests_refused_total) and not answered. NATS
// permissions say who may publish to the subject, but a push consumer's
// deliver subject or another account's republish reaches it unchecked;
// the signature is the check the helper makes itself. It snapshots its
// state (StateDir/HelperStateFile, replaced atomically) before every
// answer, so whatever the leader learns the helper committed survives the
// helper's crash. A request that cannot be handled (malformed, another
// campaign) is counted (ReasonMalformedRequest) and not answered. One
// process per campaign.
//
// Replays: ids are remembered in memory for MaxSkew past their issue
// time; after a restart a replay within that window reaches Apply, which
// answers a report or a collection it already committed with the same
// answer (idempotent), so it changes no count.
type HelperService struct {
	Config   Config
	NATS     *nats.Conn
	StateDir string
	// LeaderKey is the leader operator's Ed25519 public key (RFC 8032;
	// keydir.Prio3LeaderSignKey+".pub", --leader-pub). Required.
	LeaderKey ed25519.PublicKey
	// MaxSkew bounds the difference between a request's issue time and
	// the helper's wall clock (time.Now, not Now: a replay clock moves
	// days at once); 0: DefaultMaxSkew.
	MaxSkew time.Duration
	// Now is the helper's clock (nil: time.Now); read once per request.
	Now    func() time.Time
	Logger *slog.Logger

	counters
	// Requests counts requests handled (answered or counted as malformed).
	Requests atomic.Int64
	// Ready is closed once the subscription is active (tests wait on it);
	// nil is fine.
	Ready chan struct{}

	seen map[[16]byte]time.Time // accepted request ids → issue time
}

// Run serves until ctx ends (nil then) or the state cannot be read or
// written (an error).
func (s *HelperService) Run(ctx context.Context) error {
	if s.StateDir == "" {
		return errors.New("prio3 helper: no state directory (--state-dir)")
	}
	if s.NATS == nil {
		return errors.New("prio3 helper: no NATS connection")
	}
	if len(s.LeaderKey) != ed25519.PublicKeySize {
		return errors.New("prio3 helper: no leader public key (--leader-pub: the leader operator's " + keydir.Prio3LeaderSignKey + ".pub)")
	}
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("role", "prio3-helper", "campaign", s.Config.Campaign)
	if err := onion.PrepareKeys(s.Config.Keys); err != nil {
		return fmt.Errorf("prio3 helper: %w", err)
	}
	h, store, err := loadHelper(s.StateDir, s.Config)
	if err != nil {
		return err
	}
	s.set(&h.Stats)
	sub, err := s.NATS.SubscribeSync(protocol.Prio3HelperSubject)
	if err != nil {
		return fmt.Errorf("prio3 helper: subscribe %s: %w (may this credential subscribe there?)", protocol.Prio3HelperSubject, err)
	}
	defer sub.Unsubscribe()
	// requests reach 1 MiB each (Config.MaxRequestBytes at the leader)
	if err := sub.SetPendingLimits(1024, 512<<20); err != nil {
		return err
	}
	if err := s.NATS.FlushTimeout(10 * time.Second); err != nil {
		return fmt.Errorf("prio3 helper: NATS flush: %w", err)
	}
	if s.Ready != nil {
		close(s.Ready)
	}
	log.Info("prio3 helper: serving", "subject", protocol.Prio3HelperSubject)
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("prio3 helper: NATS subscription: %w", err)
		}
		if err := s.handle(h, store, m, log); err != nil {
			return err
		}
		s.Requests.Add(1)
		s.set(&h.Stats)
	}
}

// acceptUnauthenticated, set only by the attack tests' control arm, makes
// the helper handle bare, unsigned requests whatever their reply subject:
// the behaviour before check existed.
var acceptUnauthenticated atomic.Bool

// check decides, before any state changes, whether m is the leader's
// request: it returns the request's body, or the reason it is refused
// (Refused*).
func (s *HelperService) check(m *nats.Msg) ([]byte, string) {
	if acceptUnauthenticated.Load() {
		return m.Data, ""
	}
	if !natsconn.ReplyAllowed(m.Reply) {
		return nil, RefusedReplySubject
	}
	if !p3.IsSignedReq(m.Data) {
		return nil, RefusedUnsigned
	}
	q, err := p3.ParseSignedReq(m.Data)
	if err != nil {
		return nil, RefusedUnsigned
	}
	if q.Verify(s.LeaderKey) != nil {
		return nil, RefusedSignature
	}
	skew := s.MaxSkew
	if skew <= 0 {
		skew = DefaultMaxSkew
	}
	now := time.Now()
	if d := now.Sub(q.Issued); d > skew || d < -skew {
		return nil, RefusedStale
	}
	if s.seen == nil {
		s.seen = map[[16]byte]time.Time{}
	}
	if _, dup := s.seen[q.ID]; dup {
		return nil, RefusedReplay
	}
	for id, at := range s.seen {
		if now.Sub(at) > skew {
			delete(s.seen, id)
		}
	}
	s.seen[q.ID] = q.Issued
	return q.Body, ""
}

// handle checks one request (check), applies it, snapshots and answers;
// only a failed snapshot is an error.
func (s *HelperService) handle(h *Helper, store *batchStore, m *nats.Msg, log *slog.Logger) error {
	body, reason := s.check(m)
	if reason != "" {
		s.refuse(reason)
		if reason == RefusedReplySubject {
			natsconn.CountRefusedReply()
		}
		log.Warn("prio3 helper: refused a request before handling it", "reason", reason, "bytes", len(m.Data))
		return nil
	}
	var kind EventKind
	if len(body) >= 2 && body[0] == p3.WireVersion {
		switch body[1] {
		case 1: // AggregateReq
			kind = EventAggregateReq
		case 3: // CollectReq
			kind = EventCollectReq
		}
	}
	if kind == 0 {
		s.count(ReasonMalformedRequest)
		log.Warn("prio3 helper: dropped a request of unknown type", "bytes", len(body))
		return nil
	}
	now := nowFunc(s.Now)()
	if days := h.forget(now); len(days) > 0 {
		for _, d := range days {
			store.drop(d)
		}
		log.Info("prio3 helper: dropped the state of expired collected batches (--retain)", "batches", len(days))
	}
	outs, err := h.Apply(Event{Now: now, Kind: kind, Msg: body})
	if err != nil {
		s.count(ReasonMalformedRequest)
		log.Warn("prio3 helper: dropped a request", "err", err)
		return nil
	}
	if err := os.MkdirAll(s.StateDir, 0o700); err != nil {
		return fmt.Errorf("prio3: state directory: %w", err)
	}
	// the batch logs first, then the snapshot naming their lengths, then
	// the answer: what the leader learns is on disk
	if err := store.flush(h.batches); err != nil {
		return err
	}
	b, err := encodeHelperFile(h, store.refs)
	if err != nil {
		return err
	}
	if err := writeState(s.StateDir, HelperStateFile, b); err != nil {
		return err
	}
	s.written.Add(store.Written + int64(len(b)))
	store.Written = 0
	store.cleanup()
	if kind == EventCollectReq {
		if a, err := p3.ParseAggShare(outs[0].Msg); err == nil {
			if a.Reason != "" {
				log.Warn("prio3 helper: refused a batch's aggregate share", "day", a.Day.String(), "reason", a.Reason)
			} else {
				log.Info("prio3 helper: batch collected", "day", a.Day.String(), "reports", a.Count)
			}
		}
	}
	if err := natsconn.Respond(m, outs[0].Msg); err != nil {
		log.Warn("prio3 helper: answer not sent", "err", err)
	}
	return nil
}
