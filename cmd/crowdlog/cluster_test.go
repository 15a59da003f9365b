package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsserver"
)

// cluster is what the multi-process tests share: a built crowdlog binary,
// real NATS, kfake and ClickHouse servers, generated keys and a logs folder;
// roles are started as separate processes with start.
type cluster struct {
	t                *testing.T
	bin, dir         string
	keys, logs       string
	nats, kafka, chd string // NATS URL, Kafka address, ClickHouse native address
}

// newCluster starts the servers (stopped at test cleanup) with topics of the
// given partition count. It skips when ClickHouse is missing outside CI and
// in -short mode.
func newCluster(t *testing.T, ctx context.Context, partitions int) *cluster {
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
	c := &cluster{t: t, bin: buildBinary(t), dir: t.TempDir()}
	ns, err := natsserver.Start(ctx, filepath.Join(c.dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	kb, err := kafka.Start(ctx, filepath.Join(c.dir, "kafka"), partitions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kb.Close)
	if err := kafka.EnsureTopics(ctx, kb.Addr, partitions, aggregator.ReportsTopic, aggregator.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
	ch, err := clickhouse.Start(ctx, filepath.Join(c.dir, "clickhouse"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Stop() })
	c.nats, c.kafka, c.chd = ns.URL, kb.Addr, ch.TCPAddr
	c.keys = filepath.Join(c.dir, "keys")
	if out, err := exec.Command(c.bin, "keys", "generate", "--dir", c.keys).CombinedOutput(); err != nil {
		t.Fatalf("keys generate: %v %s", err, out)
	}
	c.logs = filepath.Join(c.dir, "logs")
	os.MkdirAll(c.logs, 0o755)
	return c
}

// start runs one role as a process logging to logs/NAME.log.
func (c *cluster) start(name string, args ...string) *proc {
	return start(c.t, c.bin, filepath.Join(c.logs, name+".log"), args...)
}
