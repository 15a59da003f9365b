package main

import (
	"context"
	"crypto/rand"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// TestIssuerCmd: `crowdlog keys enroll --generate` and `crowdlog issuer`
// wired together: the enrolled identity gets its N randomness tokens and
// no more.
func TestIssuerCmd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // bounds the whole test
	defer cancel()
	srv, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	keys := t.TempDir()
	idPath := filepath.Join(t.TempDir(), "id.key")
	enroll := keysCmd()
	enroll.SetArgs([]string{"enroll", "--dir", keys, "--generate", "--out", idPath})
	if err := enroll.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := keydir.LoadSigningKey(idPath)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		c := issuerCmd()
		c.SetArgs([]string{"--nats", srv.URL, "--keys", keys, "--randomness-tokens", "3", "--report-tokens", "1", "--epoch", "e1"})
		done <- c.ExecuteContext(rctx)
	}()
	defer func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("issuer did not stop within 10 s")
		}
	}()
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &tokenclient.Client{NC: nc, Identity: id, Timeout: time.Second}
	nonces := make([][32]byte, 3)
	for i := range nonces {
		rand.Read(nonces[i][:])
	}
	for { // until the issuer answers (each try bounded by Timeout, all by ctx)
		_, err = c.Tokens(ctx, token.KindRandomness, "e1", nonces)
		if err == nil || !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("issuer exited: %v", err)
		case <-ctx.Done():
			t.Fatal("issuer did not answer within the test's deadline")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tokens(ctx, token.KindRandomness, "e1", nonces[:1]); !errors.Is(err, tokenclient.ErrBudget) {
		t.Fatalf("4th token with --randomness-tokens 3: %v", err)
	}
}
