package aggregator

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/metrics"
	"github.com/crowdlog/crowdlog/infra/retry"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/pipelinespec"
	"github.com/crowdlog/crowdlog/protocol/token"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/protocol"
)

// Service runs Partition state machines over a Kafka consumer group on the
// reports topic. Restart safety: the offset committed for a partition is
// always after the outputs of every message before it were acknowledged by
// Kafka; on (re)assignment the partition is replayed from its first offset
// (with SnapshotDir: from its newest snapshot at or below the committed
// offset, snapshot.go) to rebuild state, emitting only for messages at or
// after the committed offset.
// Outputs re-emitted after a crash (between write and commit) are duplicates
// by report id, which the release stage drops. So a SIGKILL at any point
// loses nothing and counts nothing twice. State moves with a partition to
// whichever group member receives it.
//
// Each partition's goroutine fetches a batch (MaxBatch messages within
// MaxWait; a control message ends it), prepares it (Partition.Prepare:
// HPKE peel, report-token and ARC verification) on the process's pool of
// GOMAXPROCS goroutines shared by all partitions, then applies it in
// offset order. Verified tokens and presentations are remembered in a
// bounded cache shared by the partitions (a redelivered report, or a
// client's impressions carrying one presentation, are verified once).
// Neither changes a verdict: Prepare is deterministic and the cache only
// holds good verdicts keyed by every input of the verification.
type Service struct {
	Brokers  []string
	GroupID  string // default "crowdlog-aggregator"
	Keys     []*onion.KeyPair
	Logger   *slog.Logger
	MaxBatch int           // messages per write/commit cycle; default 2000
	MaxWait  time.Duration // flush a partial batch after this long; default 100 ms
	// SessionTimeout: a member silent this long leaves the group and its
	// partitions move (also the wait after a crash); default 20 s.
	SessionTimeout time.Duration
	// CoarseSummary sets Partition.CoarseSummary: report counts in the
	// epoch-close summary rounded down to powers of two.
	CoarseSummary bool
	// MaxOpenEpochs, MaxPendingReports and MaxPendingBytes set the
	// Partition bounds of the same names (≤ 0: the defaults, 8 open epochs
	// per app, 4,000,000 reports and 2 GiB per (app, epoch) and
	// partition). Every member of a group must use the same values:
	// partitions move between members and are rebuilt by replay.
	MaxOpenEpochs     int
	MaxPendingReports int64
	MaxPendingBytes   int64
	// ReportKeys and ARCKeys set the Partition fields of the same names:
	// with ReportKeys, reports need a valid report token bound
	// to them; with ARCKeys, FT_u reports need an ARC presentation. nil:
	// off. Every member of a group must set them alike.
	ReportKeys func(epoch string) (*token.PrivateKey, error)
	ARCKeys    func(epoch string) (*arc.PrivateKey, error)
	// VerifyOnArrival sets the Partition field of the same name: verify
	// every report's token and presentation when it arrives instead of
	// when its group reaches k candidate shares (the default). For
	// benchmarks; members of a group may differ (the releases are the
	// same on honest input), but replays give the same verdicts only
	// under one setting.
	VerifyOnArrival bool
	// Schedule, when set, opens and closes scheduled epochs on this
	// process's clock (Schedule; `crowdlog aggregate --pipeline` with an
	// epoch length). nil: epochs are opened and closed by the operator.
	Schedule *Schedule
	// Pipelines sets Partition.Pipelines: the pipeline digests served
	// (nil: any). A report sealed for another definition is dropped
	// ("pipeline-mismatch") and logged once per digest, naming both.
	Pipelines map[[32]byte]bool
	// NATS, when set, is a connection (as natsauth.Aggregator) on which
	// Run answers protocol.PipelineSubject with Announcement: the
	// definitions of Announce (pipelinespec.Spec of each served pipeline)
	// and this process's admitted and refused reports per (pipeline, app,
	// epoch), so that clients verify their configuration before sending
	// and see what became of their reports. nil: no announcement.
	NATS     *nats.Conn
	Announce []pipelinespec.Spec
	// SignKey is the aggregator operator's Ed25519 key (RFC 8032;
	// keydir.AggregatorSignKey) that signs the announced definitions
	// (pipelinespec.SignedPipelines, Announcement.Signed, once at start)
	// and each answer with its counts and the request's nonce
	// (pipelinespec.SignedAnswer, Announcement.SignedAnswer, one Ed25519
	// signature per request), which clients verify against the public
	// half they pin. nil: the announcement is
	// unsigned and clients that verify refuse it (logged).
	SignKey ed25519.PrivateKey
	// PipelineSealing sets Partition.PipelineSealing: the k and sealing
	// of each served definition (Options.Service fills it from
	// Served.Spec). Every member of a group must set it alike.
	PipelineSealing map[[32]byte]Sealing
	closeNATS       bool // NATS was opened by Options.Service: Run closes it
	// SpillDir is the directory of the partitions' spill files
	// (Partition.SpillDir: pending reports' ciphertexts and share y, one
	// unlinked file per partition and open epoch, sealed under a key held
	// only in memory); "": os.TempDir(). It needs room for the epoch's
	// pending reports, ≈ 350 B each.
	SpillDir string
	// SnapshotDir, when set, is where partition snapshots go
	// (snapshot.go): every SnapshotEvery applied messages, after a commit,
	// a partition's state is written there, sealed under a key derived from
	// Keys[0], with its pending reports' spill in segment files beside it
	// (SpillDir is then unused). A member that receives a partition
	// restores its newest snapshot at or below the committed offset and
	// replays only the messages after it, so a move costs the restore
	// (≈ 1 s per million pending reports) plus at most SnapshotEvery
	// messages, not the epoch. Share it between the members (a network
	// volume) for moves between hosts; a member that finds no snapshot it
	// can read replays from the first offset. "": off.
	SnapshotDir string
	// SnapshotEvery is the number of messages applied between two
	// snapshots of a partition; default 20,000. A partition holding more
	// than SnapshotPerPending·SnapshotEvery pending reports snapshots every
	// pending/SnapshotPerPending messages instead (snapshotDue).
	SnapshotEvery int
	// ControlKey sets Partition.ControlKey: the pipeline operator's
	// Ed25519 public key (RFC 8032; keydir.LoadSigningPublic of
	// control-sign.key.pub). Set, epoch open and close records must be
	// signed by it (protocol.SignedControl, version 3) for a pipeline in
	// Pipelines (nil: any), the reports topic and the partition they are
	// in, and carry a Kafka timestamp within their validity; others are
	// dropped and counted ("unsigned-control", "bad-control-signature",
	// "unbound-control", "replayed-control").
	// nil: every control record is applied, as anyone who may write to
	// the reports topic wrote it (Run logs a warning). Every member of a
	// group must set it alike.
	ControlKey    ed25519.PublicKey
	legacyControl bool // Partition.legacyControl: the control-replay attack's control only

	Reports, Decrypted, Dropped atomic.Int64 // totals over all partitions
	mu                          sync.Mutex
	pending                     map[int]int      // pending tags per owned partition
	droppedBy                   map[string]int64 // Dropped by reason (DroppedByReason)
	kept                        map[int]keptState
	cache                       *verifyCache      // verified tokens and presentations, shared by the partitions
	snap                        *snapStore        // SnapshotDir
	snapBusy                    map[int]bool      // partitions whose snapshot is being written
	foreignPipes                map[[32]byte]bool // pipeline digests refused and logged
	annMu                       sync.Mutex
	admits                      map[pipelinespec.Context]*admitCounts // reports per context (NATS set)
	process                     string                                // Announcement.Process
	signedAnnounce              []byte                                // Announcement.Signed, signed by announce
	openEpochs                  map[int][]epochKey                    // open epochs per owned partition, after its last batch (Schedule)
	Snapshots, Restores         atomic.Int64                          // snapshots written, partitions restored from one
	// TokensSpent counts the report tokens this process accepted (verified
	// and recorded as spent; with ReportKeys), over all partitions it
	// applied, a partition replayed after a move counted again: a
	// deployment with token checks on shows it grow with the reports.
	TokensSpent atomic.Int64

	// metrics measured here, never in Partition (a deterministic state
	// machine): Histograms, ConsumerLag
	mxOnce       sync.Once
	applySeconds prometheus.Histogram
	waitSeconds  prometheus.Histogram
	lag          map[int]int64 // per owned partition, under mu
}

// Histograms returns the service's latency histograms, for a registry
// (pipelines/runner.RegisterAggregator):
// crowdlog_aggregator_apply_seconds, a fetched batch's prepare and apply
// (HPKE, token and presentation checks, the state steps; not the fetch,
// the write of its outputs or the commit), and
// crowdlog_aggregator_decrypt_wait_seconds, a report's wait from its Kafka
// record timestamp (its arrival on topic reports) to its decryption, when
// its group reached k shares or, for a report of a group already open, at
// once. The wait is sampled: reports of 1 in WaitSample tags (by the tag's
// first byte; tags are hashes), so that the record timestamps the service
// holds for pending reports stay a small fraction of the partition's
// pending state. Reports replayed to rebuild a partition, or pending when
// it moved to this member, are not observed.
func (s *Service) Histograms() []prometheus.Collector {
	s.initMetrics()
	return []prometheus.Collector{s.applySeconds, s.waitSeconds}
}

// WaitSample: 1 in WaitSample tags' reports are observed by
// crowdlog_aggregator_decrypt_wait_seconds.
const WaitSample = 16

func (s *Service) initMetrics() {
	s.mxOnce.Do(func() {
		s.applySeconds = metrics.NewHistogram("crowdlog_aggregator_apply_seconds",
			"Prepare and apply time of one fetched batch of the reports topic (not the fetch, write or commit).", nil, metrics.RequestBuckets)
		s.waitSeconds = metrics.NewHistogram("crowdlog_aggregator_decrypt_wait_seconds",
			"A report's wait from its Kafka record timestamp to its decryption (its group reached k), sampled: 1 in 16 tags.", nil, metrics.WaitBuckets)
	})
}

// ConsumerLag returns, per partition of the reports topic this process
// owns, the messages behind the partition's end as of its last fetch:
// high watermark − next offset (0 when caught up). A partition appears at
// its first fetched message and leaves when another member takes it.
func (s *Service) ConsumerLag() map[int]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]int64, len(s.lag))
	for p, n := range s.lag {
		out[p] = n
	}
	return out
}

func (s *Service) setLag(id int, m *kafka.Message) {
	n := max(m.HighWaterMark-(m.Offset+1), 0)
	s.mu.Lock()
	if s.lag == nil {
		s.lag = map[int]int64{}
	}
	s.lag[id] = n
	s.mu.Unlock()
}

// decryptWaits holds the record timestamps of a partition's sampled
// pending reports, by (app, epoch) and report id, until they are
// decrypted or their epoch closes (crowdlog_aggregator_decrypt_wait_seconds).
type decryptWaits map[[2]string]map[[16]byte]time.Time

func sampledTag(tag [32]byte) bool { return tag[0] < 256/WaitSample }

// observe is called after message m was applied (not replayed): pm its
// prepared form, accepted whether the state accepted its report, emits
// what applying it emitted.
func (w decryptWaits) observe(h prometheus.Histogram, m *kafka.Message, pm *Prepared, accepted bool, emits []protocol.Decrypted) {
	if r := pm.report; r != nil && accepted && sampledTag(r.Tag) && !m.Time.IsZero() {
		k := [2]string{r.App, r.Epoch}
		if w[k] == nil {
			w[k] = map[[16]byte]time.Time{}
		}
		if _, ok := w[k][r.ID]; !ok { // a duplicate id keeps the first arrival
			w[k][r.ID] = m.Time
		}
	}
	if len(emits) == 0 {
		return
	}
	now := time.Now()
	for i := range emits {
		e := &emits[i]
		k := [2]string{e.App, e.Epoch}
		switch e.Kind {
		case protocol.KindClosed:
			delete(w, k) // what never decrypted
		case protocol.KindItem:
			var tag [32]byte
			var id [16]byte
			if hex.DecodedLen(len(e.Tag)) != len(tag) || hex.DecodedLen(len(e.Report)) != len(id) {
				continue
			}
			if _, err := hex.Decode(tag[:], []byte(e.Tag)); err != nil || !sampledTag(tag) {
				continue
			}
			if _, err := hex.Decode(id[:], []byte(e.Report)); err != nil {
				continue
			}
			if at, ok := w[k][id]; ok {
				h.Observe(max(now.Sub(at), 0).Seconds())
				delete(w[k], id)
			}
		}
	}
}

// keptState is a partition's state exactly as of offset next (every message
// before next applied, none after), kept across a rebalance that hands the
// partition back to this process so it need not be replayed.
type keptState struct {
	st   *Partition
	next int64
}

func (s *Service) keep(id int, st *Partition, next int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == nil {
		delete(s.kept, id)
		return
	}
	s.kept[id] = keptState{st, next}
}

func (s *Service) take(id int, committed int64) *Partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.kept[id]
	if ok && k.next == committed {
		// it stays kept: until a batch is applied it is still the state as
		// of committed, also for a generation that ends before one is
		// (else a partition with nothing new would be replayed after
		// every rebalance)
		return k.st
	}
	delete(s.kept, id)
	if ok {
		k.st.Close() // another member moved the partition on: this state is stale
	}
	return nil
}

// release closes the states kept for partitions that are not in
// partitions, this member's new assignment: another member owns them now,
// so they would only be replayed from scratch if they came back (take
// refuses a state behind the committed offset), and until then they hold
// their pending state's memory and spill files.
func (s *Service) release(partitions []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	own := map[int]bool{}
	for _, id := range partitions {
		own[id] = true
	}
	for id, k := range s.kept {
		if !own[id] {
			k.st.Close()
			delete(s.kept, id)
			delete(s.pending, id)
		}
	}
	for id := range s.lag {
		if !own[id] {
			delete(s.lag, id) // another member reports it now
		}
	}
}

func (s *Service) isKept(id int, st *Partition) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kept[id].st == st
}

// spillError is a partition's spill failure (Partition.Err), with the
// offset committed before it: the partition is rebuilt by replay.
type spillError struct {
	err       error
	committed int64
}

func (e *spillError) Error() string { return e.err.Error() }
func (e *spillError) Unwrap() error { return e.err }

// spillRetry is the wait before a partition whose spill failed is rebuilt.
const spillRetry = 5 * time.Second

// PendingTags returns the number of undecrypted tags in partitions this
// process owns.
func (s *Service) PendingTags() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.pending {
		n += v
	}
	return n
}

// Run joins the consumer group and serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if s.GroupID == "" {
		s.GroupID = "crowdlog-aggregator"
	}
	if s.MaxBatch <= 0 {
		s.MaxBatch = 2000
	}
	if s.MaxWait <= 0 {
		s.MaxWait = 100 * time.Millisecond
	}
	if s.SessionTimeout <= 0 {
		s.SessionTimeout = 20 * time.Second
	}
	s.initMetrics()
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	// before the partition goroutines share them (onion.KeyPair.Prepare)
	if err := onion.PrepareKeys(s.Keys); err != nil {
		return fmt.Errorf("aggregator: %w", err)
	}
	s.pending = map[int]int{}
	s.kept = map[int]keptState{}
	s.cache = newVerifyCache(defaultVerifyCacheEntries)
	s.snapBusy = map[int]bool{}
	if s.SnapshotEvery <= 0 {
		s.SnapshotEvery = 20_000
	}
	if s.SnapshotDir != "" && len(s.Keys) > 0 {
		var err error
		if s.snap, err = newSnapStore(s.SnapshotDir, s.Keys[0]); err != nil {
			return err
		}
	}
	count, err := partitionCount(ctx, s.Brokers[0], protocol.ReportsTopic)
	if err != nil {
		return err
	}
	if s.NATS != nil {
		s.process = processID()
		if err := s.announce(ctx, log); err != nil {
			return err
		}
	}
	if s.ControlKey == nil {
		log.Warn("aggregator: epoch control records are not authenticated (no control verifying key, --control-pub): anyone who may write to the reports topic can open and close epochs")
	} else if s.Pipelines == nil {
		log.Warn("aggregator: epoch control records of every pipeline digest are accepted (no --pipeline): a record the operator signed for another pipeline under the same control key opens and closes this one's epochs")
	}
	// BatchSize: kafka-go allocates each produce batch's message slice at
	// full capacity (≈ 160 B a message), so 10,000 cost 1.6 MB per batch;
	// a larger write is split into several produce requests of one call.
	w := &kafka.Writer{Addr: kafka.TCP(s.Brokers...), Topic: protocol.DecryptedTopic, Transport: infrakafka.Transport(ctx),
		Balancer: kafka.BalancerFunc(samePartition), RequiredAcks: kafka.RequireAll,
		BatchTimeout: 2 * time.Millisecond, BatchSize: 1024, BatchBytes: 64 << 20}
	defer infrakafka.CloseWriter(w)
	if s.Schedule != nil {
		if s.Schedule.Length <= 0 || s.Schedule.Length%time.Second != 0 || s.Schedule.CloseDelay < 0 {
			return fmt.Errorf("aggregator: schedule: epoch length %s (want a positive whole number of seconds) or close delay %s (want ≥ 0)", s.Schedule.Length, s.Schedule.CloseDelay)
		}
		go s.runSchedule(ctx, log)
	}
	return infrakafka.ServeGroupAssigned(ctx, s.Brokers, s.GroupID, protocol.ReportsTopic, s.SessionTimeout, log, "aggregator",
		s.release,
		func(ctx context.Context, gen *kafka.Generation, id int, committed int64) error {
			for restore := true; ; restore = false { // after a spill failure, replay: the snapshot's segments may be what failed
				err := s.runPartition(ctx, gen, w, id, count, committed, restore, log)
				var se *spillError
				if !errors.As(err, &se) {
					return err
				}
				log.Error("aggregator: the pending-state spill failed; rebuilding the partition by replay (check the disk of --spill-dir)",
					"partition", id, "retry_in", spillRetry, "err", se.err)
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(spillRetry):
				}
				committed = se.committed
			}
		})
}

func samePartition(m kafka.Message, partitions ...int) int {
	for _, h := range m.Headers {
		if h.Key == protocol.PartitionHeader {
			p, _ := strconv.Atoi(string(h.Value))
			return partitions[p%len(partitions)]
		}
	}
	return partitions[0]
}

func (s *Service) runPartition(ctx context.Context, gen *kafka.Generation, w *kafka.Writer, id, count int, committed int64, restore bool, log *slog.Logger) error {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: s.Brokers, Topic: protocol.ReportsTopic, Partition: id,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: s.MaxWait, Dialer: infrakafka.Dialer(ctx)})
	defer r.Close()
	if committed < 0 {
		committed = 0
	}
	st, from := s.startState(id, count, committed, restore, log)
	defer func() {
		if !s.isKept(id, st) {
			st.Close() // nobody holds it: free its spill files now, not at the next collection
		}
	}()
	if err := r.SetOffset(from); err != nil {
		return err
	}
	b := &partitionBatch{s: s, st: st, id: id, log: log, pheader: []byte(strconv.Itoa(id)), waits: decryptWaits{},
		prev: st.Stats.totals()} // counted so far (a kept state was counted before); replayed messages are added here uncounted
	replaying := committed > 0 && from != committed
	if replaying {
		log.Info("aggregator: rebuilding partition state by replay", "partition", id, "from", from, "until", committed)
	}
	applied := 0 // messages applied since the last snapshot
	for {
		if err := b.fetch(ctx, r); err != nil {
			return err
		}
		if len(b.fetched) > 0 {
			s.setLag(id, &b.fetched[len(b.fetched)-1])
		}
		start := time.Now()
		if len(b.fetched) > 0 {
			// st moves past the last commit. Not before: a generation
			// that ends while the batch is fetched leaves st exactly at
			// committed, so it stays kept.
			s.keep(id, nil, 0)
		}
		applied += len(b.fetched)
		b.apply(committed)
		if len(b.fetched) > 0 {
			s.applySeconds.Observe(time.Since(start).Seconds())
		}
		if err := st.Err(); err != nil {
			s.keep(id, nil, 0)
			return &spillError{err: err, committed: committed}
		}
		if replaying && b.last+1 >= committed {
			replaying = false
			log.Info("aggregator: partition state rebuilt", "partition", id, "pending_tags", st.PendingTags())
		}
		if b.last < committed {
			if b.last >= 0 && b.last+1 == committed {
				// the replay ended exactly at the commit (nothing new
				// came yet): st is the state as of committed, so it is
				// kept for the next generation like a committed one
				s.keep(id, st, committed)
				s.account(id, st, &b.prev)
			}
			continue
		}
		if len(b.out) > 0 {
			if err := writeRetry(ctx, w, b.out); err != nil {
				return err
			}
		}
		if err := infrakafka.CommitOffset(gen, protocol.ReportsTopic, id, b.last+1); err != nil {
			return fmt.Errorf("commit partition %d: %w", id, err)
		}
		committed = b.last + 1
		s.keep(id, st, committed)
		s.account(id, st, &b.prev)
		// after an epoch close, a snapshot that replaces every older one
		// (they hold the closed epoch's pending state; its spill segments
		// were deleted at the close)
		if s.snap != nil && (snapshotDue(applied, s.SnapshotEvery, st.pendingReports()) || b.closedEpoch) && s.snapshot(ctx, id, count, st, committed, b.closedEpoch, log) {
			applied = 0
		}
	}
}

// startState returns partition id's state as of committed and the offset
// to read from: the state this process kept from its own last commit (no
// replay), else with restore the newest usable snapshot (the messages
// after it replayed), else an empty state replayed from the first offset.
func (s *Service) startState(id, count int, committed int64, restore bool, log *slog.Logger) (*Partition, int64) {
	if st := s.take(id, committed); st != nil {
		return st, committed
	}
	if s.snap == nil || !restore || committed <= 0 {
		return s.newPartition(id, count), int64(kafka.FirstOffset)
	}
	start := time.Now()
	st, at := s.snap.restore(id, count, committed, func() *Partition { return s.newPartition(id, count) },
		func(offset int64, err error) {
			log.Warn("aggregator: snapshot skipped; trying an older one, else replaying", "partition", id, "offset", offset, "err", err)
		})
	if st != nil {
		s.Restores.Add(1)
		log.Info("aggregator: partition state restored from snapshot", "partition", id, "offset", at, "until", committed,
			"pending_tags", st.PendingTags(), "took", time.Since(start).Round(time.Millisecond))
		if at == committed {
			log.Info("aggregator: partition state rebuilt", "partition", id, "pending_tags", st.PendingTags())
		}
	}
	// what a member that died left unlisted (its last segment, a
	// half-written snapshot) goes now, not at the next snapshot,
	// which a quiet partition may not write before its epoch closes
	s.snap.collect(id, false)
	if st == nil {
		return s.newPartition(id, count), int64(kafka.FirstOffset)
	}
	return st, at
}

// partitionBatch is one partition's batch of runPartition: the messages
// fetched, what applying them emits, and the counters carried from batch
// to batch.
type partitionBatch struct {
	s       *Service
	st      *Partition
	id      int
	log     *slog.Logger
	pheader []byte // the partition header of the emitted messages
	waits   decryptWaits
	prev    totals // what was counted (account) so far

	fetched     []kafka.Message
	msgs        []Message
	out         []kafka.Message // the emitted messages of the batch
	last        int64           // the batch's last offset; -1 when empty
	closedEpoch bool            // the batch closed an epoch
}

// fetch reads the next batch from r: up to MaxBatch messages within
// MaxWait; a control message ends it, so an epoch close is flushed
// promptly. It errors when ctx ends or a fetch fails.
func (b *partitionBatch) fetch(ctx context.Context, r *kafka.Reader) error {
	b.fetched, b.msgs = b.fetched[:0], b.msgs[:0]
	fctx, cancel := context.WithTimeout(ctx, b.s.MaxWait) // the batch's deadline, one context per batch
	defer cancel()
	for len(b.fetched) < b.s.MaxBatch {
		m, err := r.FetchMessage(fctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return nil
			}
			return fmt.Errorf("fetch partition %d: %w", b.id, err)
		}
		msg := Message{Value: m.Value, Time: m.Time}
		for _, h := range m.Headers {
			if h.Key == protocol.ControlHeader {
				msg.Control = true
			}
		}
		b.fetched, b.msgs = append(b.fetched, m), append(b.msgs, msg)
		if msg.Control {
			return nil
		}
	}
	return nil
}

// apply prepares the fetched batch on the process's pool (Prepare: HPKE,
// token and presentation verification), then applies it in offset order:
// messages before committed are replayed (already emitted and counted),
// the others collect their emitted messages in out and log what they
// dropped.
func (b *partitionBatch) apply(committed int64) {
	st := b.st
	b.out, b.last, b.closedEpoch = nil, -1, false
	prepared := st.PrepareBatch(b.msgs)
	for i := range b.fetched {
		m, pm := &b.fetched[i], &prepared[i]
		b.last = m.Offset
		if m.Offset < committed {
			// replay: already emitted (and counted) before the last commit
			before := st.Stats.totals()
			st.ApplyPrepared(pm)
			b.prev.add(st.Stats.totals().minus(before))
			continue
		}
		was := countDrops(st.Stats.Dropped)
		accepted := st.Stats.Reports
		emits := st.ApplyPrepared(pm)
		b.waits.observe(b.s.waitSeconds, m, pm, st.Stats.Reports > accepted, emits)
		logDrops(b.log, b.id, m.Offset, was, st)
		for i := range emits {
			v, _ := json.Marshal(&emits[i])
			b.out = append(b.out, kafka.Message{Value: v, Headers: []kafka.Header{{Key: protocol.PartitionHeader, Value: b.pheader}}})
		}
		if emits != nil && emits[len(emits)-1].Kind == protocol.KindClosed {
			b.closedEpoch = true
			c := emits[len(emits)-1]
			b.log.Info("aggregator: epoch closed", "partition", b.id, "app", c.App, "epoch", c.Epoch, "offset", m.Offset,
				"reports", st.Stats.Reports, "decrypted", st.Stats.Decrypted, "dropped", st.Stats.Dropped)
		}
	}
}

// dropCounts are the drop counters whose growth runPartition logs.
type dropCounts struct {
	late, unknown, full, refused, reopen, badControl, tokenKey, arcKey int64
}

// countDrops reads the logged drop counters of a partition's
// Stats.Dropped.
func countDrops(d map[string]int64) dropCounts {
	return dropCounts{late: d["late"], unknown: d["unknown-epoch"], full: d["epoch-full"],
		refused: d["open-refused"], reopen: d["open-after-close"],
		badControl: d[DropUnsignedControl] + d[DropBadControlSignature] + d[DropUnboundControl] + d[DropReplayedControl],
		tokenKey:   d["token-key"], arcKey: d["arc-key"]}
}

// logDrops logs what the message at offset dropped, from the counters
// was before it and st's after: a late report and a refused open each
// time; what clients or writers to the topic choose at 1, 2, 4, … per
// partition, never per report.
func logDrops(log *slog.Logger, id int, offset int64, was dropCounts, st *Partition) {
	now := countDrops(st.Stats.Dropped)
	pow2 := func(n, before int64) bool { return n > before && n&(n-1) == 0 }
	if now.late > was.late {
		// a report of a closed epoch: the relays were reported
		// drained before it reached Kafka, so it is not counted
		log.Warn("aggregator: report after its epoch's close dropped (late)", "partition", id, "offset", offset)
	}
	if pow2(now.unknown, was.unknown) {
		log.Warn("aggregator: reports of epochs that are not open dropped (unknown-epoch); open an epoch with 'crowdlog aggregate open-epoch' before clients send",
			"partition", id, "offset", offset, "unknown_epoch_total", now.unknown)
	}
	if pow2(now.full, was.full) {
		log.Warn("aggregator: an epoch's pending reports reached --max-pending-reports or --max-pending-bytes; reports of groups below threshold dropped (epoch-full)",
			"partition", id, "offset", offset, "epoch_full_total", now.full)
	}
	if now.refused > was.refused {
		log.Error("aggregator: epoch open refused: its app already has --max-open-epochs open epochs; close one ('crowdlog aggregate close-epoch') and open it again",
			"partition", id, "offset", offset, "max_open_epochs", st.maxOpenEpochs())
	}
	if pow2(now.tokenKey, was.tokenKey) {
		log.Error("aggregator: reports dropped because their epoch has no report-token key (token-key); the issuer and the aggregator must share the keys directory, and the key must exist before reports arrive",
			"partition", id, "offset", offset, "token_key_total", now.tokenKey)
	}
	if pow2(now.arcKey, was.arcKey) {
		log.Error("aggregator: FT_u reports dropped because their epoch has no ARC key (arc-key); the issuer and the aggregator must share the keys directory",
			"partition", id, "offset", offset, "arc_key_total", now.arcKey)
	}
	if pow2(now.badControl, was.badControl) {
		d := st.Stats.Dropped
		log.Error("aggregator: epoch control records refused: unsigned, not signed by the control key (--control-pub), or replayed",
			"partition", id, "offset", offset, "unsigned_control", d[DropUnsignedControl],
			"bad_control_signature", d[DropBadControlSignature], "unbound_control", d[DropUnboundControl],
			"replayed_control", d[DropReplayedControl])
	}
	if now.reopen > was.reopen {
		log.Error("aggregator: epoch open refused: the epoch was closed before; use a new epoch name", "partition", id, "offset", offset)
	}
}

// SnapshotPerPending sets how a snapshot's interval grows with its size: a
// partition holding P pending reports writes a snapshot once it applied
// max(SnapshotEvery, P/SnapshotPerPending) messages since the last one.
// A snapshot costs 0.2–0.43 µs of CPU per pending report (encode, seal,
// write; BenchmarkBoundPartitionMove, snapshot-cpu-s) and applying a
// message ≈ 50 µs, so at 25 a snapshot's CPU stays at 10–20% of the
// messages' between two, whatever the state's size; a move then replays a
// tail of P/25 messages (40,000 at a million pending reports: 1.2–1.3 s of
// a 1.5–1.7 s move on 2 cores). A fixed interval of 20,000 at a million
// pending reports spent 38–55% of the messages' CPU on snapshots.
const SnapshotPerPending = 25

// snapshotDue reports whether a partition holding pending reports, which
// applied applied messages since its last snapshot, writes the next one.
func snapshotDue(applied, every int, pending int64) bool {
	return int64(applied) >= max(int64(every), pending/SnapshotPerPending)
}

// snapshot encodes st, the state of partition id as of offset (its
// commit), and writes it in the background; false when the previous
// snapshot of the partition is still being written (the next commit
// tries again) or the state does not encode (its spill failed: the loop
// sees st.Err).
//
// only (after an epoch close) waits up to 30 s for the previous snapshot
// instead, and the new one replaces every older one.
func (s *Service) snapshot(ctx context.Context, id, count int, st *Partition, offset int64, only bool, log *slog.Logger) bool {
	for wait := time.Now().Add(30 * time.Second); ; {
		s.mu.Lock()
		busy := s.snapBusy[id]
		if !busy {
			s.snapBusy[id] = true
		}
		s.mu.Unlock()
		if !busy {
			break
		}
		if !only || time.Now().After(wait) || ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	idle := func() {
		s.mu.Lock()
		delete(s.snapBusy, id)
		s.mu.Unlock()
	}
	start := time.Now()
	state, segs, err := st.encodeState()
	if err != nil {
		idle()
		return false
	}
	encoded := time.Since(start)
	go func() {
		defer idle()
		if err := s.snap.write(id, count, offset, state, segs, only); err != nil {
			log.Warn("aggregator: snapshot not written; a move of this partition replays from the previous one", "partition", id, "offset", offset, "err", err)
			return
		}
		s.Snapshots.Add(1)
		log.Debug("aggregator: snapshot written", "partition", id, "offset", offset, "bytes", len(state),
			"encode", encoded.Round(time.Millisecond), "took", time.Since(start).Round(time.Millisecond))
	}()
	return true
}

func (s *Service) account(id int, st *Partition, prev *totals) {
	now := st.Stats.totals()
	d := now.minus(*prev)
	s.Reports.Add(d.reports)
	s.Decrypted.Add(d.decrypted)
	s.Dropped.Add(d.dropped)
	*prev = now
	s.mu.Lock()
	s.pending[id] = st.PendingTags()
	if s.Schedule != nil {
		if s.openEpochs == nil {
			s.openEpochs = map[int][]epochKey{}
		}
		s.openEpochs[id] = st.openEpochKeys()
	}
	if s.droppedBy == nil {
		s.droppedBy = map[string]int64{}
	}
	for r, n := range d.byReason {
		s.droppedBy[r] += n
	}
	s.mu.Unlock()
}

// DropReasons are the keys Stats.Dropped can hold (Stats documents each):
// the label values of the service's drop counter.
var DropReasons = []string{"malformed", "unknown-key", "duplicate", "late", "unknown-epoch", "epoch-full",
	"bad-share", "bad-commitment", "bad-ciphertext", "no-token", "bad-token", "spent-token", "token-key",
	"bad-presentation", "arc-key", "unit-mismatch", "pipeline-mismatch", "malformed-control", "open-refused", "open-after-close",
	DropUnsignedControl, DropBadControlSignature, DropUnboundControl, DropReplayedControl}

// DroppedByReason returns the reports and messages dropped by this
// process's partitions so far, by reason (the Stats.Dropped keys:
// malformed, duplicate, late, bad-share, unit-mismatch, …), summed over
// partitions; messages replayed to rebuild a partition are not counted
// again, as for Dropped. A new map per call.
func (s *Service) DroppedByReason() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.droppedBy))
	for r, n := range s.droppedBy {
		out[r] = n
	}
	return out
}

// totals are the Stats counters the service exports.
type totals struct {
	reports, decrypted, dropped int64
	byReason                    map[string]int64
}

func (st *Stats) totals() totals {
	t := totals{reports: st.Reports, decrypted: st.Decrypted, byReason: make(map[string]int64, len(st.Dropped))}
	for r, v := range st.Dropped {
		t.dropped += v
		t.byReason[r] = v
	}
	return t
}

func (t totals) minus(u totals) totals {
	d := totals{t.reports - u.reports, t.decrypted - u.decrypted, t.dropped - u.dropped, map[string]int64{}}
	for r, v := range t.byReason {
		if n := v - u.byReason[r]; n != 0 {
			d.byReason[r] = n
		}
	}
	return d
}

func (t *totals) add(u totals) {
	t.reports += u.reports
	t.decrypted += u.decrypted
	t.dropped += u.dropped
	if t.byReason == nil {
		t.byReason = map[string]int64{}
	}
	for r, v := range u.byReason {
		t.byReason[r] += v
	}
}

func writeRetry(ctx context.Context, w *kafka.Writer, msgs []kafka.Message) error {
	return retry.Forever(ctx, slog.Default(), "aggregator: write "+w.Topic, 100*time.Millisecond, 5*time.Second,
		func() error { return w.WriteMessages(ctx, msgs...) })
}

func partitionCount(ctx context.Context, broker, topic string) (int, error) {
	conn, err := infrakafka.Dialer(ctx).DialContext(ctx, "tcp", broker)
	if err != nil {
		return 0, fmt.Errorf("aggregator: dial kafka %s: %w", broker, err)
	}
	defer conn.Close()
	ps, err := conn.ReadPartitions(topic)
	if err != nil {
		return 0, fmt.Errorf("aggregator: topic %s (create it with `crowdlog run` or your Kafka tooling): %w", topic, err)
	}
	return len(ps), nil
}

// newPartition is the state the service runs for partition id of count:
// RequireOpen and the service's bounds.
func (s *Service) newPartition(id, count int) *Partition {
	st := NewPartition(id, count, s.Keys)
	st.CoarseSummary = s.CoarseSummary
	st.RequireOpen = true
	st.MaxOpenEpochs, st.MaxPendingReports, st.MaxPendingBytes = s.MaxOpenEpochs, s.MaxPendingReports, s.MaxPendingBytes
	st.ReportKeys, st.ARCKeys, st.VerifyOnArrival = s.ReportKeys, s.ARCKeys, s.VerifyOnArrival
	st.ControlKey, st.legacyControl = s.ControlKey, s.legacyControl
	if s.Pipelines != nil {
		st.Pipelines = s.Pipelines
		st.OnPipelineMismatch = s.pipelineMismatch
	}
	st.PipelineSealing = s.PipelineSealing
	if s.NATS != nil {
		st.OnAdmit = s.countAdmit
	}
	st.SpillDir = s.SpillDir
	if st.SpillDir == "" {
		st.SpillDir = os.TempDir()
	}
	st.cache = s.cache
	st.snap = s.snap
	st.tokensSpent = &s.TokensSpent
	return st
}

// ControlSigner signs epoch control records: Key is the pipeline
// operator's Ed25519 private key (RFC 8032, keys/control-sign.key) and
// Pipeline the pipeline digest (pipeline.Definition.Digest) of the
// definition whose epochs they open and close, bound into every record
// (protocol.SignedControl, version 3).
type ControlSigner struct {
	Key      ed25519.PrivateKey
	Pipeline [32]byte
}

// OpenEpoch writes an epoch open to every partition of the reports topic:
// signed by signer (protocol.SignedControl, one record per partition,
// bound to signer.Pipeline, the topic and the partition, valid for
// protocol.ControlValidity from now), or, with signer nil, an unsigned
// protocol.EpochOpen, which aggregators with a control verifying key
// refuse. Run it before clients send reports of (app, epoch): the
// aggregator drops reports of epochs that are not open ("unknown-epoch").
// A partition's owner refuses the open, and logs it, when app already has
// its --max-open-epochs open epochs or the epoch was closed before.
// Errors: the topic cannot be listed (create it with `crowdlog run` or
// your Kafka tooling), app or epoch empty or longer than 255 bytes, a bad
// key; a write is retried until ctx ends.
func OpenEpoch(ctx context.Context, brokers []string, signer *ControlSigner, app, epoch string) error {
	return writeControl(ctx, brokers, signer, protocol.ControlOpenEpoch, app, epoch)
}

// CloseEpoch writes an epoch close to every partition of the reports topic
// (epoch close, docs/architecture.md), signed by signer as OpenEpoch's
// (nil: an unsigned protocol.EpochClose). Each partition's owner
// summarizes and deletes the epoch's pending shares when it reaches the
// marker, after every report before it. Errors as OpenEpoch's.
func CloseEpoch(ctx context.Context, brokers []string, signer *ControlSigner, app, epoch string) error {
	return writeControl(ctx, brokers, signer, protocol.ControlCloseEpoch, app, epoch)
}

func writeControl(ctx context.Context, brokers []string, signer *ControlSigner, op, app, epoch string) error {
	if app == "" || epoch == "" || len(app) > 255 || len(epoch) > 255 {
		return fmt.Errorf("aggregator: %s: app %q and epoch %q must be 1 to 255 bytes", op, app, epoch)
	}
	count, err := partitionCount(ctx, brokers[0], protocol.ReportsTopic)
	if err != nil {
		return err
	}
	msgs := make([]kafka.Message, count)
	now := time.Now()
	for p := range msgs {
		var b []byte
		switch {
		case signer != nil:
			to := protocol.ControlTarget{Pipeline: signer.Pipeline, Topic: protocol.ReportsTopic, Partition: p, Partitions: count}
			if b, err = protocol.SignControl(signer.Key, op, app, epoch, to, now, protocol.ControlValidity); err != nil {
				return fmt.Errorf("aggregator: %s: %w", op, err)
			}
		case op == protocol.ControlOpenEpoch:
			b, _ = json.Marshal(protocol.EpochOpen{Op: op, App: app, Epoch: epoch, Partitions: count})
		default:
			b, _ = json.Marshal(protocol.EpochClose{Op: op, App: app, Epoch: epoch, Partitions: count})
		}
		msgs[p] = kafka.Message{Value: b, Time: now, Headers: []kafka.Header{
			{Key: protocol.ControlHeader, Value: []byte(op)},
			{Key: protocol.PartitionHeader, Value: []byte(strconv.Itoa(p))}}}
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: protocol.ReportsTopic, Transport: infrakafka.Transport(ctx),
		Balancer: kafka.BalancerFunc(samePartition), RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond}
	defer infrakafka.CloseWriter(w)
	return writeRetry(ctx, w, msgs)
}

// pipelineMismatch logs, once per digest and process, a report sealed for
// a pipeline definition this service does not serve.
func (s *Service) pipelineMismatch(got [32]byte) {
	s.mu.Lock()
	if s.foreignPipes == nil {
		s.foreignPipes = map[[32]byte]bool{}
	}
	seen := s.foreignPipes[got]
	s.foreignPipes[got] = true
	s.mu.Unlock()
	if seen {
		return
	}
	want := make([]string, 0, len(s.Pipelines))
	for d := range s.Pipelines {
		want = append(want, DigestString(d))
	}
	sort.Strings(want)
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Error("aggregator: reports sealed for another pipeline definition are refused (counted as dropped pipeline-mismatch); give every role the same pipeline file",
		"report_pipeline", DigestString(got), "this_aggregator", want)
}

// DigestString is a pipeline digest as logs and errors name it: 64 hex
// digits, or "none" for the zero digest (sealed without a pipeline).
func DigestString(d [32]byte) string {
	if d == ([32]byte{}) {
		return "none"
	}
	return hex.EncodeToString(d[:])
}
