package tokenclient_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// lossyIssuer serves the issuer's subjects over real NATS with real issuer
// Services on one counters bucket, and drops the answers of the issue
// requests it is told to: the request is handled (and counted) by the
// first Service, its answer never sent; later requests are handled by a
// second Service with fresh process state (a restarted issuer).
type lossyIssuer struct {
	first, restarted *issuer.Service
	counters         string // the bucket's key of the client's counter

	mu      sync.Mutex
	handled int // issue requests handled
	drop    int // answers of the first drop requests are not sent
}

func startLossy(t *testing.T, limits issuer.Limits, drop int) (ctx context.Context, nc *nats.Conn, keys string, l *lossyIssuer) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // bounds the whole test
	t.Cleanup(cancel)
	srv, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	keys = t.TempDir()
	if err := keydir.EnsureIssuerKeys(keys, epoch); err != nil {
		t.Fatal(err)
	}
	inc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inc.Close)
	l = &lossyIssuer{drop: drop}
	for _, s := range []**issuer.Service{&l.first, &l.restarted} {
		if *s, err = issuer.New(inc, keys, limits, quiet()); err != nil {
			t.Fatal(err)
		}
		if (*s).Counters, err = issuer.OpenCounters(ctx, inc); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := inc.Subscribe(protocol.IssuerPublicKeySubject, func(m *nats.Msg) {
		b, _ := l.first.HandleKeys(m.Data).MarshalBinary()
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := inc.Subscribe(protocol.IssuerSubject, func(m *nats.Msg) {
		l.mu.Lock()
		l.handled++
		s, send := l.restarted, l.handled > l.drop
		if l.handled == 1 {
			s = l.first
		}
		l.mu.Unlock()
		b, _ := s.Handle(ctx, m.Data).MarshalBinary()
		if send {
			_ = m.Respond(b)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := inc.Flush(); err != nil {
		t.Fatal(err)
	}
	if nc, err = nats.Connect(srv.URL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return ctx, nc, keys, l
}

// handledN is the number of issue requests handled so far.
func (l *lossyIssuer) handledN() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handled
}

// count is the client's count of kind in the counters bucket.
func (l *lossyIssuer) count(t *testing.T, ctx context.Context, c *tokenclient.Client, kind token.Kind) int {
	t.Helper()
	key := issuer.CounterKey(issuer.IdentityOf(c.Identity.Public().(ed25519.PublicKey)), epoch, kind)
	e, err := l.first.Counters.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.Fields(string(e.Value()))[0])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIssueRetryAfterLostAnswer: the issuer handles a batch request and
// counts it, but its answer is lost; the client's request times out and is
// sent again (same blinded elements, signed anew), handled by a restarted
// issuer. The client gets its tokens, which verify, and the batch is
// counted once — for a token batch and for an ARC credential.
func TestIssueRetryAfterLostAnswer(t *testing.T) {
	ctx, nc, keys, l := startLossy(t, issuer.Limits{RandomnessTokens: 5}, 1)
	c := client(t, nc, keys, true)
	// the first answer never comes: how long to wait for it (generous, so
	// that the answer to the retry comes within it on a loaded machine; a
	// later one would only add a retry, checked for below)
	c.Timeout = 5 * time.Second
	toks, err := c.Tokens(ctx, token.KindRandomness, epoch, nonces(5))
	if err != nil {
		t.Fatalf("tokens after a lost answer: %v", err)
	}
	key, _ := keydir.LoadTokenKey(keys, token.KindRandomness, epoch)
	for i, tk := range toks {
		if err := key.Verify(tk); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
	if n := l.count(t, ctx, c, token.KindRandomness); n != 5 || l.handledN() < 2 ||
		l.first.Issued.Load() != 5 || l.restarted.Issued.Load() != 0 || l.restarted.Reissued.Load() < 1 {
		t.Fatalf("counted %d, handled %d requests, issued %d+%d, reissued %d; want 5, ≥ 2, 5+0, ≥ 1",
			n, l.handledN(), l.first.Issued.Load(), l.restarted.Issued.Load(), l.restarted.Reissued.Load())
	}

	// ARC: the first answer lost again (by the restarted issuer this time)
	l.mu.Lock()
	l.drop = l.handled + 1
	l.mu.Unlock()
	cred, err := c.Credential(ctx, epoch)
	if err != nil {
		t.Fatalf("credential after a lost answer: %v", err)
	}
	sk, _ := keydir.LoadARCKey(keys, epoch)
	p, err := cred.Present(rand.Reader, []byte("ctx"), 0, 1)
	if err != nil || sk.VerifyPresentation(p, []byte("ctx"), 1) != nil {
		t.Fatalf("the retried credential does not present: %v", err)
	}
	if n := l.count(t, ctx, c, token.KindARC); n != 1 {
		t.Fatalf("ARC counted %d times, want 1", n)
	}
}

// TestIssueAttemptsBounded: when no answer comes at all the client gives
// up after IssueAttempts requests, saying how long it waited; the issuer
// counted the batch once.
func TestIssueAttemptsBounded(t *testing.T) {
	ctx, nc, keys, l := startLossy(t, issuer.Limits{RandomnessTokens: 5}, 1<<30)
	c := client(t, nc, keys, true)
	c.Timeout = 500 * time.Millisecond
	_, err := c.Tokens(ctx, token.KindRandomness, epoch, nonces(2))
	want := "the issuer answered none of 3 requests on " + protocol.IssuerSubject + " (all the same randomness request of epoch " + epoch + "), each given 500ms (1.5s in all"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no answers: %v, want %q", err, want)
	}
	// the issuer may still be handling the last request: poll (bounded by
	// the test's context)
	for l.handledN() < tokenclient.IssueAttempts && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if n := l.count(t, ctx, c, token.KindRandomness); n != 2 || l.handledN() != tokenclient.IssueAttempts {
		t.Fatalf("counted %d, handled %d; want 2, %d", n, l.handledN(), tokenclient.IssueAttempts)
	}
}

// TestCredentialRetriedAcrossCalls: the issuer counts an ARC credential
// request but its answers are lost until the client gives up; the
// client's next call sends the same request, answered again (the same
// response): the credential comes and presents, counted once. (A new
// request would be refused: one credential per identity and epoch.)
func TestCredentialRetriedAcrossCalls(t *testing.T) {
	ctx, nc, keys, l := startLossy(t, issuer.Limits{}, tokenclient.IssueAttempts)
	c := client(t, nc, keys, true)
	c.Timeout = time.Second
	if _, err := c.Credential(ctx, epoch); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("answers lost: %v, want a timeout", err)
	}
	cred, err := c.Credential(ctx, epoch)
	if err != nil {
		t.Fatalf("credential once the answers come: %v", err)
	}
	sk, _ := keydir.LoadARCKey(keys, epoch)
	p, err := cred.Present(rand.Reader, []byte("ctx"), 0, 1)
	if err != nil || sk.VerifyPresentation(p, []byte("ctx"), 1) != nil {
		t.Fatalf("the credential does not present: %v", err)
	}
	if n := l.count(t, ctx, c, token.KindARC); n != 1 || l.restarted.Reissued.Load() < 1 {
		t.Fatalf("ARC counted %d, reissued %d; want 1, ≥ 1", n, l.restarted.Reissued.Load())
	}
}
