package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/aggregator/audit"
	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/randomness"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// cluster is what the multi-process tests share: a built crowdlog binary,
// real NATS, kfake and ClickHouse servers, generated keys and a logs folder;
// roles are started as separate processes with start.
type cluster struct {
	t          *testing.T
	bin, dir   string
	keys, logs string
	// NATS URL(s), Kafka bootstrap address(es), ClickHouse native address;
	// nats and kafka are comma-separated seed lists when nodes > 1.
	nats, kafka, chd string
	chDir            string              // the ClickHouse server's directory (users.d)
	nodes            int                 // NATS servers and kfake brokers
	natsCluster      *natsserver.Cluster // when nodes > 1
}

// newCluster starts one NATS server, one kfake broker and ClickHouse
// (stopped at test cleanup) with topics of the given partition count. It
// skips when ClickHouse is missing outside CI and in -short mode.
func newCluster(t *testing.T, ctx context.Context, partitions int) *cluster {
	return newClusterOf(t, ctx, partitions, 1)
}

// newClusterOf is newCluster with nodes NATS servers and nodes kfake
// brokers: nodes ≥ 3 starts a JetStream cluster on loopback
// (natsserver.StartCluster; the relay stream gets 3 replicas) and kfake with
// that many brokers (topics get replication factor 3, nominal in kfake, see
// kafka.EnsureTopics).
func newClusterOf(t *testing.T, ctx context.Context, partitions, nodes int) *cluster {
	t.Helper()
	if _, err := clickhouse.ServerBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ClickHouse is required in CI: %v", err)
		}
		t.Skipf("no ClickHouse: %v", err)
	}
	if testing.Short() {
		t.Skip("multi-process run in -short mode")
	}
	c := &cluster{t: t, bin: buildBinary(t), dir: t.TempDir(), nodes: nodes}
	if nodes > 1 {
		nc, err := natsserver.StartCluster(ctx, filepath.Join(c.dir, "nats"), nodes, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Shutdown)
		c.natsCluster, c.nats = nc, nc.URL()
	} else {
		ns, err := natsserver.Start(ctx, filepath.Join(c.dir, "nats"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ns.Shutdown)
		c.nats = ns.URL
	}
	kb, err := kafka.Config{Dir: filepath.Join(c.dir, "kafka"), Partitions: partitions, SyncWrites: true, Brokers: nodes}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kb.Close)
	if err := kafka.EnsureTopics(ctx, kb.Addr, partitions, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
	// the admin step before any role starts, as a deployment runs it: the
	// roles only look their streams and buckets up
	if out, err := exec.CommandContext(ctx, c.bin, "streams", "--nats", c.nats).CombinedOutput(); err != nil {
		t.Fatalf("streams: %v %s", err, out)
	}
	ch, err := clickhouse.Start(ctx, filepath.Join(c.dir, "clickhouse"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Stop() })
	c.kafka, c.chd, c.chDir = kb.Bootstrap(), ch.TCPAddr, ch.Dir
	c.keys = filepath.Join(c.dir, "keys")
	if out, err := exec.Command(c.bin, "keys", "generate", "--dir", c.keys).CombinedOutput(); err != nil {
		t.Fatalf("keys generate: %v %s", err, out)
	}
	c.logs = filepath.Join(c.dir, "logs")
	os.MkdirAll(c.logs, 0o755)
	return c
}

// openEpoch opens a named epoch in the key directory of the randomness
// service, as the operator does (`crowdlog randomness open-epoch`) before
// clients start: the service refuses named epochs nobody opened.
func (c *cluster) openEpoch(epoch string) {
	c.t.Helper()
	k, err := randomness.Open(filepath.Join(c.keys, keydir.RandomnessKeys), randomness.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	if _, _, err := k.OpenEpoch(epoch); err != nil {
		c.t.Fatalf("open epoch %s: %v", epoch, err)
	}
}

// Test writer of the release role (`crowdlog release` never writes as
// user default).
const testWriter, testWriterPassword = "crowdlog_writer", "test-writer-pw"

// writerArgs creates the release stages' writer on the ClickHouse server
// at addr started in dir (`crowdlog clickhouse init --writer`; its default
// has no password, a test server) and returns the release role's login
// flags: --clickhouse-user and a --config file (mode 0600) holding
// clickhouse-password (a secret, refused on the command line).
func (c *cluster) writerArgs(addr, dir string) []string {
	c.t.Helper()
	secrets := c.t.TempDir()
	pwFile := filepath.Join(secrets, "writer-password")
	if err := os.WriteFile(pwFile, []byte(testWriterPassword+"\n"), 0o600); err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, "clickhouse", "init", "--clickhouse", addr, "--users-d", clickhouse.UsersDir(dir),
		"--insecure-passwordless-default", "--analyst", "", "--writer", testWriter)
	cmd.Env = append(os.Environ(), "CROWDLOG_WRITER_PASSWORD_FILE="+pwFile)
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("clickhouse init --writer: %v %s", err, out)
	}
	login := filepath.Join(secrets, "writer-login.yaml")
	if err := os.WriteFile(login, []byte("clickhouse-password: "+testWriterPassword+"\n"), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return []string{"--clickhouse-user", testWriter, "--config", login}
}

// start runs one role as a process logging to logs/NAME.log.
func (c *cluster) start(name string, args ...string) *proc {
	return start(c.t, c.bin, filepath.Join(c.logs, name+".log"), args...)
}

// checkExport requires the export at out to equal the release computed from
// the raw input log (tests/truth) and to be byte-identical to the export
// of a fault-free in-process run of the same input; what names the run in
// failure messages. It returns the number of released items.
func (c *cluster) checkExport(ctx context.Context, input, out, policy string, k int, epoch string, partitions int, what string) int {
	t := c.t
	t.Helper()
	want, err := truth.Release(input, policy, k, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := truth.ReadExport(out)
	if err != nil {
		t.Fatal(err)
	}
	if d := truth.Diff(want, got, 10); len(d) > 0 {
		t.Fatalf("%s: export differs from the raw-log release (%d vs %d items):\n%v", what, len(got), len(want), d)
	}
	clean := filepath.Join(c.dir, "clean.tsv")
	if _, err := runner.Run(ctx, runner.Config{Input: input, App: "query", Policy: policy, K: k, Epoch: epoch,
		Export: clean, StateDir: filepath.Join(c.dir, "clean"), ClickHouse: c.chd, Database: "clean", Partitions: partitions}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(clean)
	if !bytes.Equal(a, b) {
		t.Fatalf("%s: export (%d bytes) is not byte-identical to the fault-free run's (%d bytes)", what, len(a), len(b))
	}
	return len(got)
}

// audit reconciles the reports and decrypted topics of (app, epoch) with
// the aggregator's key (aggregator/audit).
func (c *cluster) audit(ctx context.Context, app, epoch string) *audit.Result {
	kp, err := onion.LoadKeyPair(filepath.Join(c.keys, keydir.AggregatorKey))
	if err != nil {
		c.t.Fatal(err)
	}
	res, err := audit.Run(ctx, strings.Split(c.kafka, ","), protocol.ReportsTopic, protocol.DecryptedTopic,
		[]*onion.KeyPair{kp}, app, epoch)
	if err != nil {
		c.t.Fatal(err)
	}
	return res
}

// sentReports reads "reports sent N" from a `crowdlog run` summary; -1
// when it is missing.
func sentReports(out string) int {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "reports" && f[1] == "sent" {
			if n, err := strconv.Atoi(f[2]); err == nil {
				return n
			}
		}
	}
	return -1
}

// summaryField is the value of a `crowdlog run` summary line whose first
// word is name (e.g. "tokens" → "on: …" or "off (…)"); "" when missing.
func summaryField(out, name string) string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == name {
			return strings.Join(f[1:], " ")
		}
	}
	return ""
}
