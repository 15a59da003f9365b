package natsserver

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestStartPersistsStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	t0 := time.Now()
	s, err := Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("embedded nats-server with JetStream ready in %v at %s", time.Since(t0), s.URL)
	if s.Port == 0 {
		t.Fatalf("port not reported")
	}
	nc, err := nats.Connect(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := js.Publish(ctx, "t.x", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	s.Shutdown()
	s.Shutdown() // idempotent

	s2, err := Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown()
	nc2, err := nats.Connect(s2.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	st, err := js2.Stream(ctx, "T")
	if err != nil {
		t.Fatalf("stream not restored: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 10 {
		t.Fatalf("restored %d messages, want 10", info.State.Msgs)
	}
}

func TestStartNeedsDir(t *testing.T) {
	if _, err := Start(context.Background(), ""); err == nil {
		t.Fatal("empty dir accepted")
	}
}
