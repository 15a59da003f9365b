package relays_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	ikafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/infra/profile"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/relays"
)

// boundRelayChildEnv carries "natsURL,kafkaAddr,keyfile,msgs" to the child
// process of BenchmarkBoundRelay (TestBoundRelayChild).
const boundRelayChildEnv = "CROWDLOG_BOUND_RELAY_CHILD"

// BenchmarkBoundRelay is the relay line of `make bench-bounds`: msgs/s per
// core of relay b (relays.New with its defaults: fetch batch 1,024, pool 64 /
// 1 s) over embedded NATS JetStream, producing to kfake. Before the timer
// it starts NATS and kfake in this process and publishes
// CROWDLOG_BOUND_RELAY_MSGS (default 20,000) relay-b layers of the size a
// real report has there (1024 B: HopKafka around a 512-byte aggregator
// layer). Timed: one child process (this test binary running
// TestBoundRelayChild, so NATS's and kfake's CPU is not counted) runs the
// relay until it has forwarded them all, then exits. Metrics:
// cpu-ns/msg, the child's user+system CPU time (wait4 rusage) per message;
// msgs/s, the wall-clock rate. Two sub-benchmarks: cores=all (the
// relay process on every core) and cores=1 (GOMAXPROCS=1 in the child).
// Run with -benchtime 1x. With
// CROWDLOG_BOUND_CPUPROFILE=FILE the child writes its CPU profile there
// (go tool pprof relays.test FILE); name one sub-benchmark
// (-bench 'BenchmarkBoundRelay/cores=all'), or the second overwrites it.
func BenchmarkBoundRelay(b *testing.B) {
	// cores=all: one relay process on every core (GOMAXPROCS = the
	// machine's cores: its defaults); cores=1: a relay process on one core
	// (GOMAXPROCS=1), as an operator scales relays with one process per
	// core. The runtime's cost of spreading one process over cores (idle
	// Ps spinning for work, goroutine hand-offs between threads) is what
	// the two differ by.
	for _, c := range []struct {
		name string
		env  []string
	}{{"cores=all", nil}, {"cores=1", []string{"GOMAXPROCS=1"}}} {
		b.Run(c.name, func(b *testing.B) { benchmarkBoundRelay(b, c.env) })
	}
}

func benchmarkBoundRelay(b *testing.B, env []string) {
	n := 20_000
	if v, err := strconv.Atoi(os.Getenv("CROWDLOG_BOUND_RELAY_MSGS")); err == nil && v > 0 {
		n = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dir := b.TempDir()
	ns, err := natsserver.Start(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Shutdown()
	br, err := ikafka.Start(ctx, filepath.Join(dir, "kafka"), 8)
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if err := ikafka.EnsureTopics(ctx, br.Addr, 8, protocol.ReportsTopic); err != nil {
		b.Fatal(err)
	}
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if err := relays.EnsureStream(ctx, js, int64(n)+1000); err != nil {
		b.Fatal(err)
	}
	kb, _ := onion.GenerateKeyPair(2)
	keyPath := filepath.Join(dir, "relay-b.key")
	if err := onion.SaveKeyPair(keyPath, "relay-b", kb); err != nil {
		b.Fatal(err)
	}
	key, err := onion.LoadKeyPair(keyPath) // with its role, as the relay loads it
	if err != nil {
		b.Fatal(err)
	}
	agg, _ := onion.GenerateKeyPair(3)
	layers := make([][]byte, n)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				inner, err := onion.SealLayer(agg.PublicKey(), onion.Hop{Kind: onion.HopDeliver}, []byte(fmt.Sprintf("made-up report %d", i)))
				if err != nil {
					errs <- err
					return
				}
				l, err := onion.SealLayer(key.PublicKey(), onion.Hop{Kind: onion.HopKafka, Key: []byte{byte(i)}}, inner)
				if err != nil {
					errs <- err
					return
				}
				layers[i] = l
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	if len(layers[0]) != 1024 {
		b.Fatalf("relay-b layer of %d bytes, want 1024", len(layers[0]))
	}
	pub := &publish.Publisher{JS: js, Subject: protocol.RelaySubject("b")}
	for _, l := range layers {
		if err := pub.Publish(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	for b.Loop() {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBoundRelayChild$", "-test.count=1")
		cmd.Env = append(append(os.Environ(), env...), fmt.Sprintf("%s=%s,%s,%s,%d", boundRelayChildEnv, ns.URL, br.Addr, keyPath, n))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		began := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("relay child: %v\n%s", err, out.String())
		}
		wall := time.Since(began)
		if !strings.Contains(out.String(), fmt.Sprintf("BOUNDCHILD forwarded=%d ", n)) {
			b.Fatalf("relay child did not forward all %d messages:\n%s", n, out.String())
		}
		cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		b.ReportMetric(float64(n), "msgs")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/msg")
		b.ReportMetric(float64(n)/wall.Seconds(), "msgs/s")
	}
}

// TestBoundRelayChild is the child process of BenchmarkBoundRelay, not a
// test: it skips unless the benchmark started it. It runs relay b
// (relays.New, default options) until it has forwarded the given number
// of messages, at most 10 minutes, then stops it and prints its counters.
func TestBoundRelayChild(t *testing.T) {
	spec := os.Getenv(boundRelayChildEnv)
	if spec == "" {
		t.Skip("the child process of BenchmarkBoundRelay")
	}
	f := strings.Split(spec, ",")
	if len(f) != 4 {
		t.Fatalf("%s=%q: want natsURL,kafkaAddr,keyfile,msgs", boundRelayChildEnv, spec)
	}
	n, err := strconv.ParseUint(f[3], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	debug.SetGCPercent(relays.DefaultGCPercent) // as `crowdlog relay` runs
	stopProfile, err := profile.StartCPU()      // CROWDLOG_BOUND_CPUPROFILE
	if err != nil {
		t.Fatal(err)
	}
	defer stopProfile()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc, err := nats.Connect(f[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r, closeWriters, err := relays.New(ctx, js, relays.Config{Name: "b", KeyPaths: []string{f[2]}, Kafka: []string{f[1]}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer closeWriters()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Minute)
	for r.Stats.Forwarded.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("relay forwarded %d of %d messages in 10 min", r.Stats.Forwarded.Load(), n)
		}
		select {
		case err := <-done:
			t.Fatalf("relay stopped after %d of %d messages: %v", r.Stats.Forwarded.Load(), n, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("relay did not stop within 1 min of its context's end")
	}
	fmt.Printf("BOUNDCHILD forwarded=%d %+v\n", r.Stats.Forwarded.Load(), r.Stats.Snapshot())
}
