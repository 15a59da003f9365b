package issuer

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/token"
)

const epoch = "e1"

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type env struct {
	t    testing.TB
	ctx  context.Context
	dir  string // NATS store
	keys string // keys directory
	srv  *natsserver.Server
}

func newEnv(t *testing.T) *env {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // bounds the whole test: servers, requests
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, dir: t.TempDir(), keys: t.TempDir()}
	e.startNATS()
	return e
}

func (e *env) startNATS() {
	srv, err := natsserver.Start(e.ctx, e.dir)
	if err != nil {
		e.t.Fatal(err)
	}
	e.srv = srv
	e.t.Cleanup(srv.Shutdown)
}

func (e *env) conn() *nats.Conn {
	nc, err := nats.Connect(e.srv.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// start runs an issuer process on its own connection until the returned
// stop is called; it returns once the issuer answers key requests.
func (e *env) start(limits Limits) (*Service, func()) {
	nc := e.conn()
	s, err := New(nc, e.keys, limits, quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	if s.Counters, err = OpenCounters(e.ctx, nc); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// ready: its subscription answers (bounded by the test's context)
	for {
		b, _ := (&token.KeysRequest{Epoch: epoch}).MarshalBinary()
		rctx, rcancel := context.WithTimeout(e.ctx, time.Second)
		_, err := nc.RequestWithContext(rctx, protocol.IssuerPublicKeySubject, b)
		rcancel()
		if err == nil {
			break
		}
		select {
		case err := <-done:
			e.t.Fatalf("issuer stopped: %v", err)
		case <-e.ctx.Done():
			e.t.Fatal("issuer not ready before the test's deadline")
		case <-time.After(20 * time.Millisecond):
		}
	}
	return s, func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			e.t.Fatal("issuer did not stop within 30 s of its context ending")
		}
	}
}

func (e *env) identity(enroll bool) ed25519.PrivateKey {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	if enroll {
		if err := keydir.EnrollIdentity(e.keys, pub); err != nil {
			e.t.Fatal(err)
		}
	}
	return priv
}

// request builds a signed request for n tokens of kind, and the client
// state to finalize it.
func (e *env) request(id ed25519.PrivateKey, kind token.Kind, n int, ts time.Time) (*token.Pending, []byte) {
	if err := keydir.EnsureIssuerKeys(e.keys, epoch); err != nil {
		e.t.Fatal(err)
	}
	key, err := keydir.LoadTokenKey(e.keys, kind, epoch)
	if err != nil {
		e.t.Fatal(err)
	}
	nonces := make([][32]byte, n)
	for i := range nonces {
		rand.Read(nonces[i][:])
	}
	p, blinded, err := token.NewRequest(key.Public(), kind, epoch, nonces)
	if err != nil {
		e.t.Fatal(err)
	}
	q := &token.IssueRequest{Kind: kind, Epoch: epoch, Timestamp: ts, Blinded: blinded}
	if err := q.Sign(id); err != nil {
		e.t.Fatal(err)
	}
	b, err := q.MarshalBinary()
	if err != nil {
		e.t.Fatal(err)
	}
	return p, b
}

var tsCounter atomic.Int64

// now is a fresh timestamp per request (distinct milliseconds).
func now() time.Time { return time.Now().Add(time.Duration(tsCounter.Add(1)) * time.Millisecond) }

// ask sends a request over NATS and returns the parsed response.
func (e *env) ask(nc *nats.Conn, b []byte) *token.IssueResponse {
	m, err := nc.RequestWithContext(e.ctx, protocol.IssuerSubject, b)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := token.ParseIssueResponse(m.Data)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// tokens asks for n tokens and checks every issued token verifies under
// the key in the keys directory; it returns the refusal error (nil when
// issued).
func (e *env) tokens(nc *nats.Conn, id ed25519.PrivateKey, kind token.Kind, n int) error {
	p, b := e.request(id, kind, n, now())
	resp := e.ask(nc, b)
	if err := resp.Err(); err != nil {
		return err
	}
	toks, err := p.Finalize(resp.Evaluated, resp.Proof)
	if err != nil {
		e.t.Fatal(err)
	}
	key, _ := keydir.LoadTokenKey(e.keys, kind, epoch)
	for _, tk := range toks {
		if err := key.Verify(tk); err != nil {
			e.t.Fatal(err)
		}
	}
	return nil
}

// TestBudget: N randomness and d report tokens per identity and epoch,
// counted separately per kind and identity; the (N+1)-th is refused with a
// message naming the epoch and the budget; one ARC credential.
func TestBudget(t *testing.T) {
	e := newEnv(t)
	s, stop := e.start(Limits{RandomnessTokens: 5, ReportTokens: 3})
	defer stop()
	nc := e.conn()
	alice, bob := e.identity(true), e.identity(true)
	if err := e.tokens(nc, alice, token.KindRandomness, 3); err != nil {
		t.Fatal(err)
	}
	if err := e.tokens(nc, alice, token.KindRandomness, 2); err != nil {
		t.Fatal(err)
	}
	err := e.tokens(nc, alice, token.KindRandomness, 1)
	if !errors.Is(err, token.ErrBudget) || !strings.Contains(err.Error(), "over budget: epoch e1 allows 5 randomness tokens per identity, 5 already issued") {
		t.Fatalf("6th randomness token: %v", err)
	}
	// a batch that would pass the budget is refused whole
	if err := e.tokens(nc, bob, token.KindRandomness, 6); !errors.Is(err, token.ErrBudget) {
		t.Fatalf("batch of 6 with N = 5: %v", err)
	}
	if err := e.tokens(nc, bob, token.KindRandomness, 5); err != nil {
		t.Fatalf("bob's own budget: %v", err)
	}
	if err := e.tokens(nc, alice, token.KindReport, 3); err != nil {
		t.Fatalf("report tokens count apart from randomness tokens: %v", err)
	}
	if err := e.tokens(nc, alice, token.KindReport, 1); !errors.Is(err, token.ErrBudget) || !strings.Contains(err.Error(), "allows 3 report tokens") {
		t.Fatalf("4th report token: %v", err)
	}
	if got := s.Issued.Load(); got != 5+5+3 {
		t.Fatalf("Issued = %d, want 13", got)
	}
	if got := s.RefusedBy(ReasonBudget); got != 3 {
		t.Fatalf("refused over budget = %d, want 3", got)
	}
	// ARC: one credential per identity and epoch
	if err := e.credential(nc, alice); err != nil {
		t.Fatal(err)
	}
	if err := e.credential(nc, alice); !errors.Is(err, token.ErrBudget) || !strings.Contains(err.Error(), "allows 1 ARC credentials") {
		t.Fatalf("second credential: %v", err)
	}
}

func (e *env) credential(nc *nats.Conn, id ed25519.PrivateKey) error {
	if err := keydir.EnsureIssuerKeys(e.keys, epoch); err != nil {
		e.t.Fatal(err)
	}
	sk, err := keydir.LoadARCKey(e.keys, epoch)
	if err != nil {
		e.t.Fatal(err)
	}
	secrets, req, _ := arc.NewCredentialRequest(rand.Reader)
	rb, _ := req.MarshalBinary()
	q := &token.IssueRequest{Kind: token.KindARC, Epoch: epoch, Timestamp: now(), ARC: rb}
	q.Sign(id)
	b, _ := q.MarshalBinary()
	resp := e.ask(nc, b)
	if err := resp.Err(); err != nil {
		return err
	}
	cresp, err := arc.ParseCredentialResponse(resp.ARC)
	if err != nil {
		e.t.Fatal(err)
	}
	cred, err := secrets.Finalize(sk.Public(), req, cresp)
	if err != nil {
		e.t.Fatal(err)
	}
	pres, err := cred.Present(rand.Reader, []byte("ctx"), 0, 1)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := sk.VerifyPresentation(pres, []byte("ctx"), 1); err != nil {
		e.t.Fatal(err)
	}
	return nil
}

// TestRestart: counts survive an issuer restart and a NATS server restart
// (file storage).
func TestRestart(t *testing.T) {
	e := newEnv(t)
	_, stop := e.start(Limits{RandomnessTokens: 5, ReportTokens: 1})
	alice := e.identity(true)
	if err := e.tokens(e.conn(), alice, token.KindRandomness, 4); err != nil {
		t.Fatal(err)
	}
	stop()
	e.srv.Shutdown()
	e.startNATS()
	_, stop = e.start(Limits{RandomnessTokens: 5, ReportTokens: 1})
	defer stop()
	nc := e.conn()
	if err := e.tokens(nc, alice, token.KindRandomness, 2); !errors.Is(err, token.ErrBudget) || !strings.Contains(err.Error(), "4 already issued") {
		t.Fatalf("after restart, 2 more of N = 5 with 4 issued: %v", err)
	}
	if err := e.tokens(nc, alice, token.KindRandomness, 1); err != nil {
		t.Fatalf("the 5th after restart: %v", err)
	}
}

// TestReplicas: two issuer processes answering concurrent requests of one
// identity issue exactly N tokens together. Each replica gets half of the
// 24 requests (60 tokens), fewer than N = 90, so both issue whatever the
// scheduling, and together they are asked for 120, more than N.
func TestReplicas(t *testing.T) {
	e := newEnv(t)
	const n, batch, requests = 90, 5, 24
	s1, stop1 := e.start(Limits{RandomnessTokens: n})
	defer stop1()
	s2, stop2 := e.start(Limits{RandomnessTokens: n})
	defer stop2()
	alice := e.identity(true)
	reqs := make([][]byte, requests)
	pend := make([]*token.Pending, requests)
	for i := range reqs {
		pend[i], reqs[i] = e.request(alice, token.KindRandomness, batch, now())
	}
	var wg sync.WaitGroup
	resps := make([]*token.IssueResponse, requests)
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := s1
			if i%2 == 1 {
				s = s2
			}
			resps[i] = s.Handle(e.ctx, reqs[i])
		}()
	}
	wg.Wait()
	issued := 0
	for i, r := range resps {
		if err := r.Err(); err != nil {
			if !errors.Is(err, token.ErrBudget) {
				t.Fatalf("request %d: %v", i, err)
			}
			continue
		}
		if _, err := pend[i].Finalize(r.Evaluated, r.Proof); err != nil {
			t.Fatal(err)
		}
		issued += len(r.Evaluated)
	}
	if issued != n {
		t.Fatalf("two replicas issued %d tokens together, budget %d", issued, n)
	}
	if s1.Issued.Load() == 0 || s2.Issued.Load() == 0 {
		t.Fatalf("one replica issued nothing (%d, %d): the test did not race them", s1.Issued.Load(), s2.Issued.Load())
	}
	e1, err := s1.Counters.Get(e.ctx, CounterKey(IdentityOf(alice.Public().(ed25519.PublicKey)), epoch, token.KindRandomness))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := parseCounter(e1.Value()); err != nil || c.used != n {
		t.Fatalf("stored count %d (%v), want %d", c.used, err, n)
	}
}

// TestRefusals: not enrolled, a bad signature, a replay, a stale or future
// timestamp, garbage, an unknown epoch name.
func TestRefusals(t *testing.T) {
	e := newEnv(t)
	s, stop := e.start(Limits{RandomnessTokens: 100, ReportTokens: 100})
	defer stop()
	nc := e.conn()
	if err := e.tokens(nc, e.identity(false), token.KindRandomness, 1); !errors.Is(err, token.ErrNotEnrolled) {
		t.Fatalf("not enrolled: %v", err)
	}
	alice := e.identity(true)
	_, b := e.request(alice, token.KindRandomness, 2, now())
	bad := append([]byte(nil), b...)
	bad[len(bad)-1] ^= 1
	if err := e.ask(nc, bad).Err(); !errors.Is(err, token.ErrBadSignature) {
		t.Fatalf("bad signature: %v", err)
	}
	// another key's signature over alice's identity field
	mallory := e.identity(true)
	_, mb := e.request(mallory, token.KindRandomness, 2, now())
	q, _ := token.ParseIssueRequest(mb)
	q.Identity = alice.Public().(ed25519.PublicKey)
	forged, _ := q.MarshalBinary()
	if err := e.ask(nc, forged).Err(); !errors.Is(err, token.ErrBadSignature) {
		t.Fatalf("forged identity: %v", err)
	}
	if err := e.ask(nc, b).Err(); err != nil {
		t.Fatalf("first send: %v", err)
	}
	if err := e.ask(nc, b).Err(); !errors.Is(err, token.ErrReplay) {
		t.Fatalf("replayed request: %v", err)
	}
	for _, skew := range []time.Duration{-6 * time.Minute, 6 * time.Minute} {
		_, sb := e.request(alice, token.KindRandomness, 1, time.Now().Add(skew))
		if err := e.ask(nc, sb).Err(); !errors.Is(err, token.ErrStale) {
			t.Fatalf("timestamp %s off: %v", skew, err)
		}
	}
	if err := e.ask(nc, []byte("garbage")).Err(); err == nil {
		t.Fatal("garbage accepted")
	}
	// issued count: only the first send
	if got := s.Issued.Load(); got != 2 {
		t.Fatalf("Issued = %d, want 2", got)
	}
	for reason, want := range map[string]int64{ReasonNotEnrolled: 1, ReasonSignature: 2, ReasonReplay: 1, ReasonStale: 2, ReasonMalformed: 1} {
		if got := s.RefusedBy(reason); got != want {
			t.Errorf("refused %s = %d, want %d", reason, got, want)
		}
	}
}

// TestStoresNoElements: the counters bucket holds counts (each with the
// SHA-256 ContentID of its recent requests, for retries) and replay
// markers only: no key or value contains a blinded element or the
// identity key.
func TestStoresNoElements(t *testing.T) {
	e := newEnv(t)
	s, stop := e.start(Limits{RandomnessTokens: 10})
	defer stop()
	alice := e.identity(true)
	_, b := e.request(alice, token.KindRandomness, 3, now())
	q, _ := token.ParseIssueRequest(b)
	if err := e.ask(e.conn(), b).Err(); err != nil {
		t.Fatal(err)
	}
	lister, err := s.Counters.ListKeys(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	if len(keys) != 2 {
		t.Fatalf("bucket keys %v, want one count and one replay marker", keys)
	}
	secrets := [][]byte{q.Identity}
	secrets = append(secrets, q.Blinded...)
	for _, k := range keys {
		ent, err := s.Counters.Get(e.ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		for _, sec := range secrets {
			if strings.Contains(k, string(sec)) || strings.Contains(string(ent.Value()), string(sec)) ||
				strings.Contains(k, hexOf(sec)) || strings.Contains(string(ent.Value()), hexOf(sec)) {
				t.Fatalf("bucket entry %s names a request field", k)
			}
		}
		id := q.ContentID()
		if want := "3 " + hexOf(id[:]); !strings.HasPrefix(k, "replay-") && string(ent.Value()) != want {
			t.Fatalf("count entry %s = %q, want %q (the count and the request's ContentID)", k, ent.Value(), want)
		}
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// BenchmarkHandle is the issuer's cost per token at batch 100 with its
// JetStream counters on an embedded server: signature check, attestation,
// replay marker, budget read, evaluation with one DLEQ proof, and the
// compare-and-set reservation; ns/op is per token.
func BenchmarkHandle(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // bounds the benchmark
	defer cancel()
	srv, err := natsserver.Start(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	e := &env{t: b, ctx: ctx, keys: b.TempDir(), srv: srv}
	s, err := New(nc, e.keys, Limits{RandomnessTokens: 1 << 30}, quiet())
	if err != nil {
		b.Fatal(err)
	}
	if s.Counters, err = OpenCounters(ctx, nc); err != nil {
		b.Fatal(err)
	}
	id := e.identity(true)
	const batch = 100
	var reqs [][]byte
	for i := 0; i < b.N; i += batch {
		_, r := e.request(id, token.KindRandomness, batch, now())
		reqs = append(reqs, r)
	}
	b.ResetTimer()
	for _, r := range reqs {
		if err := s.Handle(ctx, r).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
