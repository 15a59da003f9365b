package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/kafka"
)

// TestTopicsFromPipeline: `crowdlog topics -f` on the weekly example
// pipeline creates reports and decrypted on a real Kafka-protocol broker
// with retention ≥ epoch length + grace (the file's default, 2 × (168h +
// 1h) = 338h), and a --retention flag beside it wins. It also creates
// prio3-uploads and prio3-shares with max.message.bytes 2 MiB: a 1.5 MB
// record (a Prio3 upload of the largest class is about 1 MiB) is taken
// there and refused on decrypted (Kafka's default limit, 1,048,588).
func TestTopicsFromPipeline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := kafka.Start(ctx, t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var out bytes.Buffer
	root := rootCmd()
	root.SetOut(&out)
	root.SetArgs([]string{"topics", "--kafka", b.Addr, "-f", "../../testdata/pipelines/query-ftu-k3-weekly.yaml", "--partitions", "3"})
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "topic reports: 3 partitions, retention 338h0m0s") {
		t.Fatalf("output:\n%s", out.String())
	}
	if r, err := kafka.Retention(ctx, b.Addr, "decrypted"); err != nil || r != 338*time.Hour {
		t.Fatalf("decrypted retention %v, %v", r, err)
	}
	for _, topic := range []string{"prio3-uploads", "prio3-shares"} {
		if !strings.Contains(out.String(), "topic "+topic+": 3 partitions, retention 338h0m0s, max.message.bytes 2097152\n") {
			t.Fatalf("no %s line; output:\n%s", topic, out.String())
		}
		if n, err := kafka.MaxMessageBytes(ctx, b.Addr, topic); err != nil || n != 2097152 {
			t.Fatalf("%s max.message.bytes %d, %v; want 2097152", topic, n, err)
		}
	}
	big := make([]byte, 1_500_000)
	for _, c := range []struct {
		topic string
		ok    bool
	}{{"prio3-uploads", true}, {"decrypted", false}} {
		w := &kafkago.Writer{Addr: kafkago.TCP(b.Addr), Topic: c.topic, BatchBytes: 2_000_000, RequiredAcks: kafkago.RequireAll, MaxAttempts: 1}
		err := w.WriteMessages(ctx, kafkago.Message{Key: []byte("campaign"), Value: big})
		w.Close()
		if (err == nil) != c.ok {
			t.Fatalf("1.5 MB record to %s: err %v, want accepted %v", c.topic, err, c.ok)
		}
	}
	root = rootCmd()
	root.SetOut(&out)
	root.SetArgs([]string{"topics", "--kafka", b.Addr, "--retention", "1000h"})
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := kafka.Retention(ctx, b.Addr, "reports"); r != 1000*time.Hour {
		t.Fatalf("reports retention after --retention 1000h: %v", r)
	}
}
