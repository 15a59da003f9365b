package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/internal/truth"
	"github.com/crowdlog/crowdlog/pipelines/runner"
)

const bundled = "../../testdata/aol-top1000.tsv.gz"

// subset writes the first n users of the bundled log to a gzip file.
func subset(t *testing.T, n int) string {
	t.Helper()
	f, err := os.Open(bundled)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "subset.tsv.gz")
	out, _ := os.Create(path)
	zw := gzip.NewWriter(out)
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	users := map[string]bool{}
	for sc.Scan() {
		line := sc.Text()
		u, _, _ := strings.Cut(line, "\t")
		if u != "AnonID" && !users[u] {
			if len(users) == n {
				break
			}
			users[u] = true
		}
		zw.Write([]byte(line + "\n"))
	}
	zw.Close()
	out.Close()
	return path
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "crowdlog")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type proc struct {
	t    *testing.T
	bin  string
	args []string
	log  *os.File
	cmd  *exec.Cmd
}

func start(t *testing.T, bin, logPath string, args ...string) *proc {
	p := &proc{t: t, bin: bin, args: args}
	var err error
	if p.log, err = os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		t.Fatal(err)
	}
	p.restart()
	t.Cleanup(func() { p.stop(syscall.SIGTERM); p.log.Close() })
	return p
}

func (p *proc) restart() {
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) stop(sig syscall.Signal) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
}

// decryptedCount is the number of messages on the decrypted topic.
func decryptedCount(t *testing.T, addr string) int64 {
	conn, err := kafkago.Dial("tcp", addr)
	if err != nil {
		return 0
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(aggregator.DecryptedTopic)
	if err != nil {
		return 0
	}
	var n int64
	for _, p := range parts {
		pc, err := kafkago.DialLeader(context.Background(), "tcp", addr, p.Topic, p.ID)
		if err != nil {
			continue
		}
		first, last, err := pc.ReadOffsets()
		pc.Close()
		if err == nil {
			n += last - first
		}
	}
	return n
}

// TestKillAggregator runs every role as its own process against shared NATS,
// kfake and ClickHouse, SIGKILLs the aggregator twice while reports flow,
// restarts it, and requires the export to equal both the raw-log release and
// a fault-free in-process run byte for byte.
func TestKillAggregator(t *testing.T) {
	if _, err := clickhouse.ServerBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ClickHouse is required in CI: %v", err)
		}
		t.Skipf("no ClickHouse: %v", err)
	}
	if testing.Short() {
		t.Skip("multi-process run in -short mode")
	}
	const users, k, policy = 250, 3, "ft-u"
	input := subset(t, users)
	bin := buildBinary(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	ns, err := natsserver.Start(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	kb, err := kafka.Start(ctx, filepath.Join(dir, "kafka"), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Close()
	if err := kafka.EnsureTopics(ctx, kb.Addr, 4, aggregator.ReportsTopic, aggregator.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
	ch, err := clickhouse.Start(ctx, filepath.Join(dir, "clickhouse"))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Stop()
	keys := filepath.Join(dir, "keys")
	if out, err := exec.Command(bin, "keys", "generate", "--dir", keys).CombinedOutput(); err != nil {
		t.Fatalf("keys generate: %v %s", err, out)
	}
	logs := filepath.Join(dir, "logs")
	os.MkdirAll(logs, 0o755)
	start(t, bin, filepath.Join(logs, "randomness.log"), "randomness", "--nats", ns.URL, "--keys", keys)
	for _, name := range []string{"a", "b"} {
		start(t, bin, filepath.Join(logs, "relay-"+name+".log"), "relay", "--name", name, "--nats", ns.URL,
			"--kafka", kb.Addr, "--key", filepath.Join(keys, "relay-"+name+".key"))
	}
	agg := start(t, bin, filepath.Join(logs, "aggregate.log"), "aggregate", "--kafka", kb.Addr,
		"--key", filepath.Join(keys, runner.AggregatorKey))
	start(t, bin, filepath.Join(logs, "release.log"), "release", "--kafka", kb.Addr, "--clickhouse", ch.TCPAddr)

	out := filepath.Join(dir, "out.tsv")
	run := exec.CommandContext(ctx, bin, "run", "--external", "--no-progress", "--input", input, "--app", "query",
		"--policy", policy, "--k", "3", "--epoch", "kill-test", "--nats", ns.URL, "--kafka", kb.Addr,
		"--clickhouse", ch.TCPAddr, "--keys", keys, "--export", out)
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	// kill the aggregator twice, each time once it has emitted more output
	kills := 0
	for kills < 2 {
		seen := decryptedCount(t, kb.Addr)
		deadline := time.Now().Add(2 * time.Minute)
		for decryptedCount(t, kb.Addr) <= seen && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		agg.stop(syscall.SIGKILL)
		kills++
		time.Sleep(500 * time.Millisecond)
		agg.restart()
	}
	if err := run.Wait(); err != nil {
		b, _ := os.ReadFile(filepath.Join(logs, "aggregate.log"))
		t.Fatalf("run: %v\n%s\naggregator log:\n%s", err, runOut.String(), b)
	}
	t.Logf("killed the aggregator %d times\n%s", kills, runOut.String())

	want, err := truth.Release(input, policy, k, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := truth.ReadExport(out)
	if err != nil {
		t.Fatal(err)
	}
	if d := truth.Diff(want, got, 10); len(d) > 0 {
		t.Fatalf("export after kills differs from the raw-log release (%d vs %d items):\n%v", len(got), len(want), d)
	}

	// fault-free run of the same input, in process: identical bytes (up to
	// the epoch name, which is a column)
	clean := filepath.Join(dir, "clean.tsv")
	if _, err := runner.Run(ctx, runner.Config{Input: input, App: "query", Policy: policy, K: k, Epoch: "kill-test",
		Export: clean, StateDir: filepath.Join(dir, "clean"), ClickHouse: ch.TCPAddr, Database: "clean", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(clean)
	if !bytes.Equal(a, b) {
		t.Fatalf("export after kills (%d bytes) differs from the fault-free export (%d bytes)", len(a), len(b))
	}
	t.Logf("export of %d items identical to the fault-free run and to the raw-log release", len(got))
}
