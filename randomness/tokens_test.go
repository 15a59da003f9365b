package randomness

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	circloprf "github.com/cloudflare/circl/oprf"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/protocol/token/tokentest"
)

// issue mints n tokens of key's kind and epoch as the issuer would
// (blind, Issue, Finalize with the batch proof).
func issue(t testing.TB, key *token.PrivateKey, n int) []*token.Token {
	t.Helper()
	return tokentest.MintN(t, key, n)
}

// tokenQueue is a TokenSource handing out the tokens it holds, in order.
type tokenQueue struct {
	mu   sync.Mutex
	toks []*token.Token
}

func (q *tokenQueue) RandomnessTokens(_ context.Context, epoch string, n int) ([]*token.Token, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n > len(q.toks) {
		return nil, fmt.Errorf("queue: %d tokens left for %d elements", len(q.toks), n)
	}
	out := q.toks[:n:n]
	q.toks = q.toks[n:]
	return out, nil
}

// serveTokens runs a service requiring tokens under the randomness-token
// keys of keys (by epoch) on the key directory dir.
func (e *env) serveTokens(dir string, keys map[string]*token.PrivateKey) (*Service, *Keys, func()) {
	k, err := Open(dir, Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	s := &Service{NC: e.nc, Keys: k, RequireTokens: true, TokenKeys: func(epoch string) (*token.PrivateKey, error) {
		if key := keys[epoch]; key != nil {
			return key, nil
		}
		return nil, fmt.Errorf("no key file for epoch %s", epoch)
	}}
	s.Ready = make(chan struct{})
	sctx, stop := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		if err := s.Run(sctx); err != nil {
			e.t.Error(err)
		}
		close(done)
	}()
	select { // subscriptions in place: no client asks before
	case <-s.Ready:
	case <-done:
		e.t.Fatal("the service stopped before it subscribed")
	case <-time.After(60 * time.Second):
		e.t.Fatal("the service did not subscribe within 60 s")
	}
	return s, k, func() { stop(); <-done; e.nc.Flush() }
}

// TestTokensRequired: a service requiring tokens answers a request paying
// one valid token per element with the ω the epoch key gives (computed
// here with circl directly), and refuses as a whole — evaluating nothing —
// a request with no tokens, too few, tokens of another kind or epoch, or
// a token spent before; a retried request (same bytes) is answered again;
// a restarted service still knows the spent tokens.
func TestTokensRequired(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(e.dir, "keys", "randomness.keys")
	randKey, _ := token.GenerateKey(token.KindRandomness, "e1")
	reportKey, _ := token.GenerateKey(token.KindReport, "e1")
	otherEpoch, _ := token.GenerateKey(token.KindRandomness, "e2")
	keys := map[string]*token.PrivateKey{"e1": randKey, "e2": otherEpoch}
	s, k, stop := e.serveTokens(dir, keys)
	openEpochs(t, k, "e1", "e2")
	inputs := [][]byte{oprf.OPRFInput("query", "e1", "a"), oprf.OPRFInput("query", "e1", "b"), oprf.OPRFInput("query", "e1", "c")}

	// no tokens at all
	_, err := (&oprfclient.Client{NC: e.nc}).Evaluate(e.ctx, "e1", inputs)
	if !errors.Is(err, oprf.ErrTokensMissing) || !strings.Contains(err.Error(), "got 0 for 3 elements") || !strings.Contains(err.Error(), "e1") {
		t.Fatalf("no tokens: %v; want ErrTokensMissing naming the counts and the epoch", err)
	}

	// valid tokens: ω as the epoch key gives it
	fresh := issue(t, randKey, 3)
	got, err := (&oprfclient.Client{NC: e.nc, Tokens: &tokenQueue{toks: fresh}}).Evaluate(e.ctx, "e1", inputs)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := k.Lookup("e1")
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range inputs {
		want, _ := circloprf.NewVerifiableServer(oprf.OPRFSuite, sk).FullEvaluate(in)
		if string(got[i]) != string(want) {
			t.Fatalf("ω %d with tokens differs from the epoch key's evaluation", i)
		}
	}
	if n := s.Evaluated.Load(); n != 3 {
		t.Fatalf("Evaluated = %d, want 3", n)
	}

	refusals := []struct {
		name string
		toks []*token.Token
		want error
	}{
		{"spent tokens", fresh, oprf.ErrTokenSpent},
		{"one spent among fresh", append(issue(t, randKey, 2), fresh[0]), oprf.ErrTokenSpent},
		{"report tokens", issue(t, reportKey, 3), oprf.ErrTokenInvalid},
		{"tokens of another epoch", issue(t, otherEpoch, 3), oprf.ErrTokenInvalid},
		{"one token twice", func() []*token.Token { f := issue(t, randKey, 2); return append(f, f[1]) }(), oprf.ErrTokenInvalid},
	}
	for _, c := range refusals {
		_, err := (&oprfclient.Client{NC: e.nc, Tokens: &tokenQueue{toks: c.toks}}).Evaluate(e.ctx, "e1", inputs)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), "epoch e1") {
			t.Errorf("%s: %v; want %v naming epoch e1", c.name, err, c.want)
		}
	}
	if n := s.Evaluated.Load(); n != 3 {
		t.Fatalf("Evaluated = %d after refusals, want 3 (a refused request evaluates nothing)", n)
	}
	wantRefusals := map[string]int64{ReasonTokensMissing: 1, ReasonTokenSpent: 2, ReasonTokenInvalid: 3}
	if r := s.Refusals(); fmt.Sprint(r) != fmt.Sprint(wantRefusals) {
		t.Fatalf("Refusals = %v, want %v", r, wantRefusals)
	}

	// too few tokens, on the wire
	toks := issue(t, randKey, 1)
	tb, _ := toks[0].MarshalBinary()
	blinded, q, err := oprf.Blind(mustPub(t, sk), "e1", inputs[:2])
	if err != nil {
		t.Fatal(err)
	}
	q.Tokens = [][]byte{tb}
	if resp := request(t, e, q); oprf.TokenRefusal(resp.Refusal) == nil || !strings.Contains(resp.Error, "got 1 for 2 elements") {
		t.Fatalf("1 token for 2 elements: %+v", resp.Refusal)
	}

	// a retried request (its answer lost) is answered again, the same
	two := issue(t, randKey, 2)
	q.Tokens = nil
	for _, tk := range two {
		b, _ := tk.MarshalBinary()
		q.Tokens = append(q.Tokens, b)
	}
	r1, r2 := request(t, e, q), request(t, e, q)
	if r1.Refused() || r2.Refused() || string(r1.Elements[0]) != string(r2.Elements[0]) || string(r1.Elements[1]) != string(r2.Elements[1]) {
		t.Fatalf("retried request: %+v / %+v", r1.Refusal, r2.Refusal)
	}
	if _, err := oprf.Finalize(blinded, r2); err != nil {
		t.Fatal(err)
	}
	// the same tokens with other elements: a double spend
	_, q2, _ := oprf.Blind(mustPub(t, sk), "e1", inputs[:2])
	q2.Tokens = q.Tokens
	if resp := request(t, e, q2); !errors.Is(oprf.TokenRefusal(resp.Refusal), oprf.ErrTokenSpent) {
		t.Fatalf("same tokens, other elements: %+v", resp.Refusal)
	}

	// a restarted service (new spent-store handle) still refuses spent tokens
	stop()
	s2, _, stop2 := e.serveTokens(dir, keys)
	defer stop2()
	if _, err := (&oprfclient.Client{NC: e.nc, Tokens: &tokenQueue{toks: fresh}}).Evaluate(e.ctx, "e1", inputs); !errors.Is(err, oprf.ErrTokenSpent) {
		t.Fatalf("after restart, spent tokens: %v", err)
	}
	// an epoch without a token key: refused as unavailable, nothing spent
	openEpochs(t, k, "e3")
	if _, err := (&oprfclient.Client{NC: e.nc, Tokens: &tokenQueue{toks: issue(t, randKey, 3)}}).Evaluate(e.ctx, "e3", inputs); !errors.Is(err, oprf.ErrTokensUnavailable) {
		t.Fatalf("epoch without token key: %v", err)
	}
	if s2.Evaluated.Load() != 0 {
		t.Fatal("restarted service evaluated refused requests")
	}
}

func mustPub(t *testing.T, sk *circloprf.PrivateKey) *circloprf.PublicKey {
	t.Helper()
	return sk.Public()
}

func request(t *testing.T, e *env, q *oprf.RandomnessRequest) *oprf.RandomnessResponse {
	t.Helper()
	b, err := q.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second) // the service's answer
	defer cancel()
	m, err := e.nc.RequestWithContext(ctx, protocol.RandomnessSubject, b)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := oprf.ParseRandomnessResponse(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestVerifyAll: the parallel verification of a large batch accepts valid
// tokens and names the first bad one.
func TestVerifyAll(t *testing.T) {
	key, _ := token.GenerateKey(token.KindRandomness, "e1")
	toks := issue(t, key, 40)
	if i, err := verifyAll(key, toks); err != nil {
		t.Fatalf("valid batch: token %d: %v", i, err)
	}
	for _, bad := range []int{33, 7} {
		c := *toks[bad]
		c.Authenticator = append([]byte(nil), c.Authenticator...)
		c.Authenticator[0] ^= 1
		toks[bad] = &c
	}
	if i, err := verifyAll(key, toks); !errors.Is(err, token.ErrInvalidToken) || i != 7 {
		t.Fatalf("bad tokens at 7 and 33: got index %d, %v; want 7, ErrInvalidToken", i, err)
	}
}

// TestSpendTTL: in schedule mode the spent-token bucket Run opens forgets
// a spend after 2·(epoch length + grace + skew), when the spend's epoch is
// refused anyway; in named-epoch mode (epochs end only when closed) it
// keeps spends forever.
func TestSpendTTL(t *testing.T) {
	named, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ttl := named.SpendTTL(); ttl != 0 {
		t.Fatalf("named-epoch mode: spend TTL %v, want 0 (forever)", ttl)
	}
	e := newEnv(t)
	k, err := Open(filepath.Join(e.dir, "sched"), Options{EpochLength: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	want := 2 * (24*time.Hour + DefaultGrace + DefaultSkew)
	if ttl := k.SpendTTL(); ttl != want {
		t.Fatalf("schedule mode: spend TTL %v, want %v", ttl, want)
	}
	s := &Service{NC: e.nc, Keys: k, RequireTokens: true,
		TokenKeys: func(string) (*token.PrivateKey, error) { return nil, errors.New("unused") }}
	sctx, stop := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { s.Run(sctx); close(done) }()
	defer func() { stop(); <-done }()
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	for {
		kv, err := js.KeyValue(e.ctx, protocol.SpentTokensBucket)
		if err == nil {
			st, err := kv.Status(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.TTL() != want {
				t.Fatalf("spent-token bucket TTL %v, want %v", st.TTL(), want)
			}
			return
		}
		if e.ctx.Err() != nil {
			t.Fatalf("Run did not create the spent-token bucket: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
