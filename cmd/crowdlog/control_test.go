package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol"
)

// TestControlKeyCmd: `crowdlog keys generate` writes the pipeline
// operator's control key, `crowdlog aggregate open-epoch --control-key`
// writes records signed with it (one per partition, each for its
// partition) to a kfake cluster, and a missing key file is a usage error.
func TestControlKeyCmd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keys := t.TempDir()
	gen := keysCmd()
	gen.SetArgs([]string{"generate", "--keys", keys})
	if err := gen.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	pub, err := keydir.LoadSigningPublic(filepath.Join(keys, keydir.ControlSignKey+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	const partitions = 2
	kb, err := infrakafka.Start(ctx, filepath.Join(t.TempDir(), "kafka"), partitions)
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Close()
	if err := infrakafka.EnsureTopics(ctx, kb.Addr, partitions, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
	open := aggregateCmd()
	open.SetArgs([]string{"open-epoch", "--kafka", kb.Addr, "--app", "query", "--epoch", "2006-03", "--control-key", filepath.Join(keys, keydir.ControlSignKey)})
	if err := open.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	for p := range partitions {
		r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{kb.Addr}, Topic: protocol.ReportsTopic, Partition: p})
		m, err := r.ReadMessage(ctx)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		c, err := protocol.ParseControl(m.Value)
		if err != nil || c.Op != protocol.ControlOpenEpoch || c.Partition != p || c.Partitions != partitions {
			t.Fatalf("partition %d: %+v, %v", p, c, err)
		}
		if err := c.Verify(pub); err != nil {
			t.Fatalf("partition %d: %v", p, err)
		}
	}
	bad := aggregateCmd()
	bad.SetArgs([]string{"close-epoch", "--kafka", kb.Addr, "--epoch", "2006-03", "--control-key", filepath.Join(keys, "missing.key")})
	var ec exitCode
	if err := bad.ExecuteContext(ctx); !errors.As(err, &ec) || ec.code != 2 {
		t.Fatalf("a missing --control-key: %v, want a usage error", err)
	}
}
