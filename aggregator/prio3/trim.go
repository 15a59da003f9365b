package prio3

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/protocol"
)

// Deleting applied uploads (LeaderService.DeleteApplied): every DeleteEvery
// the leader deletes, with Kafka's DeleteRecords (KIP-107: the partition's
// log start offset moves up, the records below it are gone), the records of
// protocol.Prio3UploadsTopic below
//
//	min(Applied[p], the lowest offset ≥ the log start of a record of another campaign or without a key)
//
// on each partition p it reads. Applied is the offset below which no upload
// is needed again even after a crash (LeaderService.Applied). DeleteRecords
// only cuts a prefix of a partition, so a record of another campaign (or an
// unkeyed one, which another campaign's leader opens too) stops the
// deletion there: another leader's uploads are never deleted, and a
// partition shared with a campaign that keeps its records is trimmed only
// up to that campaign's oldest record.
//
// The foreign records are known without a snapshot field: the step loop
// notes every record it handles (foreignWatch.note) from the offset the
// partition's reader started at, and the records between the partition's
// log start and that offset (read before a restart) are scanned once
// (scanForeign), stopping at the first foreign one. When the log start
// moves past the lowest foreign record known (its own leader or retention
// deleted it), the scan runs again from the new log start. A failed
// request (ListOffsets, the scan, DeleteRecords) deletes nothing, is
// logged (WARN) and counted (crowdlog_prio3_uploads_delete_failures_total);
// the next round tries again. Reading and preparing never wait on it.

// Defaults of the deletion's tunables.
const (
	DefaultDeleteEvery   = 30 * time.Second
	DefaultDeleteTimeout = 30 * time.Second
)

// foreignWatch tracks, per partition, the lowest offset of a record of
// another campaign (or unkeyed) at or above floor: the step loop notes
// every record it handles, the deleter sets floor (the log start it
// scanned from).
type foreignWatch struct {
	mu sync.Mutex
	// floor: foreign records below it are not tracked (deleted, or below
	// the log start); absent: not tracked yet
	floor map[int]int64
	// first: the lowest foreign offset ≥ floor known
	first map[int]int64
	// pos: every record at or above pos passes note after now
	pos map[int]int64
}

func newForeignWatch() *foreignWatch {
	return &foreignWatch{floor: map[int]int64{}, first: map[int]int64{}, pos: map[int]int64{}}
}

// start records that partition p's reader starts at from (negative: the
// log start).
func (w *foreignWatch) start(p int, from int64) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.pos[p]; !ok {
		w.pos[p] = max(from, 0)
	}
}

// note is the step loop's: the record at off on p passed, foreign or not.
func (w *foreignWatch) note(p int, off int64, foreign bool) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pos[p] = max(w.pos[p], off+1)
	if !foreign {
		return
	}
	if fl, ok := w.floor[p]; ok && off >= fl {
		if f, ok := w.first[p]; !ok || off < f {
			w.first[p] = off
		}
	}
}

// refloor starts tracking p from lo afresh and returns the offset up to
// which the caller must scan [lo, pos) itself (later records pass note);
// ok is false when p's reader has not started.
func (w *foreignWatch) refloor(p int, lo int64) (pos int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pos, ok = w.pos[p]
	if !ok {
		return 0, false
	}
	w.floor[p] = lo
	delete(w.first, p)
	return pos, true
}

// lower records a foreign record at off on p (found by a scan).
func (w *foreignWatch) lower(p int, off int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f, ok := w.first[p]; !ok || off < f {
		w.first[p] = off
	}
}

// untrack forgets p's tracking (a scan failed): the next round scans again.
func (w *foreignWatch) untrack(p int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.floor, p)
	delete(w.first, p)
}

// state returns whether p is tracked and its lowest foreign offset known.
func (w *foreignWatch) state(p int) (tracked bool, first int64, has bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, tracked = w.floor[p]
	first, has = w.first[p]
	return tracked, first, has
}

// deleter is the deletion loop's state.
type deleter struct {
	s     *LeaderService
	w     *foreignWatch
	kc    *kgo.Client
	ctx   context.Context // the service's (carries the Kafka Auth)
	log   *slog.Logger
	start map[int]int64 // log start offsets as last seen
}

// deleteApplied runs the deletion rounds every DeleteEvery until ctx ends.
func (s *LeaderService) deleteApplied(ctx context.Context, w *foreignWatch, log *slog.Logger) {
	every := s.DeleteEvery
	if every <= 0 {
		every = DefaultDeleteEvery
	}
	kc, err := kgo.NewClient(append(infrakafka.KgoOpts(ctx), kgo.SeedBrokers(s.Brokers...))...)
	if err != nil {
		// only a bad option: nothing to retry
		s.deleteFailed(ctx, log, "client", err)
		return
	}
	defer kc.Close()
	d := &deleter{s: s, w: w, kc: kc, ctx: ctx, log: log, start: map[int]int64{}}
	for sleep(ctx, every) == nil {
		d.round()
		s.deleteRounds.Add(1)
	}
}

func (s *LeaderService) deleteFailed(ctx context.Context, log *slog.Logger, op string, err error) {
	if ctx.Err() != nil {
		return // stopping: not a failure
	}
	s.DeleteFailures.Add(1)
	log.Warn("prio3 leader: deleting applied uploads failed; the leader goes on and tries again later", "op", op, "topic", protocol.Prio3UploadsTopic, "err", err)
}

// timeout is one request's bound.
func (d *deleter) timeout() time.Duration {
	if d.s.DeleteTimeout > 0 {
		return d.s.DeleteTimeout
	}
	return DefaultDeleteTimeout
}

// round deletes what may be deleted now.
func (d *deleter) round() {
	applied := d.s.Applied()
	if len(applied) == 0 {
		return
	}
	parts := slices.Sorted(maps.Keys(applied))
	starts, err := d.logStarts(parts)
	if err != nil {
		d.s.deleteFailed(d.ctx, d.log, "list_offsets", err)
		return
	}
	maps.Copy(d.start, starts)
	targets := map[int]int64{}
	for _, p := range parts {
		lo, ok := starts[p]
		if !ok {
			continue
		}
		tracked, first, has := d.w.state(p)
		if !tracked || (has && first < lo) {
			pos, ok := d.w.refloor(p, lo)
			if !ok {
				continue
			}
			f, found, err := d.scanForeign(p, lo, pos)
			if err != nil {
				d.w.untrack(p)
				d.s.deleteFailed(d.ctx, d.log, "scan", fmt.Errorf("partition %d offsets [%d, %d): %w", p, lo, pos, err))
				continue
			}
			if found {
				d.w.lower(p, f)
			}
			_, first, has = d.w.state(p)
		}
		to := applied[p]
		if has && first < to {
			to = first
		}
		if to > lo {
			targets[p] = to
		}
	}
	if len(targets) == 0 {
		return
	}
	d.deleteBelow(targets)
}

// logStarts returns the log start offset of each partition (ListOffsets,
// timestamp -2: the earliest).
func (d *deleter) logStarts(parts []int) (map[int]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = protocol.Prio3UploadsTopic
	for _, p := range parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = int32(p), -2
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(d.ctx, d.timeout())
	defer cancel()
	resp, err := req.RequestWith(ctx, d.kc)
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w (are the brokers reachable?)", protocol.Prio3UploadsTopic, err)
	}
	out := map[int]int64{}
	var errs []error
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				errs = append(errs, fmt.Errorf("list offsets of %s partition %d: %w", t.Topic, p.Partition, err))
				continue
			}
			out[int(p.Partition)] = p.Offset
		}
	}
	return out, errors.Join(errs...)
}

// scanForeign reads partition p from lo up to pos and returns the offset of
// the first record of another campaign (or unkeyed), if any.
func (d *deleter) scanForeign(p int, lo, pos int64) (int64, bool, error) {
	if lo >= pos {
		return 0, false, nil
	}
	ctx, cancel := context.WithTimeout(d.ctx, d.timeout())
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: d.s.Brokers, Topic: protocol.Prio3UploadsTopic, Partition: p,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 250 * time.Millisecond, Dialer: infrakafka.Dialer(d.ctx), QueueCapacity: 8})
	defer r.Close()
	if err := r.SetOffset(lo); err != nil {
		return 0, false, err
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return 0, false, fmt.Errorf("read: %w", err)
		}
		if m.Offset >= pos {
			return 0, false, nil
		}
		if len(m.Key) == 0 || string(m.Key) != d.s.Config.Campaign {
			return m.Offset, true, nil
		}
		if m.Offset+1 >= pos {
			return 0, false, nil
		}
	}
}

// deleteBelow deletes the records below targets (partition → offset).
func (d *deleter) deleteBelow(targets map[int]int64) {
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = int32(d.timeout().Milliseconds())
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = protocol.Prio3UploadsTopic
	for _, p := range slices.Sorted(maps.Keys(targets)) {
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Partition, rp.Offset = int32(p), targets[p]
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(d.ctx, d.timeout())
	defer cancel()
	resp, err := req.RequestWith(ctx, d.kc)
	if err != nil {
		d.s.deleteFailed(d.ctx, d.log, "delete_records", fmt.Errorf("%w (does the leader's Kafka user hold Delete on topic %s? crowdlog topics --acl prio3-delete=USER)", err, protocol.Prio3UploadsTopic))
		return
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			part := int(p.Partition)
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				d.s.deleteFailed(d.ctx, d.log, "delete_records", fmt.Errorf("partition %d below offset %d: %w (does the leader's Kafka user hold Delete on topic %s? crowdlog topics --acl prio3-delete=USER)",
					part, targets[part], err, t.Topic))
				continue
			}
			if n := p.LowWatermark - d.start[part]; n > 0 {
				d.s.UploadsDeleted.Add(n)
			}
			d.start[part] = p.LowWatermark
			d.log.Debug("prio3 leader: deleted applied uploads", "partition", part, "log_start", p.LowWatermark)
		}
	}
}
