package vectors

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/retry"
	"github.com/crowdlog/crowdlog/protocol"

	"github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/protocol/blind"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// Recoverer receives recovery requests (the coordinator, over NATS). Ask
// must be idempotent: a restarted aggregator may ask again. An error
// wrapping blind.ErrRefused is final (not retried; the group is lost at its
// recovery deadline); any other is retried.
type Recoverer interface {
	Ask(ctx context.Context, req blind.Request) error
}

// Service runs Partition state machines over a Kafka consumer group on
// topic "vectors" and writes outcomes to "group-sums". Restart safety is the
// threshold aggregator's (aggregator.Service): the committed offset of a
// partition is after every output of the messages before it was
// acknowledged; on assignment the partition is replayed from its start to
// rebuild state, emitting only for messages at or after the committed
// offset. Outcomes re-emitted after a crash are duplicates by instance,
// which the release stage ignores; recovery requests re-sent are ignored by
// the coordinator.
type Service struct {
	Brokers []string
	// Keys are the aggregator's HPKE key pairs (the innermost onion layer
	// of submissions and answers).
	Keys      []*onion.KeyPair
	GroupID   string // default "crowdlog-vectors"
	Recoverer Recoverer
	Logger    *slog.Logger
	MaxWait   time.Duration // flush a partial batch after this long; default 100 ms
	// SessionTimeout: a member silent this long leaves the group; default 20 s.
	SessionTimeout time.Duration
	// ControlKey is the coordinator's Ed25519 public key (RFC 8032): a
	// roster, tick or commit is applied only from a record it signed
	// for this topic, partition and a served campaign
	// (Partition.ApplyControl); nil: control records are not
	// authenticated (logged), and anyone who may write to the topic can
	// forge them. Campaigns are the campaigns served (empty: any).
	ControlKey ed25519.PublicKey
	Campaigns  []string

	Submissions, Answers, Outcomes, Dropped atomic.Int64
	// RefusedRequests counts unmasking requests the coordinator refused.
	RefusedRequests atomic.Int64
	mu              sync.Mutex
	open            map[int]int
	day             map[int]int32
	droppedBy       map[string]int64
}

// DroppedByReason returns the messages dropped so far, by reason (the
// Drop* constants, the refused control records' among them).
func (s *Service) DroppedByReason() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.droppedBy))
	for r, n := range s.droppedBy {
		out[r] = n
	}
	return out
}

// Day returns the latest coordinator day tick that every one of the n
// partitions has applied, with its recovery requests acknowledged and its
// outcomes written; false until this process owns all n partitions. Log
// replays wait for it before clients ping on that day.
func (s *Service) Day(n int) (int32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.day) < n {
		return 0, false
	}
	first := true
	var d int32
	for _, v := range s.day {
		if first || v < d {
			d, first = v, false
		}
	}
	return d, true
}

// OpenGroups is the number of groups not yet final in owned partitions.
func (s *Service) OpenGroups() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.open {
		n += v
	}
	return n
}

// Run joins the consumer group and serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if s.GroupID == "" {
		s.GroupID = "crowdlog-vectors"
	}
	if s.MaxWait <= 0 {
		s.MaxWait = 100 * time.Millisecond
	}
	if s.SessionTimeout <= 0 {
		s.SessionTimeout = 20 * time.Second
	}
	// before the partition goroutines share them (onion.KeyPair.Prepare)
	if err := onion.PrepareKeys(s.Keys); err != nil {
		return fmt.Errorf("aggregate-vectors: %w", err)
	}
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	if s.ControlKey == nil {
		log.Warn("vectors: PDD control records are not authenticated (no coordinator key, --coordinator-pub): anyone who may write to the vectors topic can forge rosters, ticks and commitments")
	}
	s.mu.Lock()
	s.open, s.day, s.droppedBy = map[int]int{}, map[int]int32{}, map[string]int64{}
	s.mu.Unlock()
	w := &kafka.Writer{Addr: kafka.TCP(s.Brokers...), Topic: protocol.GroupSumsTopic, Transport: infrakafka.Transport(ctx),
		Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: 2 * time.Millisecond, BatchSize: 1000, BatchBytes: 256 << 20}
	defer infrakafka.CloseWriter(w)
	return infrakafka.ServeGroup(ctx, s.Brokers, s.GroupID, protocol.VectorsTopic, s.SessionTimeout, log, "vectors",
		func(ctx context.Context, gen *kafka.Generation, id int, committed int64) error {
			return s.runPartition(ctx, gen, w, id, committed, log)
		})
}

func (s *Service) runPartition(ctx context.Context, gen *kafka.Generation, w *kafka.Writer, id int, committed int64, log *slog.Logger) error {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: s.Brokers, Topic: protocol.VectorsTopic, Partition: id,
		MinBytes: 1, MaxBytes: 64 << 20, MaxWait: s.MaxWait, Dialer: infrakafka.Dialer(ctx)})
	defer r.Close()
	if committed < 0 {
		committed = 0
	}
	if err := r.SetOffset(kafka.FirstOffset); err != nil {
		return err
	}
	st := NewPartition()
	st.ControlKey, st.ID = s.ControlKey, id
	if len(s.Campaigns) > 0 {
		st.Campaigns = map[string]bool{}
		for _, c := range s.Campaigns {
			st.Campaigns[c] = true
		}
	}
	var prev Stats
	for {
		var outs []blind.Outcome
		var reqs []blind.Request
		last := int64(-1)
		deadline := time.Now().Add(s.MaxWait)
		for n := 0; n < 256; n++ {
			fctx, cancel := context.WithDeadline(ctx, deadline)
			m, err := r.FetchMessage(fctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if errors.Is(err, context.DeadlineExceeded) {
					break
				}
				return fmt.Errorf("fetch partition %d: %w", id, err)
			}
			last = m.Offset
			var res Result
			if b, control := s.open1(m); control {
				res = st.ApplyControl(b, m.Time)
			} else {
				res = st.Apply(b, false)
			}
			if m.Offset < committed {
				continue // replay: emitted before the last commit
			}
			outs = append(outs, res.Outcomes...)
			reqs = append(reqs, res.Requests...)
		}
		if last < committed {
			continue
		}
		for _, req := range reqs {
			if s.Recoverer == nil {
				log.Warn("vectors: recovery needed but no coordinator configured", "instance", req.Instance.String())
				continue
			}
			if err := retry.Forever(ctx, log, "vectors: recovery request to the coordinator", 100*time.Millisecond, 5*time.Second,
				func() error {
					err := s.Recoverer.Ask(ctx, req)
					if errors.Is(err, blind.ErrRefused) {
						return retry.Permanent(err)
					}
					return err
				}); err != nil {
				if !errors.Is(err, blind.ErrRefused) {
					return err
				}
				// a refused request is not retried: the group is lost at its
				// recovery deadline instead of blocking the partition
				s.RefusedRequests.Add(1)
				log.Error("vectors: the coordinator refused an unmasking request; the group will be lost at its recovery deadline",
					"instance", req.Instance.String(), "err", err)
			}
		}
		if len(outs) > 0 {
			msgs := make([]kafka.Message, len(outs))
			for i := range outs {
				b, _ := outs[i].MarshalBinary()
				msgs[i] = kafka.Message{Key: []byte(outs[i].Roster.Instance.String()), Value: b}
			}
			for i := range outs {
				if len(outs[i].Bad) > 0 {
					log.Warn("vectors: holders revealed shares that failed their commitments (skipped)",
						"instance", outs[i].Roster.Instance.String(), "holders", outs[i].Bad)
				}
			}
			if err := retry.Forever(ctx, log, "vectors: write group-sums", 100*time.Millisecond, 5*time.Second,
				func() error { return w.WriteMessages(ctx, msgs...) }); err != nil {
				return err
			}
		}
		if err := infrakafka.CommitOffset(gen, protocol.VectorsTopic, id, last+1); err != nil {
			return fmt.Errorf("commit partition %d: %w", id, err)
		}
		committed = last + 1
		s.account(id, st, &prev, log)
	}
}

// open1 returns a message's blind bytes and whether it is a control
// message; relay-delivered messages are peeled (a layer that does not open
// yields nil, counted as malformed by Apply).
func (s *Service) open1(m kafka.Message) ([]byte, bool) {
	for _, h := range m.Headers {
		if h.Key == protocol.ControlHeader {
			return m.Value, true
		}
	}
	hop, inner, err := onion.Peel(s.Keys, m.Value)
	if err != nil || hop.Kind != onion.HopDeliver {
		return nil, false
	}
	return inner, false
}

func (s *Service) account(id int, st *Partition, prev *Stats, log *slog.Logger) {
	now := st.Stats
	s.Submissions.Add(now.Submissions - prev.Submissions)
	s.Answers.Add(now.Answers - prev.Answers)
	s.Outcomes.Add(now.Complete + now.Recovered + now.Lost - prev.Complete - prev.Recovered - prev.Lost)
	s.Dropped.Add(now.dropped() - prev.dropped())
	refused := map[string]int64{}
	for _, r := range ControlDropReasons {
		if n := now.Dropped[r] - prev.Dropped[r]; n > 0 {
			refused[r] = n
		}
	}
	if len(refused) > 0 {
		log.Error("vectors: control records refused (unsigned, not signed by the coordinator's key --coordinator-pub, or replayed): not applied",
			"partition", id, "unsigned_control", refused[DropUnsignedControl], "bad_control_signature", refused[DropBadControlSignature],
			"replayed_control", refused[DropReplayedControl], "malformed_control", refused[DropMalformedControl])
	}
	s.mu.Lock()
	for r, n := range now.Dropped {
		s.droppedBy[r] += n - prev.Dropped[r]
	}
	s.open[id] = st.Open()
	s.day[id] = st.day
	s.mu.Unlock()
	*prev = now
	prev.Dropped = maps.Clone(now.Dropped)
}

func (st Stats) dropped() int64 {
	var n int64
	for _, v := range st.Dropped {
		n += v
	}
	return n
}
