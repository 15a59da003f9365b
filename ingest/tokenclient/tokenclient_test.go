package tokenclient_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol/token"
)

const epoch = "2026-11-24"

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// setup runs a real issuer on an embedded NATS server with JetStream.
func setup(t *testing.T, limits issuer.Limits) (ctx context.Context, nc *nats.Conn, keys string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // bounds the whole test
	t.Cleanup(cancel)
	srv, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	keys = t.TempDir()
	if err := keydir.EnsureIssuerKeys(keys, epoch); err != nil { // the operator opens the epoch
		t.Fatal(err)
	}
	inc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inc.Close)
	s, err := issuer.New(inc, keys, limits, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if s.Counters, err = issuer.OpenCounters(ctx, inc); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(rctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	if nc, err = nats.Connect(srv.URL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// ready once the issuer answers key requests (each try bounded by Timeout)
	probe := &tokenclient.Client{NC: nc, Timeout: time.Second}
	for {
		if _, err := probe.Keys(ctx, epoch); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("issuer not ready within the test's deadline")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ctx, nc, keys
}

func client(t *testing.T, nc *nats.Conn, keys string, enroll bool) *tokenclient.Client {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	if enroll {
		if err := keydir.EnrollIdentity(keys, pub); err != nil {
			t.Fatal(err)
		}
	}
	return &tokenclient.Client{NC: nc, Identity: priv, Timeout: time.Minute, Logger: quiet()}
}

func nonces(n int) [][32]byte {
	out := make([][32]byte, n)
	for i := range out {
		rand.Read(out[i][:])
	}
	return out
}

// TestTokens: an enrolled identity gets tokens that verify under the key
// the randomness service and the aggregator load; report tokens carry the
// report's nonce; the budget is enforced with ErrBudget naming it.
func TestTokens(t *testing.T) {
	ctx, nc, keys := setup(t, issuer.Limits{RandomnessTokens: 1100, ReportTokens: 2})
	c := client(t, nc, keys, true)
	// more than one batch (token.MaxBatch = 1024)
	ns := nonces(1100)
	toks, err := c.Tokens(ctx, token.KindRandomness, epoch, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != len(ns) {
		t.Fatalf("%d tokens for %d nonces", len(toks), len(ns))
	}
	key, err := keydir.LoadTokenKey(keys, token.KindRandomness, epoch)
	if err != nil {
		t.Fatal(err)
	}
	for i, tk := range toks {
		if tk.Nonce != ns[i] {
			t.Fatalf("token %d out of order", i)
		}
		if err := key.Verify(tk); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
	_, err = c.Tokens(ctx, token.KindRandomness, epoch, nonces(1))
	if !errors.Is(err, tokenclient.ErrBudget) || !strings.Contains(err.Error(), "epoch 2026-11-24 allows 1100 randomness tokens per identity, 1100 already issued") {
		t.Fatalf("over budget: %v", err)
	}
	report := []byte("a sealed report without its token")
	rt, err := c.Tokens(ctx, token.KindReport, epoch, [][32]byte{token.ReportNonce(report)})
	if err != nil {
		t.Fatal(err)
	}
	rkey, _ := keydir.LoadTokenKey(keys, token.KindReport, epoch)
	if err := rkey.Verify(rt[0]); err != nil || rt[0].Nonce != token.ReportNonce(report) {
		t.Fatalf("report token: %v", err)
	}
	if err := key.Verify(rt[0]); err == nil {
		t.Fatal("a report token verifies under the randomness key")
	}
}

func TestNotEnrolled(t *testing.T) {
	ctx, nc, keys := setup(t, issuer.Limits{RandomnessTokens: 10})
	c := client(t, nc, keys, false)
	if _, err := c.Tokens(ctx, token.KindRandomness, epoch, nonces(1)); !errors.Is(err, tokenclient.ErrNotEnrolled) {
		t.Fatalf("not enrolled: %v", err)
	}
	if _, err := c.Credential(ctx, epoch); !errors.Is(err, tokenclient.ErrNotEnrolled) {
		t.Fatalf("credential, not enrolled: %v", err)
	}
}

// TestCredential: one ARC credential per identity and epoch; its
// presentations verify under the epoch's ARC key (what the aggregator
// loads).
func TestCredential(t *testing.T) {
	ctx, nc, keys := setup(t, issuer.Limits{})
	c := client(t, nc, keys, true)
	cred, err := c.Credential(ctx, epoch)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := keydir.LoadARCKey(keys, epoch)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cred.Present(rand.Reader, []byte("release context ‖ tag"), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := sk.VerifyPresentation(p, []byte("release context ‖ tag"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Credential(ctx, epoch); !errors.Is(err, tokenclient.ErrBudget) {
		t.Fatalf("second credential: %v", err)
	}
}

// TestConcurrent: one Client used by several goroutines at once signs
// distinct timestamps, so no request of its own is refused as a replay.
func TestConcurrent(t *testing.T) {
	ctx, nc, keys := setup(t, issuer.Limits{RandomnessTokens: 1000})
	c := client(t, nc, keys, true)
	errs := make(chan error, 20)
	for range 20 {
		go func() {
			_, err := c.Tokens(ctx, token.KindRandomness, epoch, nonces(3))
			errs <- err
		}()
	}
	for range 20 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
