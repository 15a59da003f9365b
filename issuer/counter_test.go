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
