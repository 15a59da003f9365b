package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/relays"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func setup(t *testing.T) (jetstream.JetStream, *natsserver.Server) {
	t.Helper()
	ns, err := natsserver.Start(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, ns
}

func subjectCount(t *testing.T, js jetstream.JetStream, subj string) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), relays.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subj]
}

func TestConcurrentPublish(t *testing.T) {
	js, _ := setup(t)
	ctx := context.Background()
	if err := relays.EnsureStream(ctx, js, 0); err != nil {
		t.Fatal(err)
	}
	p := &Publisher{JS: js, Subject: protocol.RelaySubject("a"), MaxPending: 256}
	const goroutines, each = 16, 500
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := p.Publish(ctx, []byte(fmt.Sprintf("layer %d/%d", g, i))); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Pending() != 0 {
		t.Fatalf("Pending = %d after Flush", p.Pending())
	}
	if got := p.Published.Load(); got != goroutines*each {
		t.Fatalf("Published = %d, want %d", got, goroutines*each)
	}
	if n := subjectCount(t, js, protocol.RelaySubject("a")); n != goroutines*each {
		t.Fatalf("stream holds %d, want %d", n, goroutines*each)
	}
	// The same layer again is deduplicated by its Nats-Msg-Id.
	if err := p.Publish(ctx, []byte("layer 0/0")); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := subjectCount(t, js, protocol.RelaySubject("a")); n != goroutines*each {
		t.Fatalf("re-published layer stored twice: %d", n)
	}
}

// Publishing before the stream exists retries until it does.
func TestPublishWaitsForStream(t *testing.T) {
	js, _ := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := &Publisher{JS: js, Subject: protocol.RelaySubject("a"), MaxBackoff: 50 * time.Millisecond, AckTimeout: time.Second, Logger: quiet}
	for i := 0; i < 20; i++ {
		if err := p.Publish(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// past nats.go's own no-responders retries (2 × 250 ms): the
	// Publisher's own retry has started (polled, up to 30 s)
	for end := time.Now().Add(30 * time.Second); p.Retried.Load() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no retry counted within 30 s of publishing without a stream")
		}
	}
	if err := relays.EnsureStream(ctx, js, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := subjectCount(t, js, protocol.RelaySubject("a")); n != 20 {
		t.Fatalf("stream holds %d, want 20", n)
	}
	if p.Retried.Load() == 0 {
		t.Error("no retries counted")
	}
}

// Close with an expired context abandons what the full stream cannot take,
// and says so; Publish and a blocked Publish then return ErrClosed.
func TestCloseAbandonsWhenStreamStaysFull(t *testing.T) {
	js, _ := setup(t)
	ctx := context.Background()
	if err := relays.EnsureStream(ctx, js, 10); err != nil {
		t.Fatal(err)
	}
	p := &Publisher{JS: js, Subject: protocol.RelaySubject("a"), MaxPending: 5, MaxBackoff: 20 * time.Millisecond, Logger: quiet}
	for i := 0; i < 15; i++ {
		if err := p.Publish(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	blocked := make(chan error, 1)
	go func() { blocked <- p.Publish(ctx, []byte("one more")) }()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := p.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush on a full stream = %v, want a deadline error", err)
	}
	short2, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	if err := p.Close(short2); err == nil {
		t.Fatal("Close reported success with layers abandoned")
	}
	if err := <-blocked; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Publish = %v, want ErrClosed", err)
	}
	if err := p.Publish(ctx, []byte("after")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Publish after Close = %v, want ErrClosed", err)
	}
	if got := p.Published.Load() + p.Failed.Load(); got != 15 {
		t.Fatalf("Published %d + Failed %d != 15 accepted", p.Published.Load(), p.Failed.Load())
	}
	if p.Published.Load() != 10 {
		t.Fatalf("Published = %d, want the stream limit 10", p.Published.Load())
	}
}

func TestPublishRejects(t *testing.T) {
	if err := (&Publisher{}).Publish(context.Background(), []byte{1}); err == nil {
		t.Fatal("Publisher without JS accepted a layer")
	}
}
