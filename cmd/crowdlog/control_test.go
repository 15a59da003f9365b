package main

import (
	"context"
	"encoding/hex"
	"errors"
	"path/filepath"
	"strings"
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
// partition, of the reports topic and the --pipeline-digest) to a kfake
// cluster; a missing key file, a key without a pipeline and a bad digest
// are usage errors.
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
	digest := strings.Repeat("5a", 32)
	open.SetArgs([]string{"open-epoch", "--kafka", kb.Addr, "--app", "query", "--epoch", "2006-03", "--control-key", filepath.Join(keys, keydir.ControlSignKey),
		"--pipeline-digest", digest})
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
		if err != nil || c.Op != protocol.ControlOpenEpoch || c.Partition != p || c.Partitions != partitions ||
			c.Version != protocol.ControlBound || hex.EncodeToString(c.Pipeline[:]) != digest || c.Topic != protocol.ReportsTopic {
			t.Fatalf("partition %d: %+v, %v", p, c, err)
		}
		if err := c.Verify(pub); err != nil {
			t.Fatalf("partition %d: %v", p, err)
		}
	}
	for what, args := range map[string][]string{
		"a missing --control-key": {"--control-key", filepath.Join(keys, "missing.key"), "--pipeline-digest", digest},
		"no pipeline":             {"--control-key", filepath.Join(keys, keydir.ControlSignKey)},
		"a short digest":          {"--control-key", filepath.Join(keys, keydir.ControlSignKey), "--pipeline-digest", "5a5a"},
	} {
		bad := aggregateCmd()
		bad.SetArgs(append([]string{"close-epoch", "--kafka", kb.Addr, "--epoch", "2006-03"}, args...))
		var ec exitCode
		if err := bad.ExecuteContext(ctx); !errors.As(err, &ec) || ec.code != 2 {
			t.Fatalf("%s: %v, want a usage error", what, err)
		}
	}
}
