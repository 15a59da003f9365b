package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/kafka"
)

// TestTopicsFromPipeline: `crowdlog topics -f` on the weekly example
// pipeline creates reports and decrypted on a real Kafka-protocol broker
// with retention ≥ epoch length + grace (the file's default, 2 × (168h +
// 1h) = 338h), and a --retention flag beside it wins.
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
