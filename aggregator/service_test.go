package aggregator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
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
	kb, err := infrakafka.Start(ctx, filepath.Join(dir, "kafka"), partitions)
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Close()
	brokers := []string{kb.Addr}
	if err := infrakafka.EnsureTopics(ctx, kb.Addr, partitions, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
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
	if err := OpenEpoch(ctx, brokers, "query", "e1"); err != nil {
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

	// close the epoch with a third service running, then read the outputs
	if err := CloseEpoch(ctx, brokers, "query", "e1"); err != nil {
		t.Fatal(err)
	}
	items, closed, summaries := map[string]bool{}, map[int]bool{}, 0
	tail := infrakafka.ReadTopic(ctx, brokers, protocol.DecryptedTopic, "test", slog.New(slog.DiscardHandler))
	defer tail.Stop()
	s3 := newService()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = s3.Run(sctx) }()
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
				summaries++
			}
		case <-deadline:
			t.Fatalf("closed markers of %d of %d partitions in 90 s", len(closed), partitions)
		}
	}
	if len(items) != len(good) || summaries != 0 {
		t.Errorf("%d distinct items, %d summaries; want the %d good reports, none", len(items), summaries, len(good))
	}
	for id := range items {
		if !good[id] {
			t.Errorf("item of report %s, which was not a good report", id)
		}
	}
}
