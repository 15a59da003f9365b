package aggregator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// startBroker starts kfake with its data in dir/kafka and creates the
// reports and decrypted topics with the given partitions; it stops with
// the test.
func startBroker(ctx context.Context, t *testing.T, dir string, partitions int) (*infrakafka.Broker, []string) {
	t.Helper()
	kb, err := infrakafka.Start(ctx, filepath.Join(dir, "kafka"), partitions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kb.Close)
	if err := infrakafka.EnsureTopics(ctx, kb.Addr, partitions, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
	return kb, []string{kb.Addr}
}

// TestServiceTokensRestart runs the Service (batches prepared on the
// pool, applied in order) over kfake with report tokens and ARC: 4
// artifacts (FT_u, k = 3) reported by 4 credentials each, 2 impressions
// per (credential, artifact) carrying one presentation's bytes, plus 4
// reports without token and 4 replayed messages. A first Service stops
// after its first commits (MaxBatch 5) and a second one in the same group
// rebuilds the partitions by replay and finishes. Whatever was emitted
// twice around the stop, the decrypted items, by report id, are exactly
// the 32 good reports (ids recorded when they were sealed); the two
// services together counted 32 reports and 8 drops; the close emits one
// closed marker per partition and no summary (every group opened).
func TestServiceTokensRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const partitions = 3
	kb, brokers := startBroker(ctx, t, dir, partitions)
	onionKey, _ := onion.GenerateKeyPair(1)
	reportKey, _ := token.GenerateKey(token.KindReport, "e1")
	arcKey, _ := arc.GenerateKey(rand.Reader)
	if err := onion.PrepareKeys([]*onion.KeyPair{onionKey}); err != nil {
		t.Fatal(err)
	}

	const k = 3
	good := map[string]bool{}
	var msgs []kafkago.Message
	add := func(r *star.Report) kafkago.Message {
		m := kafkago.Message{Key: onion.TagBucket(r.Tag), Value: wrap(t, onionKey, r)}
		msgs = append(msgs, m)
		return m
	}
	var replays []kafkago.Message
	for a := range 4 {
		s := sealing(t, fmt.Sprintf("artifact %d", a), star.FTu, k)
		for range 4 {
			pres, tag := present(t, credential(t, arcKey), &s)
			for j := range 2 {
				r, err := s.SealARC(tag, fmt.Sprintf("artifact %d", a), fmt.Sprint(j))
				if err != nil {
					t.Fatal(err)
				}
				payWith(t, reportKey, r)
				r.Presentation = pres
				good[hex.EncodeToString(r.ID[:])] = true
				m := add(r)
				if j == 1 && len(replays) < 4 {
					replays = append(replays, m)
				}
			}
		}
		u, _ := star.NewUserSecret()
		r, _ := s.Seal(&u, "no token", "")
		add(r)
	}
	msgs = append(msgs, replays...)
	if err := OpenEpoch(ctx, brokers, nil, "query", "e1"); err != nil {
		t.Fatal(err)
	}
	w := infrakafka.NewWriter(kb.Addr, protocol.ReportsTopic)
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()

	newService := func() *Service {
		s := &Service{Brokers: brokers, Keys: []*onion.KeyPair{onionKey}, Logger: slog.New(slog.DiscardHandler),
			GroupID: "restart", MaxBatch: 5, MaxWait: 20 * time.Millisecond, SessionTimeout: 6 * time.Second}
		s.ReportKeys = keysOf(reportKey)
		s.ARCKeys = func(e string) (*arc.PrivateKey, error) {
			if e == "e1" {
				return arcKey, nil
			}
			return nil, fmt.Errorf("no ARC key for %s", e)
		}
		return s
	}
	run := func(s *Service, until func() bool, what string) {
		sctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(sctx) }()
		deadline := time.After(90 * time.Second)
		for !until() {
			select {
			case err := <-done:
				t.Fatalf("%s: the service stopped: %v", what, err)
			case <-deadline:
				t.Fatalf("%s: not reached in 90 s (reports %d, dropped %d)", what, s.Reports.Load(), s.Dropped.Load())
			case <-time.After(5 * time.Millisecond):
			}
		}
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the service did not stop within 30 s of its context's end", what)
		}
	}
	s1 := newService()
	run(s1, func() bool { return s1.Reports.Load()+s1.Dropped.Load() > 0 }, "first service's first commit")
	t.Logf("first service: %d reports, %d dropped", s1.Reports.Load(), s1.Dropped.Load())
	total := int64(len(msgs))
	s2 := newService()
	run(s2, func() bool {
		return s1.Reports.Load()+s1.Dropped.Load()+s2.Reports.Load()+s2.Dropped.Load() >= total
	}, "every report committed by the two services")
	if got := s1.Reports.Load() + s2.Reports.Load(); got != 32 {
		t.Errorf("reports %d (%d + %d), want 32", got, s1.Reports.Load(), s2.Reports.Load())
	}
	if got := s1.Dropped.Load() + s2.Dropped.Load(); got != 8 {
		t.Errorf("dropped %d, want 8 (4 without token, 4 replays)", got)
	}
	byReason := map[string]int64{}
	for _, s := range []*Service{s1, s2} {
		for r, n := range s.DroppedByReason() {
			byReason[r] += n
		}
	}
	if len(byReason) != 2 || byReason["no-token"] != 4 || byReason["spent-token"] != 4 {
		t.Errorf("dropped by reason %v, want 4 no-token and 4 spent-token (the replays' tokens)", byReason)
	}

	// close the epoch with a third service running, then read the outputs
	if err := CloseEpoch(ctx, brokers, nil, "query", "e1"); err != nil {
		t.Fatal(err)
	}
	tail := infrakafka.ReadTopic(ctx, brokers, protocol.DecryptedTopic, "test", slog.New(slog.DiscardHandler))
	defer tail.Stop()
	s3 := newService()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = s3.Run(sctx) }()
	items, summaries := readUntilClosed(t, tail, partitions)
	if len(items) != len(good) || len(summaries) != 0 {
		t.Errorf("%d distinct items, %d summaries; want the %d good reports, none", len(items), len(summaries), len(good))
	}
	for id := range items {
		if !good[id] {
			t.Errorf("item of report %s, which was not a good report", id)
		}
	}
}

// readUntilClosed reads the decrypted topic through tail until every one
// of partitions has emitted its closed marker (90 s at most) and returns
// the items' report ids and the summaries.
func readUntilClosed(t *testing.T, tail *infrakafka.Tail, partitions int) (map[string]bool, []protocol.Decrypted) {
	t.Helper()
	items, closed := map[string]bool{}, map[int]bool{}
	var summaries []protocol.Decrypted
	deadline := time.After(90 * time.Second)
	for len(closed) < partitions {
		select {
		case b := <-tail.Msgs:
			var d protocol.Decrypted
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			switch d.Kind {
			case protocol.KindItem:
				items[d.Report] = true
			case protocol.KindClosed:
				closed[d.Partition] = true
			case protocol.KindSummary:
				summaries = append(summaries, d)
			}
		case <-deadline:
			t.Fatalf("closed markers of %d of %d partitions in 90 s", len(closed), partitions)
		}
	}
	return items, summaries
}

// logRecorder is a slog.Handler that keeps each record's message and its
// "partition" attribute.
type logRecorder struct {
	mu   *sync.Mutex
	recs *[]loggedEvent
}

type loggedEvent struct {
	msg       string
	partition int64
}

func (h logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h logRecorder) WithGroup(string) slog.Handler            { return h }
func (h logRecorder) Handle(_ context.Context, r slog.Record) error {
	e := loggedEvent{msg: r.Message, partition: -1}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "partition" {
			e.partition = a.Value.Int64()
		}
		return true
	})
	h.mu.Lock()
	*h.recs = append(*h.recs, e)
	h.mu.Unlock()
	return nil
}

func (h logRecorder) events(msg string) []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ps []int64
	for _, e := range *h.recs {
		if e.msg == msg {
			ps = append(ps, e.partition)
		}
	}
	return ps
}

// TestServiceKeepsIdlePartitions: a member keeps the state of a partition
// it owns across rebalances also when nothing new arrived for it, so only
// the partitions that really move are replayed. Service a consumes both
// partitions alone; b joins (a keeps one partition, b replays the other)
// and leaves (a takes b's partition back). a must replay exactly one
// partition, the one b had. Before, a state taken for a generation was
// kept again only after a commit, so a's idle partition was replayed on
// the second rebalance as well (2 replays), and each replay of a partition
// of 1 million reports costs ≈ 40 s of CPU.
func TestServiceKeepsIdlePartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions = 2
	kb, brokers := startBroker(ctx, t, t.TempDir(), partitions)
	onionKey, _ := onion.GenerateKeyPair(1)
	if err := OpenEpoch(ctx, brokers, nil, "query", "e1"); err != nil {
		t.Fatal(err)
	}
	var msgs []kafkago.Message
	for a := range 20 {
		art := fmt.Sprintf("idle artifact %d", a)
		s := sealing(t, art, star.FTa, 5)
		u, _ := star.NewUserSecret()
		r, err := s.Seal(&u, art, "")
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafkago.Message{Key: onion.TagBucket(r.Tag), Value: wrap(t, onionKey, r)})
	}
	w := infrakafka.NewWriter(kb.Addr, protocol.ReportsTopic)
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()

	newService := func() (*Service, logRecorder) {
		rec := logRecorder{mu: &sync.Mutex{}, recs: &[]loggedEvent{}}
		return &Service{Brokers: brokers, Keys: []*onion.KeyPair{onionKey}, Logger: slog.New(rec),
			GroupID: "idle", MaxWait: 20 * time.Millisecond, SessionTimeout: 6 * time.Second, SpillDir: t.TempDir()}, rec
	}
	start := func(s *Service) (stop func()) {
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(sctx) }()
		return func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the service did not stop within 30 s of its context's end")
			}
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 90 s: %s", what)
			}
		}
	}
	a, aLog := newService()
	stopA := start(a)
	defer stopA()
	waitFor("a commits every report", func() bool { return a.Reports.Load() == int64(len(msgs)) })
	assigned := func(r logRecorder) int { return len(r.events("aggregator: assigned")) }

	b, bLog := newService()
	stopB := start(b)
	waitFor("b rebuilds the partition it was given", func() bool {
		return len(bLog.events("aggregator: partition state rebuilt")) == 1
	})
	given := bLog.events("aggregator: partition state rebuilt")[0]
	before := assigned(aLog)
	stopB()
	waitFor("a takes b's partition back and rebuilds it", func() bool {
		return assigned(aLog) > before && len(aLog.events("aggregator: partition state rebuilt")) >= 1
	})
	time.Sleep(500 * time.Millisecond) // a second replay, if any, starts at once
	if got := aLog.events("aggregator: rebuilding partition state by replay"); len(got) != 1 || got[0] != given {
		t.Fatalf("a replayed partitions %v; want only %d, the one b had (its own idle partition stays kept)", got, given)
	}
	if a.PendingTags() != len(msgs) {
		t.Fatalf("a holds %d pending tags after the moves, want %d", a.PendingTags(), len(msgs))
	}
}
