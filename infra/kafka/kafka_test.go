package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

func TestBrokerPersistsRecordsAndOffsets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	t0 := time.Now()
	b, err := Start(ctx, dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kfake ready in %v at %s", time.Since(t0), b.Addr)
	for i := 0; i < 2; i++ { // idempotent
		if err := EnsureTopics(ctx, b.Addr, 4, "reports", "vectors"); err != nil {
			t.Fatal(err)
		}
	}
	// An existing topic keeps its partition count.
	if err := EnsureTopics(ctx, b.Addr, 9, "reports"); err != nil {
		t.Fatal(err)
	}
	if n, err := Partitions(ctx, b.Addr, "reports"); err != nil || n != 4 {
		t.Fatalf("Partitions(reports) = %d, %v; want 4", n, err)
	}
	if _, err := Partitions(ctx, b.Addr, "missing"); err == nil {
		t.Fatal("missing topic reported no error")
	}

	w := NewWriter(b.Addr, "reports")
	const n = 1000
	msgs := make([]kafkago.Message, n)
	for i := range msgs {
		msgs[i] = kafkago.Message{Key: []byte{byte(i % 7)}, Value: []byte(fmt.Sprint(i))}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()

	// Consume half with a group and commit.
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{b.Addr}, Topic: "reports", GroupID: "g",
		MaxWait: 50 * time.Millisecond, Dialer: &kafkago.Dialer{}})
	seen := map[string]bool{}
	for len(seen) < n/2 {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen[string(m.Value)] = true
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	b.Close()
	b.Close() // idempotent

	// Restart on the same dir: records and committed offsets survive.
	b2, err := Start(ctx, dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if n, err := Partitions(ctx, b2.Addr, "reports"); err != nil || n != 4 {
		t.Fatalf("after restart Partitions(reports) = %d, %v; want 4", n, err)
	}
	r2 := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{b2.Addr}, Topic: "reports", GroupID: "g",
		MaxWait: 50 * time.Millisecond, Dialer: &kafkago.Dialer{}})
	defer r2.Close()
	rest := map[string]bool{}
	for len(seen)+len(rest) < n {
		m, err := r2.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("after %d of %d: %v", len(seen)+len(rest), n, err)
		}
		if seen[string(m.Value)] {
			t.Fatalf("committed record redelivered after restart")
		}
		rest[string(m.Value)] = true
		if err := r2.CommitMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		v := fmt.Sprint(i)
		if !seen[v] && !rest[v] {
			t.Fatalf("record %d lost", i)
		}
	}
}

func TestFixedPort(t *testing.T) {
	ctx := context.Background()
	b, err := Config{Dir: t.TempDir()}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addr
	b.Close()
	var port int
	fmt.Sscanf(addr[len("127.0.0.1:"):], "%d", &port)
	b2, err := Config{Dir: t.TempDir(), Port: port}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if b2.Addr != addr {
		t.Fatalf("Addr = %s, want %s", b2.Addr, addr)
	}
}

// BenchmarkProduce measures keyed produce throughput with and without
// SyncWrites (messages of 700 bytes in 256-message WriteMessages calls, the
// shape of relay B's output).
func BenchmarkProduce(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync=%v", sync), func(b *testing.B) {
			ctx := context.Background()
			br, err := Config{Dir: b.TempDir(), Partitions: 8, SyncWrites: sync}.Start(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			if err := EnsureTopics(ctx, br.Addr, 8, "reports"); err != nil {
				b.Fatal(err)
			}
			w := NewWriter(br.Addr, "reports")
			defer w.Close()
			batch := make([]kafkago.Message, 256)
			for i := range batch {
				batch[i] = kafkago.Message{Key: []byte{byte(i), byte(i >> 3)}, Value: make([]byte, 700)}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i += len(batch) {
				if err := w.WriteMessages(ctx, batch...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// TestThreeBrokers: Config.Brokers 3 gives three listeners; EnsureTopics
// creates topics with replication factor 3 (read back from Metadata: every
// partition lists 3 replicas and 3 in-sync replicas); leaders are spread
// over the brokers; records written through one broker are all read back by
// a consumer group bootstrapped with every address (counted against what was
// written, per value).
func TestThreeBrokers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := (Config{Dir: t.TempDir(), Port: 1, Brokers: 3}).Start(ctx); err == nil {
		t.Fatal("Port with 3 brokers accepted")
	}
	b, err := Config{Dir: t.TempDir(), Partitions: 6, Brokers: 3}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(b.Addrs) != 3 || b.Addrs[0] != b.Addr || strings.Count(b.Bootstrap(), ",") != 2 {
		t.Fatalf("addresses %v, bootstrap %q", b.Addrs, b.Bootstrap())
	}
	if err := EnsureTopics(ctx, b.Addrs[1], 6, "reports"); err != nil {
		t.Fatal(err)
	}
	cl := clientCtx(ctx, b.Addr)
	defer closeTransport(cl)
	meta, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{"reports"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(meta.Brokers) != 3 {
		t.Fatalf("metadata lists %d brokers, want 3", len(meta.Brokers))
	}
	leaders := map[int]bool{}
	for _, p := range meta.Topics[0].Partitions {
		if len(p.Replicas) != 3 || len(p.Isr) != 3 {
			t.Fatalf("partition %d: %d replicas, %d in sync; want 3, 3", p.ID, len(p.Replicas), len(p.Isr))
		}
		leaders[p.Leader.ID] = true
	}
	t.Logf("6 partitions, replication 3, leaders on %d of 3 brokers", len(leaders))

	w := NewWriter(b.Addr, "reports")
	const n = 600
	msgs := make([]kafkago.Message, n)
	for i := range msgs {
		msgs[i] = kafkago.Message{Key: []byte(fmt.Sprint(i % 13)), Value: []byte(fmt.Sprint(i))}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: b.Addrs, Topic: "reports", GroupID: "g",
		MaxWait: 50 * time.Millisecond, Dialer: &kafkago.Dialer{}})
	defer r.Close()
	seen := map[string]bool{}
	for len(seen) < n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("after %d of %d records: %v", len(seen), n, err)
		}
		seen[string(m.Value)] = true
	}
	for _, m := range msgs {
		if !seen[string(m.Value)] {
			t.Fatalf("record %s not read back", m.Value)
		}
	}
}

// TestServeGroupWithoutGroup: ServeGroup with id "" serves every partition
// of the topic from its first offset, with gen nil, in one generation that
// ends with ctx (then it returns nil); Forward delivers every record once. A
// missing topic is an error naming the role and the topic, at once.
func TestServeGroupWithoutGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := Start(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	log := slog.New(slog.DiscardHandler)
	brokers := []string{b.Addr}
	never := func(context.Context, *kafkago.Generation, int, int64) error {
		t.Error("serve called for a missing topic")
		return nil
	}
	if err := ServeGroup(ctx, brokers, "", "missing", 0, log, "test", never); err == nil ||
		!strings.HasPrefix(err.Error(), "test: topic missing: ") {
		t.Fatalf("missing topic: err %v, want \"test: topic missing: …\"", err)
	}
	if err := EnsureTopics(ctx, b.Addr, 3, "t"); err != nil {
		t.Fatal(err)
	}
	w := NewWriter(b.Addr, "t")
	const n = 300
	msgs := make([]kafkago.Message, n)
	for i := range msgs {
		msgs[i] = kafkago.Message{Key: []byte(fmt.Sprint(i % 11)), Value: []byte(fmt.Sprint(i))}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()

	values := make(chan []byte, 16)
	fwd := Forward(brokers, "t", values, log)
	var mu sync.Mutex
	served := map[int]int64{}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	var assigned []int
	go func() {
		done <- ServeGroupAssigned(sctx, brokers, "", "t", 0, log, "test",
			func(ids []int) { mu.Lock(); assigned = ids; mu.Unlock() },
			func(ctx context.Context, gen *kafkago.Generation, p int, from int64) error {
				if gen != nil {
					t.Errorf("partition %d: generation %d without a group", p, gen.ID)
				}
				mu.Lock()
				served[p] = from
				mu.Unlock()
				return fwd(ctx, gen, p, from)
			})
	}()
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case v := <-values:
			if seen[string(v)] {
				t.Fatalf("record %s delivered twice", v)
			}
			seen[string(v)] = true
		case err := <-done:
			t.Fatalf("ServeGroup returned %v before ctx ended, after %d of %d records", err, len(seen), n)
		case <-ctx.Done():
			t.Fatalf("only %d of %d records within a minute", len(seen), n)
		}
	}
	mu.Lock()
	if fmt.Sprint(assigned) != "[0 1 2]" {
		t.Errorf("assigned %v, want every partition [0 1 2]", assigned)
	}
	mu.Unlock()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeGroup after ctx ended: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeGroup did not return within 10 s of ctx's end")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(served) != 3 || served[0] != kafkago.FirstOffset || served[1] != kafkago.FirstOffset || served[2] != kafkago.FirstOffset {
		t.Fatalf("served partitions (from offset) %v, want 0, 1, 2 from %d", served, kafkago.FirstOffset)
	}
}
