package issuer

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// syncBuffer is a bytes.Buffer safe for the issuer's handler goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestCorruptCounter: a counter that is not a decimal count (a JetStream
// acknowledgement written over it, say) refuses the identity as over
// budget, counts the refusal under ReasonCorruptCounter and logs an error
// that names neither the identity nor the key; other identities are
// served.
func TestCorruptCounter(t *testing.T) {
	e := newEnv(t)
	var logs syncBuffer
	s, stop := e.start(Limits{RandomnessTokens: 5, ReportTokens: 3})
	stop()
	s.Logger = slog.New(slog.NewTextHandler(&logs, nil)) // before Run: no race with its handlers
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	nc := e.conn()
	alice, bob := e.identity(true), e.identity(true)
	key := CounterKey(IdentityOf(alice.Public().(ed25519.PublicKey)), epoch, token.KindRandomness)
	if _, err := s.Counters.Put(e.ctx, key, []byte(`{"stream":"CROWDLOG_RELAY","seq":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := e.tokens(nc, alice, token.KindRandomness, 1); !errors.Is(err, token.ErrBudget) {
		t.Fatalf("corrupt counter: %v, want a budget refusal", err)
	}
	if got := s.RefusedBy(ReasonCorruptCounter); got != 1 {
		t.Fatalf("refused as corrupt-counter = %d, want 1", got)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || strings.Contains(logs.String(), key) || strings.Contains(logs.String(), "CROWDLOG_RELAY") {
		t.Fatalf("log must be one error without key or value:\n%s", logs.String())
	}
	if err := e.tokens(nc, bob, token.KindRandomness, 1); err != nil {
		t.Fatalf("another identity: %v", err)
	}
}

// TestUnavailableCounterStore: with its counters bucket gone (a JetStream
// outage looks the same) the issuer answers the refusal the client maps to
// token.ErrUnavailable and re-sends, counted as internal; once the bucket
// is back the same content is issued and counted once.
func TestUnavailableCounterStore(t *testing.T) {
	e := newEnv(t)
	s, stop := e.start(Limits{RandomnessTokens: 5})
	defer stop()
	nc := e.conn()
	alice := e.identity(true)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(e.ctx, protocol.IssuerCountersBucket); err != nil {
		t.Fatal(err)
	}
	p, b := e.request(alice, token.KindRandomness, 3, now())
	if err := e.ask(nc, b).Err(); !errors.Is(err, token.ErrUnavailable) || s.RefusedBy(ReasonInternal) != 1 {
		t.Fatalf("bucket gone: %v (internal refusals %d), want token.ErrUnavailable once", err, s.RefusedBy(ReasonInternal))
	}
	if _, err := OpenCounters(e.ctx, nc); err != nil { // restored (`crowdlog streams`)
		t.Fatal(err)
	}
	q, err := token.ParseIssueRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	q.Timestamp = now() // the client's re-send: same content, signed anew
	if err := q.Sign(alice); err != nil {
		t.Fatal(err)
	}
	b, _ = q.MarshalBinary()
	resp := e.ask(nc, b)
	if err := resp.Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Finalize(resp.Evaluated, resp.Proof); err != nil || resp.Used != 3 || s.Issued.Load() != 3 {
		t.Fatalf("after the restore: %v, used %d, issued %d; want 3, 3", err, resp.Used, s.Issued.Load())
	}
}
