package kafka

import (
	"context"
	"testing"
	"time"
)

// TestEnsureRetention: on a real Kafka-protocol broker (kfake), a topic
// without its own retention gets retention.ms raised to the epoch's need,
// a shorter one is raised, a longer one is left, and the setting survives
// a second call unchanged.
func TestEnsureRetention(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := Start(ctx, t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := EnsureTopics(ctx, b.Addr, 2, "reports", "decrypted", "long"); err != nil {
		t.Fatal(err)
	}
	week := 168 * time.Hour
	if err := EnsureRetention(ctx, b.Addr, 400*time.Hour, "long"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := EnsureRetention(ctx, b.Addr, week+time.Hour, "reports", "decrypted", "long"); err != nil {
			t.Fatal(err)
		}
	}
	for topic, want := range map[string]time.Duration{"reports": week + time.Hour, "decrypted": week + time.Hour, "long": 400 * time.Hour} {
		got, err := Retention(ctx, b.Addr, topic)
		if err != nil || got != want {
			t.Errorf("topic %s: retention %v, %v; want %v", topic, got, err, want)
		}
	}
}
