package main

import (
	"testing"
)

// TestOneSpelling: the keys directory is --keys and the ClickHouse address
// --clickhouse on every command that takes them, the former spellings
// (--dir, --token-keys, --addr) still set the same flag, and --kafka is a
// list on run as on the roles (repeated or comma-separated).
func TestOneSpelling(t *testing.T) {
	root := rootCmd()
	for _, c := range []struct {
		path     []string
		old, now string
	}{
		{[]string{"keys", "generate"}, "dir", "keys"},
		{[]string{"keys", "enroll"}, "dir", "keys"},
		{[]string{"aggregate"}, "token-keys", "keys"},
		{[]string{"clickhouse", "init"}, "addr", "clickhouse"},
	} {
		cmd, _, err := root.Find(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags([]string{"--" + c.old, "/x/y"}); err != nil {
			t.Fatalf("%v --%s: %v", c.path, c.old, err)
		}
		if f := cmd.Flags().Lookup(c.now); f == nil || f.Value.String() != "/x/y" || !f.Changed {
			t.Fatalf("%v: --%s did not set --%s (%v)", c.path, c.old, c.now, f)
		}
	}
	run, cfg := newRunCmd()
	if err := run.ParseFlags([]string{"--kafka", "a:9092,b:9092", "--kafka", "c:9092"}); err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka != "a:9092,b:9092,c:9092" {
		t.Fatalf("run --kafka twice: %q", cfg.Kafka)
	}
	for _, path := range [][]string{{"run"}, {"aggregate"}, {"release"}, {"relay"}} {
		cmd, _, _ := root.Find(path)
		if f := cmd.Flags().Lookup("kafka"); f == nil || f.Value.Type() != "stringSlice" && f.Value.Type() != "strings" {
			t.Errorf("%v --kafka is not a list (%v)", path, f)
		}
	}
}
