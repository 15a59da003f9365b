package attack

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/randomness"
)

// tokenEnv is a real deployment's token side, in process: an embedded
// NATS server with JetStream, a keys directory with the epoch's issuer
// keys, the issuer role (enrollment-list attester, counters in JetStream
// KV), and the randomness service with the epoch open (spent tokens in
// JetStream KV). The aggregator is a Partition the test applies reports
// to (newPartition).
type tokenEnv struct {
	t     *testing.T
	ctx   context.Context
	nc    *nats.Conn
	keys  string
	epoch string
	rs    *randomness.Service
	stops []func()
	creds map[*tokenclient.Client]*arc.Credential // each identity's one ARC credential
}

const tokEpoch = "tok-epoch"

// newTokenEnv starts NATS and the issuer with limits; the randomness
// service is started by startRandomness (with or without tokens).
func newTokenEnv(t *testing.T, limits issuer.Limits) *tokenEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &tokenEnv{t: t, ctx: ctx, keys: filepath.Join(t.TempDir(), "keys"), epoch: tokEpoch,
		creds: map[*tokenclient.Client]*arc.Credential{}}
	ns, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	if e.nc, err = nats.Connect(ns.URL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	if err := keydir.EnsureKeys(e.keys); err != nil {
		t.Fatal(err)
	}
	if err := keydir.EnsureIssuerKeys(e.keys, e.epoch); err != nil {
		t.Fatal(err)
	}
	// the operator opens the epoch at the randomness service's key directory
	rk, err := randomness.Open(filepath.Join(e.keys, keydir.RandomnessKeys), randomness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rk.OpenEpoch(e.epoch); err != nil {
		t.Fatal(err)
	}
	is, err := issuer.New(e.nc, e.keys, limits, quiet())
	if err != nil {
		t.Fatal(err)
	}
	_, keysSubj, _, err := is.Subjects()
	if err != nil {
		t.Fatal(err)
	}
	e.run("issuer", is.Run, keysSubj)
	t.Cleanup(func() { e.stopAll() })
	return e
}

// run runs fn on a context of its own until stopAll or the returned stop;
// it returns once ready (a subject the service subscribes to last) has a
// responder, or, without one, after 100 ms.
func (e *tokenEnv) run(what string, fn func(context.Context) error, ready string) (stop func()) {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			e.t.Errorf("%s: %v", what, err)
		}
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			e.t.Errorf("%s did not stop within 10 s", what)
		}
	}
	e.stops = append(e.stops, stop)
	// its subscriptions are in place before any client asks
	if ready != "" {
		awaitResponders(e.t, e.nc, ready)
	} else {
		time.Sleep(100 * time.Millisecond)
	}
	return stop
}

func (e *tokenEnv) stopAll() {
	for i := len(e.stops) - 1; i >= 0; i-- {
		e.stops[i]()
	}
	e.stops = nil
}

// startRandomness starts a randomness service on the keys directory with
// the epoch open; requireTokens makes it spend one randomness token per
// element (verified under the epoch's randomness-token key only).
func (e *tokenEnv) startRandomness(requireTokens bool) (*randomness.Service, func()) {
	e.t.Helper()
	rs, err := randomness.New(e.ctx, e.nc, e.keys, randomness.Options{}, quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := rs.Keys.OpenEpoch(e.epoch); err != nil {
		e.t.Fatal(err)
	}
	if requireTokens {
		rs.RequireTokens = true
		rs.TokenKeys = func(epoch string) (*token.PrivateKey, error) {
			return keydir.LoadTokenKey(e.keys, token.KindRandomness, epoch)
		}
	}
	e.rs = rs
	return rs, e.run("randomness", rs.Run, protocol.RandomnessPublicKeySubject)
}

// startRandomnessWith starts a randomness service requiring tokens whose
// spent-token store is st.
func (e *tokenEnv) startRandomnessWith(st randomness.SpentStore) func() {
	e.t.Helper()
	rs, err := randomness.New(e.ctx, e.nc, e.keys, randomness.Options{}, quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := rs.Keys.OpenEpoch(e.epoch); err != nil {
		e.t.Fatal(err)
	}
	rs.RequireTokens, rs.Spent = true, st
	rs.TokenKeys = func(epoch string) (*token.PrivateKey, error) {
		return keydir.LoadTokenKey(e.keys, token.KindRandomness, epoch)
	}
	return e.run("randomness", rs.Run, protocol.RandomnessPublicKeySubject)
}

// identity is a fresh Ed25519 identity, enrolled when enroll.
func (e *tokenEnv) identity(enroll bool) *tokenclient.Client {
	e.t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		e.t.Fatal(err)
	}
	if enroll {
		if err := keydir.EnrollIdentity(e.keys, pub); err != nil {
			e.t.Fatal(err)
		}
	}
	return &tokenclient.Client{NC: e.nc, Identity: priv, Timeout: time.Minute, Logger: quiet()}
}

// identities enrolls n fresh identities at once.
func (e *tokenEnv) identities(n int) []*tokenclient.Client {
	e.t.Helper()
	var pubs []ed25519.PublicKey
	var out []*tokenclient.Client
	for range n {
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		pubs = append(pubs, pub)
		out = append(out, &tokenclient.Client{NC: e.nc, Identity: priv, Timeout: time.Minute, Logger: quiet()})
	}
	if err := keydir.EnrollIdentities(e.keys, pubs); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// takeAll asks the issuer for tokens of kind in batches of batch until it
// refuses with token.ErrBudget, as an attacker maximizing its take would,
// and returns what it got.
func (e *tokenEnv) takeAll(c *tokenclient.Client, kind token.Kind, batch int) []*token.Token {
	e.t.Helper()
	var got []*token.Token
	for {
		nonces := make([][32]byte, batch)
		for i := range nonces {
			rand.Read(nonces[i][:])
		}
		toks, err := c.Tokens(e.ctx, kind, e.epoch, nonces)
		if errors.Is(err, token.ErrBudget) {
			if batch == 1 {
				return got
			}
			batch = 1 // the rest one by one
			continue
		}
		if err != nil {
			e.t.Fatalf("tokens: %v", err)
		}
		got = append(got, toks...)
	}
}

// tokenQueue is a TokenSource handing out the tokens it holds, in order.
type tokenQueue struct{ toks []*token.Token }

func (q *tokenQueue) RandomnessTokens(_ context.Context, epoch string, n int) ([]*token.Token, error) {
	if n > len(q.toks) {
		return nil, errors.New("attacker: out of randomness tokens")
	}
	out := q.toks[:n:n]
	q.toks = q.toks[n:]
	return out, nil
}

// omegaClient is the randomness service's client of an attacker holding
// tokens (nil = sending none).
func (e *tokenEnv) omegaClient(ts oprfclient.TokenSource) *oprfclient.Client {
	return &oprfclient.Client{NC: e.nc, Timeout: time.Minute, RetryFor: -1, Tokens: ts}
}

// sealing derives the sealing of artifact q from the service's ω (the
// epoch key read from the key directory, as a victim's client obtains it).
func (e *tokenEnv) sealing(q string, pol star.Policy, k int) *star.Sealing {
	e.t.Helper()
	w, err := KeyDirOmega(filepath.Join(e.keys, keydir.RandomnessKeys))(fxApp, e.epoch, q)
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := star.DeriveSealing(w, fxApp, e.epoch, pol, k)
	if err != nil {
		e.t.Fatal(err)
	}
	return &s
}

// newPartition is an aggregator partition; tokens sets ReportKeys and
// ARCKeys to the epoch's keys of the keys directory.
func (e *tokenEnv) newPartition(tokens bool) *aggregator.Partition {
	key, err := onion.GenerateKeyPair(1)
	if err != nil {
		e.t.Fatal(err)
	}
	p := aggregator.NewPartition(0, 1, []*onion.KeyPair{key})
	if tokens {
		p.ReportKeys = func(epoch string) (*token.PrivateKey, error) {
			return keydir.LoadTokenKey(e.keys, token.KindReport, epoch)
		}
		p.ARCKeys = func(epoch string) (*arc.PrivateKey, error) { return keydir.LoadARCKey(e.keys, epoch) }
	}
	return p
}

// withReportToken sets r.Token to a report token of c bound to r; the
// issuer's refusal is returned.
func (e *tokenEnv) withReportToken(c *tokenclient.Client, r *star.Report) error {
	ub, err := r.UnsignedBytes()
	if err != nil {
		return err
	}
	toks, err := c.Tokens(e.ctx, token.KindReport, e.epoch, [][32]byte{token.ReportNonce(ub)})
	if err != nil {
		return err
	}
	r.Token, err = toks[0].MarshalBinary()
	return err
}

// tagOf is the tag the candidate q has under ω w.
func tagOf(t *testing.T, w []byte, epoch string, pol star.Policy, k int) [32]byte {
	s, err := star.DeriveSealing(w, fxApp, epoch, pol, k)
	if err != nil {
		t.Fatal(err)
	}
	return s.Tag
}

var _ = oprf.OPRFInput
