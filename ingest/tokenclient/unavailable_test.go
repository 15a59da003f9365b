package tokenclient_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// outage is a real NATS server (JetStream) whose issuer an operator stops,
// starts again and whose counters bucket it deletes and restores.
type outage struct {
	ctx    context.Context
	inc    *nats.Conn // the issuer's connection
	nc     *nats.Conn // the client's connection
	keys   string
	limits issuer.Limits
}

func startOutage(t *testing.T, limits issuer.Limits) *outage {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second) // bounds the whole test
	t.Cleanup(cancel)
	srv, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	o := &outage{ctx: ctx, keys: t.TempDir(), limits: limits}
	if err := keydir.EnsureIssuerKeys(o.keys, epoch); err != nil {
		t.Fatal(err)
	}
	if o.inc, err = nats.Connect(srv.URL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.inc.Close)
	if o.nc, err = nats.Connect(srv.URL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.nc.Close)
	return o
}

// start runs a fresh issuer process (its own Service, the one counters
// bucket) until its subscriptions reached the server; stop ends it and
// waits until the server dropped its interest.
func (o *outage) start(t *testing.T) (s *issuer.Service, stop func()) {
	t.Helper()
	s, err := issuer.New(o.inc, o.keys, o.limits, quiet())
	if err != nil {
		t.Fatal(err)
	}
	s.Ready = make(chan struct{})
	rctx, cancel := context.WithCancel(o.ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	select {
	case <-s.Ready:
	case err := <-done:
		t.Fatalf("issuer exited: %v", err)
	case <-o.ctx.Done():
		t.Fatal("the issuer did not subscribe within the test's deadline")
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the issuer's Run did not return within 30 s of its context ending")
		}
		// the server has processed the unsubscriptions once it answers a
		// ping sent after them
		if err := o.inc.Flush(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stop)
	return s, stop
}

// count is the identity's count of kind read from the counters bucket
// itself (its value starts with the decimal count).
func (o *outage) count(t *testing.T, c *tokenclient.Client, kind token.Kind) int {
	t.Helper()
	kv, err := issuer.OpenCounters(o.ctx, o.inc)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(o.ctx, issuer.CounterKey(issuer.IdentityOf(c.Identity.Public().(ed25519.PublicKey)), epoch, kind))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.Fields(string(e.Value()))[0])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond every 20 ms for at most 30 s (and the test's
// deadline), failing with what when it never holds.
func (o *outage) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(end) || o.ctx.Err() != nil {
			t.Fatalf("waited 30 s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type tokensResult struct {
	toks []*token.Token
	err  error
}

// tokensAsync runs c.Tokens in the background.
func (o *outage) tokensAsync(c *tokenclient.Client, n int) <-chan tokensResult {
	out := make(chan tokensResult, 1)
	go func() {
		toks, err := c.Tokens(o.ctx, token.KindRandomness, epoch, nonces(n))
		out <- tokensResult{toks, err}
	}()
	return out
}

func (o *outage) result(t *testing.T, ch <-chan tokensResult) []*token.Token {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.toks
	case <-o.ctx.Done():
		t.Fatal("Tokens did not return within the test's deadline")
	}
	return nil
}

// TestIssueRetryNoResponders: a rolling restart of the issuer. No issuer
// runs when the client asks (its keys request, then after a restart its
// issue request, find no responders); one starts 3 s after the client's
// first request failed. The client gets its tokens, which verify, and the
// issuer counted each batch once: the count in the counters bucket is the
// number of nonces asked for, and the budget refuses one more.
func TestIssueRetryNoResponders(t *testing.T) {
	o := startOutage(t, issuer.Limits{RandomnessTokens: 8})
	c := client(t, o.nc, o.keys, true)
	c.Timeout = 0 // DefaultTimeout: 90 s in all
	key, err := keydir.LoadTokenKey(o.keys, token.KindRandomness, epoch)
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	var issued int64
	for phase, n := range []int{5, 3} {
		before := c.Stats().RetriedNoResponders
		ch := o.tokensAsync(c, n)
		asked += n
		o.waitFor(t, "the client's first request to find no issuer", func() bool { return c.Stats().RetriedNoResponders > before })
		time.Sleep(3 * time.Second) // the issuer restarting (no assertion depends on it)
		s, stop := o.start(t)
		toks := o.result(t, ch)
		if len(toks) != n {
			t.Fatalf("phase %d: %d tokens for %d nonces", phase, len(toks), n)
		}
		for i, tk := range toks {
			if err := key.Verify(tk); err != nil {
				t.Fatalf("phase %d: token %d: %v", phase, i, err)
			}
		}
		issued += s.Issued.Load()
		stop() // the next phase's requests find no issuer (keys pinned: the issue request itself)
	}
	if got := o.count(t, c, token.KindRandomness); got != asked || issued != int64(asked) {
		t.Fatalf("counted %d, issued %d; want %d (the nonces asked for)", got, issued, asked)
	}
	_, stop := o.start(t)
	defer stop()
	if _, err := c.Tokens(o.ctx, token.KindRandomness, epoch, nonces(1)); !errors.Is(err, tokenclient.ErrBudget) ||
		!strings.Contains(err.Error(), strconv.Itoa(asked)+" already issued") {
		t.Fatalf("one more token: %v, want the budget refusal with %d already issued", err, asked)
	}
	st := c.Stats()
	t.Logf("retries: %+v", st)
	if st.RetriedNoResponders < 2 || st.GaveUp != 0 {
		t.Fatalf("stats %+v: want ≥ 2 no-responders retries (one per phase), none given up", st)
	}
}

// TestIssueRetryUnavailable: the issuer's counters bucket is gone (the
// operator deletes it; a JetStream outage looks the same to the issuer),
// so the issuer answers "temporarily unavailable"; once the bucket is
// restored the client's re-sent request (same blinded elements) is served
// and counted once.
func TestIssueRetryUnavailable(t *testing.T) {
	o := startOutage(t, issuer.Limits{RandomnessTokens: 5})
	s, _ := o.start(t)
	c := client(t, o.nc, o.keys, true)
	c.Timeout = 0 // DefaultTimeout: 90 s in all
	if _, err := c.Keys(o.ctx, epoch); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(o.inc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(o.ctx, protocol.IssuerCountersBucket); err != nil {
		t.Fatal(err)
	}
	ch := o.tokensAsync(c, 5)
	o.waitFor(t, "the issuer to answer temporarily unavailable", func() bool {
		return s.RefusedBy(issuer.ReasonInternal) >= 1 && c.Stats().RetriedUnavailable >= 1
	})
	if _, err := issuer.OpenCounters(o.ctx, o.inc); err != nil { // the operator restores it (`crowdlog streams`)
		t.Fatal(err)
	}
	toks := o.result(t, ch)
	key, _ := keydir.LoadTokenKey(o.keys, token.KindRandomness, epoch)
	for i, tk := range toks {
		if err := key.Verify(tk); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
	if got := o.count(t, c, token.KindRandomness); got != 5 || s.Issued.Load() != 5 || len(toks) != 5 {
		t.Fatalf("counted %d, issued %d, got %d tokens; want 5 each", got, s.Issued.Load(), len(toks))
	}
	if _, err := c.Tokens(o.ctx, token.KindRandomness, epoch, nonces(1)); !errors.Is(err, tokenclient.ErrBudget) {
		t.Fatalf("one more token: %v, want the budget refusal", err)
	}
	t.Logf("retries: %+v; issuer refused %d as unavailable", c.Stats(), s.RefusedBy(issuer.ReasonInternal))
}

// TestIssueGivesUpWithinBound: an issuer that never comes back. The client
// gives up after IssueAttempts × Timeout (9 s, then 3 s here) with an error that
// names the subject, the reason and what to do: the counters bucket never
// restored (temporarily unavailable), no issuer at all (no responders, on
// the issue subject once keys are pinned, on the keys subject of a Prio3
// issuer).
func TestIssueGivesUpWithinBound(t *testing.T) {
	o := startOutage(t, issuer.Limits{RandomnessTokens: 5})
	_, stop := o.start(t)
	c := client(t, o.nc, o.keys, true)
	c.Timeout = 3 * time.Second // per send: an issuer without its bucket answers in about 1 s
	bound := (tokenclient.IssueAttempts * c.Timeout).String()
	if _, err := c.Keys(o.ctx, epoch); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(o.inc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(o.ctx, protocol.IssuerCountersBucket); err != nil {
		t.Fatal(err)
	}
	_, err = c.Tokens(o.ctx, token.KindRandomness, epoch, nonces(2))
	for _, want := range []string{"the issuer on " + protocol.IssuerSubject + " stayed temporarily unavailable for " + bound, "crowdlog streams", "send again later"} {
		if !errors.Is(err, tokenclient.ErrUnavailable) || !strings.Contains(err.Error(), want) {
			t.Fatalf("bucket never restored: %v, want ErrUnavailable and %q", err, want)
		}
	}
	t.Logf("unavailable: %v", err)

	stop()
	c.Timeout = time.Second // no responders come at once
	bound = (tokenclient.IssueAttempts * c.Timeout).String()
	_, err = c.Tokens(o.ctx, token.KindRandomness, epoch, nonces(2))
	for _, want := range []string{"no issuer answered on " + protocol.IssuerSubject + " for " + bound, "nothing was counted", "`crowdlog issuer` serves " + protocol.IssuerSubject} {
		if !errors.Is(err, nats.ErrNoResponders) || !strings.Contains(err.Error(), want) {
			t.Fatalf("no issuer: %v, want nats.ErrNoResponders and %q", err, want)
		}
	}
	t.Logf("no responders: %v", err)

	_, err = c.Prio3HelperToken(o.ctx, "c1", 1, [32]byte{1})
	if !errors.Is(err, nats.ErrNoResponders) || !strings.Contains(err.Error(), "no issuer answered on "+protocol.IssuerPrio3HelperPublicKeySubject) {
		t.Fatalf("no prio3 helper issuer: %v", err)
	}
	if st := c.Stats(); st.GaveUp != 3 || st.RetriedUnavailable < 1 || st.RetriedNoResponders < 2 {
		t.Fatalf("stats %+v: want 3 given up, ≥ 1 unavailable and ≥ 2 no-responders retries", st)
	}
}

// TestPrio3TokenRetriedAcrossCalls: the Prio3 helper's issuer counts a
// token request but its answers are lost until the client gives up; the
// device's next call for the same report (same nonce) sends the same
// blinded element, which the issuer recognizes and answers again: the
// token comes, counted once. (A fresh blinded element would be refused:
// one helper token per identity and day.)
func TestPrio3TokenRetriedAcrossCalls(t *testing.T) {
	o := startOutage(t, issuer.Limits{})
	keys := t.TempDir() // the helper operator's
	if err := keydir.GenerateRole(keys, keydir.RolePrio3Helper); err != nil {
		t.Fatal(err)
	}
	c := client(t, o.nc, keys, true)
	c.Timeout = time.Second
	s, err := issuer.New(o.inc, keys, issuer.Limits{}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if s.Counters, err = issuer.OpenCountersBucket(o.ctx, o.inc, protocol.IssuerPrio3HelperCountersBucket); err != nil {
		t.Fatal(err)
	}
	if _, err := o.inc.Subscribe(protocol.IssuerPrio3HelperPublicKeySubject, func(m *nats.Msg) {
		b, _ := s.HandleKeys(m.Data).MarshalBinary()
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	handled := 0 // one subscription: its handler runs requests one at a time, in order
	if _, err := o.inc.Subscribe(protocol.IssuerPrio3HelperSubject, func(m *nats.Msg) {
		handled++
		b, _ := s.Handle(o.ctx, m.Data).MarshalBinary()
		if handled > tokenclient.IssueAttempts { // the first call's answers are lost
			_ = m.Respond(b)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := o.inc.Flush(); err != nil {
		t.Fatal(err)
	}
	nonce := [32]byte{7}
	if _, err := c.Prio3HelperToken(o.ctx, "camp", 20421, nonce); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("answers lost: %v, want a timeout", err)
	}
	b, err := c.Prio3HelperToken(o.ctx, "camp", 20421, nonce)
	if err != nil {
		t.Fatalf("the same report's token once the answers come: %v", err)
	}
	tk, err := token.ParseToken(b)
	if err != nil || tk.Nonce != nonce {
		t.Fatalf("token %v, nonce %x", err, tk.Nonce)
	}
	if s.Issued.Load() != 1 || s.Reissued.Load() < 1 || s.RefusedBy(issuer.ReasonBudget) != 0 {
		t.Fatalf("issued %d, reissued %d, refused over budget %d; want 1, ≥ 1, 0", s.Issued.Load(), s.Reissued.Load(), s.RefusedBy(issuer.ReasonBudget))
	}
}
