package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/gobuild"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/tests/truth"
)

const bundled = "../testdata/aol-top1000.tsv.gz"

// subset writes the first n users of the bundled log to a gzip file.
func subset(t *testing.T, n int) string {
	t.Helper()
	path, err := truth.Subset(bundled, t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin, err := crowdlogBin.Path("../cmd/crowdlog")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// crowdlogBin is cmd/crowdlog built once for the package's tests (removed
// by TestMain).
var crowdlogBin gobuild.Once

func TestMain(m *testing.M) {
	code := m.Run()
	crowdlogBin.Remove()
	os.Exit(code)
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
	parts, err := conn.ReadPartitions(protocol.DecryptedTopic)
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
// a fault-free in-process run byte for byte. The aggregator snapshots its
// partitions (--snapshot-dir, every 500 messages), so a restart restores
// the snapshots written before the kill and replays only what follows.
func TestKillAggregator(t *testing.T) {
	const users, k, policy = 250, 3, "ft-u"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := newCluster(t, ctx, 4)
	input := subset(t, users)
	bin, dir, keys := c.bin, c.dir, c.keys
	logs := c.logs
	c.start("randomness", "randomness", "--nats", c.nats, "--keys", keys)
	for _, name := range []string{"a", "b"} {
		c.start("relay-"+name, "relay", "--name", name, "--nats", c.nats,
			"--kafka", c.kafka, "--key", filepath.Join(keys, "relay-"+name+".key"))
	}
	agg := c.start("aggregate", "aggregate", "--kafka", c.kafka, "--key", filepath.Join(keys, keydir.AggregatorKey),
		"--snapshot-dir", filepath.Join(dir, "snapshots"), "--snapshot-every", "500")
	c.start("release", append([]string{"release", "--kafka", c.kafka, "--clickhouse", c.chd, "--policy", policy, "--k", fmt.Sprint(k)}, c.writerArgs(c.chd, c.chDir)...)...)

	c.openEpoch("kill-test")
	out := filepath.Join(dir, "out.tsv")
	run := exec.CommandContext(ctx, bin, "run", "--external", "--no-progress", "--input", input, "--app", "query",
		"--policy", policy, "--k", "3", "--epoch", "kill-test", "--nats", c.nats, "--kafka", c.kafka,
		"--clickhouse", c.chd, "--keys", keys, "--export", out)
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	// kill the aggregator twice, each time once it has emitted more output;
	// the second time also once a snapshot exists, so the restart restores
	kills := 0
	snaps := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "snapshots", "p*", "*.snap"))
		return len(m)
	}
	for kills < 2 {
		seen := decryptedCount(t, c.kafka)
		deadline := time.Now().Add(2 * time.Minute)
		for (decryptedCount(t, c.kafka) <= seen || kills == 1 && snaps() == 0) && time.Now().Before(deadline) {
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
	aggLog, _ := os.ReadFile(filepath.Join(logs, "aggregate.log"))
	restores := bytes.Count(aggLog, []byte("restored from snapshot"))
	t.Logf("killed the aggregator %d times; partitions restored from snapshots %d times, replayed %d times\n%s", kills,
		restores, bytes.Count(aggLog, []byte("rebuilding partition state by replay")), runOut.String())
	if restores == 0 {
		t.Errorf("no partition was restored from a snapshot after the second kill (%d snapshot files)", snaps())
	}

	n := c.checkExport(ctx, input, out, policy, k, "kill-test", 4, "after kills")
	t.Logf("export of %d items identical to the fault-free run and to the raw-log release", n)

	// the operators' reconciliation agrees: nothing late, missing or orphaned
	aud, err := exec.CommandContext(ctx, bin, "aggregate", "audit", "--kafka", c.kafka, "--key", filepath.Join(keys, keydir.AggregatorKey),
		"--app", "query", "--epoch", "kill-test").CombinedOutput()
	if err != nil {
		t.Fatalf("crowdlog aggregate audit: %v\n%s", err, aud)
	}
	if sent := sentReports(runOut.String()); !strings.Contains(string(aud), fmt.Sprintf("audit: %d distinct reports in Kafka", sent)) {
		t.Fatalf("audit does not count the %d reports sent:\n%s", sent, aud)
	}
	t.Logf("%s", aud)
}
