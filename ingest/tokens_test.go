package ingest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/randomness"
)

// errFakeBudget is fakeIssuer's budget refusal.
var errFakeBudget = errors.New("fake issuer: budget of the epoch spent")

// fakeIssuer issues real tokens and ARC credentials in process under its
// own keys, with per-kind budgets (0 = none left), counting requests.
type fakeIssuer struct {
	keys   map[token.Kind]*token.PrivateKey
	arcKey *arc.PrivateKey

	mu      sync.Mutex
	budget  map[token.Kind]int
	issued  map[token.Kind]int
	creds   int
	rounds  int
	nilCred bool
	// serverTime is the time spent in the issuer's own work (Issue of
	// tokens and credentials), for benchmarks of the client alone
	serverTime time.Duration
}

func newFakeIssuer(t testing.TB, epoch string, n, d int) *fakeIssuer {
	t.Helper()
	f := &fakeIssuer{keys: map[token.Kind]*token.PrivateKey{}, budget: map[token.Kind]int{token.KindRandomness: n, token.KindReport: d},
		issued: map[token.Kind]int{}}
	for _, k := range []token.Kind{token.KindRandomness, token.KindReport} {
		key, err := token.GenerateKey(k, epoch)
		if err != nil {
			t.Fatal(err)
		}
		f.keys[k] = key
	}
	var err error
	if f.arcKey, err = arc.GenerateKey(rand.Reader); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeIssuer) Tokens(_ context.Context, kind token.Kind, epoch string, nonces [][32]byte) ([]*token.Token, error) {
	f.mu.Lock()
	f.rounds++
	if f.issued[kind]+len(nonces) > f.budget[kind] {
		f.mu.Unlock()
		return nil, fmt.Errorf("%w: %s tokens of epoch %s, budget %d", errFakeBudget, kind, epoch, f.budget[kind])
	}
	f.issued[kind] += len(nonces)
	f.mu.Unlock()
	key := f.keys[kind]
	p, blinded, err := token.NewRequest(key.Public(), kind, epoch, nonces)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	ev, proof, err := key.Issue(blinded)
	f.mu.Lock()
	f.serverTime += time.Since(t0)
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return p.Finalize(ev, proof)
}

func (f *fakeIssuer) Credential(context.Context, string) (*arc.Credential, error) {
	f.mu.Lock()
	f.creds++
	f.mu.Unlock()
	sec, req, err := arc.NewCredentialRequest(rand.Reader)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	resp, err := f.arcKey.Issue(rand.Reader, req)
	f.mu.Lock()
	f.serverTime += time.Since(t0)
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return sec.Finalize(f.arcKey.Public(), req, resp)
}

// countingRandomness is a Randomness that takes one token per input from
// its TokenSource before evaluating (what oprfclient does with Tokens).
type countingRandomness struct {
	localRandomness
	ts    oprfclient.TokenSource
	spent *int
}

func (c countingRandomness) Evaluate(ctx context.Context, epoch string, inputs [][]byte) ([][]byte, error) {
	toks, err := c.ts.RandomnessTokens(ctx, epoch, len(inputs))
	if err != nil {
		return nil, err
	}
	*c.spent += len(toks)
	return c.localRandomness.Evaluate(ctx, epoch, inputs)
}

// TestDeviceTokens: with tokens on, every report carries a report token
// that verifies under the issuer's report key with the nonce bound to the
// report's bytes, ω spends one randomness token per distinct artifact, and
// under FT_u each artifact's reports carry one ARC presentation whose tag
// gives the share's x: the same x for the artifact's repeats and across a
// restart on the same state (the credential is kept 0600 in the state
// directory and fetched once).
func TestDeviceTokens(t *testing.T) {
	dir := t.TempDir()
	var pub capture
	h, c := testClient(t, star.FTu, pub.publish)
	iss := newFakeIssuer(t, c.Epoch, 100, 100)
	spent := 0
	lr := c.Randomness.(localRandomness)
	c.RandomnessWith = func(ts oprfclient.TokenSource) Randomness { return countingRandomness{lr, ts, &spent} }
	open := func() *Device {
		st, err := openDiskStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		return newTokenDevice(c, st, iss)
	}
	ctx := context.Background()
	if n, err := open().Submit(ctx, "query", art("made up one", 0), art("made up two", 1), art("made up one", 2)); err != nil || n != 3 {
		t.Fatalf("first submit: %d, %v", n, err)
	}
	if n, err := open().Submit(ctx, "query", art("made up one", 3)); err != nil || n != 1 {
		t.Fatalf("after restart: %d, %v", n, err)
	}
	if spent != 3 || iss.issued[token.KindRandomness] != 3 {
		t.Fatalf("randomness tokens: %d spent, %d issued; want 3 (one per distinct artifact per Submit)", spent, iss.issued[token.KindRandomness])
	}
	if iss.creds != 1 {
		t.Fatalf("%d ARC credentials fetched, want 1 (kept in the state across the restart)", iss.creds)
	}
	if fi, err := os.Stat(filepath.Join(dir, "arc-e1")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ARC credential file: %v, %v", fi, err)
	}
	rs := pub.reports(t, h)
	if len(rs) != 4 {
		t.Fatalf("%d reports, want 4", len(rs))
	}
	xs := map[[32]byte]map[string]bool{}
	for _, r := range rs {
		tok, err := token.ParseToken(r.Token)
		if err != nil {
			t.Fatalf("report token: %v", err)
		}
		if err := iss.keys[token.KindReport].Verify(tok); err != nil {
			t.Fatalf("report token does not verify: %v", err)
		}
		ub, err := r.UnsignedBytes()
		if err != nil {
			t.Fatal(err)
		}
		if tok.Nonce != token.ReportNonce(ub) {
			t.Fatal("report token not bound to its report")
		}
		if len(r.Presentation) == 0 {
			t.Fatal("FT_u report without an ARC presentation")
		}
		if xs[r.Tag] == nil {
			xs[r.Tag] = map[string]bool{}
		}
		xs[r.Tag][shareX(t, r)] = true
	}
	if len(xs) != 2 || len(xs[rs[0].Tag]) != 1 {
		t.Fatalf("x values per tag %v, want one x per artifact", xs)
	}
	// the x is the ARC tag's, not the user secret's
	for _, r := range rs {
		p, err := arc.ParsePresentation(r.Presentation)
		if err != nil {
			t.Fatal(err)
		}
		w, _ := lr.Evaluate(ctx, c.Epoch, [][]byte{oprf.OPRFInput(c.App.Name(), c.Epoch, "made up one")})
		s, err := star.DeriveSealingIn(w[0], star.Context{App: c.App.Name(), Meaning: apps.Meaning(c.App), Epoch: c.Epoch, Policy: c.Policy, K: c.K})
		if err != nil {
			t.Fatal(err)
		}
		if r.Tag != s.Tag {
			continue
		}
		if err := iss.arcKey.VerifyPresentation(p, s.ARCContext(), 1); err != nil {
			t.Fatalf("presentation does not verify under the artifact's context: %v", err)
		}
		x := s.ShareXFromARC(p.Tag())
		b, _ := x.MarshalBinary()
		if string(b) != shareX(t, r) {
			t.Fatal("share x is not derived from the ARC tag")
		}
	}
}

// TestDeviceTokenBudget: a Submit needing more report tokens than the
// identity has left fails with the issuer's budget error, sends nothing
// and records nothing, so a later Submit within the budget still sends.
func TestDeviceTokenBudget(t *testing.T) {
	var pub capture
	_, c := testClient(t, star.FTa, pub.publish)
	iss := newFakeIssuer(t, c.Epoch, 100, 2)
	d := newTokenDevice(c, newMemStore(), iss)
	ctx := context.Background()
	_, err := d.Submit(ctx, "query", art("a", 0), art("b", 1), art("c", 2))
	if !errors.Is(err, errFakeBudget) {
		t.Fatalf("3 reports on a budget of 2: %v, want the budget error", err)
	}
	if len(pub.onions) != 0 {
		t.Fatalf("%d reports sent after a budget refusal", len(pub.onions))
	}
	if n, err := d.Submit(ctx, "query", art("a", 0), art("b", 1)); err != nil || n != 2 {
		t.Fatalf("within the budget: %d, %v", n, err)
	}
}

// TestNewTokens: a Device from New with Config.Tokens against a real
// issuer and a randomness service requiring tokens (embedded NATS with
// JetStream): it creates its identity key in the state (0600); before the
// operator enrolls it, Submit fails with ErrNotEnrolled; enrolled, its
// reports go out; past its report budget (d = 3) Submit fails at once with
// ErrBudget and sends nothing more.
func TestNewTokens(t *testing.T) {
	url, keys, js := natsDeployment(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const epoch = "e1"
	if err := keydir.EnsureIssuerKeys(keys, epoch); err != nil {
		t.Fatal(err)
	}
	nc, err := natsconn.Connect(url, "roles")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rs, err := randomness.New(ctx, nc, keys, randomness.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rs.Keys.OpenEpoch(epoch); err != nil {
		t.Fatal(err)
	}
	rs.RequireTokens = true
	rs.TokenKeys = func(e string) (*token.PrivateKey, error) { return keydir.LoadTokenKey(keys, token.KindRandomness, e) }
	is, err := issuer.New(nc, keys, issuer.Limits{RandomnessTokens: 10, ReportTokens: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs.Ready, is.Ready = make(chan struct{}), make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{rs.Run, is.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); run(sctx) }()
	}
	defer func() { stop(); wg.Wait() }()
	for _, ready := range []chan struct{}{rs.Ready, is.Ready} { // both subscribed
		select {
		case <-ready:
		case <-time.After(60 * time.Second):
			t.Fatal("the randomness service or the issuer did not subscribe within 60 s")
		}
	}

	state := t.TempDir()
	d, err := New(ctx, Config{StateDir: state, NATS: url, KeysDir: keys, SkipRouteCheck: true, Epoch: epoch, K: 2, Tokens: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	fi, err := os.Stat(filepath.Join(state, IdentityKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity key: %v, %v", fi, err)
	}
	if _, err := d.Submit(ctx, "query", art("made up one", 0)); !errors.Is(err, tokenclient.ErrNotEnrolled) {
		t.Fatalf("before enrollment: %v, want ErrNotEnrolled", err)
	}
	id, err := keydir.EnsureIdentityKey(filepath.Join(state, IdentityKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := keydir.EnrollIdentity(keys, id.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
	if n, err := d.Submit(ctx, "query", art("made up one", 0), art("made up two", 1)); err != nil || n != 2 {
		t.Fatalf("enrolled: %d reports, %v", n, err)
	}
	t0 := time.Now()
	if _, err := d.Submit(ctx, "query", art("made up three", 2), art("made up four", 3)); !errors.Is(err, tokenclient.ErrBudget) {
		t.Fatalf("past the report budget: %v, want ErrBudget", err)
	}
	if err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := streamMsgs(t, js); got != 2 {
		t.Fatalf("relay a's inbox holds %d reports, want 2", got)
	}
	t.Logf("budget refusal after %s", time.Since(t0).Round(time.Millisecond))
}

// TestReplayTokens: a Replay with tokens, 4 workers at once (run with
// -race: the devices present ARC credentials concurrently): every report
// carries a report token bound to it and a presentation that verifies for
// its artifact with its share at the presentation's x; each user fetches
// one credential; and the distinct x per artifact equal the distinct
// users the log gives for it (counted here from the raw lines).
func TestReplayTokens(t *testing.T) {
	users, queries := 6, []string{"made up alpha", "made up beta", "made up gamma"}
	var b strings.Builder
	b.WriteString("AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n")
	want := map[string]int{}
	for u := range users {
		for j, q := range queries[:1+u%len(queries)] {
			fmt.Fprintf(&b, "%d\t%s\t2006-03-01 10:%02d:00\t\t\n", u+1, q, j)
			want[q]++
		}
	}
	path := filepath.Join(t.TempDir(), "log.tsv")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var pub capture
	h, c := testClient(t, star.FTu, pub.publish)
	iss := newFakeIssuer(t, c.Epoch, 1000, 1000)
	spent := 0
	var mu sync.Mutex
	lr := c.Randomness.(localRandomness)
	c.RandomnessWith = func(ts oprfclient.TokenSource) Randomness {
		return lockedRandomness{&mu, countingRandomness{lr, ts, &spent}}
	}
	rp := &Replay{Client: c, Workers: 4, Tokens: func(string) (Issuer, error) { return iss, nil }}
	sum, err := rp.Run(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	rs := pub.reports(t, h)
	if sum.Users != users || len(rs) != 12 || iss.creds != users {
		t.Fatalf("%d users, %d reports, %d credentials; want %d, 12, %d", sum.Users, len(rs), iss.creds, users, users)
	}
	xs := map[[32]byte]map[string]bool{}
	for _, r := range rs {
		tok, err := token.ParseToken(r.Token)
		if err != nil || iss.keys[token.KindReport].Verify(tok) != nil {
			t.Fatalf("report token: %v", err)
		}
		ub, _ := r.UnsignedBytes()
		if tok.Nonce != token.ReportNonce(ub) {
			t.Fatal("report token not bound to its report")
		}
		p, err := arc.ParsePresentation(r.Presentation)
		if err != nil {
			t.Fatal(err)
		}
		if err := iss.arcKey.VerifyPresentation(p, r.ARCContext(), 1); err != nil {
			t.Fatalf("presentation: %v", err)
		}
		if err := r.CheckARCShare(p.Tag()); err != nil {
			t.Fatal(err)
		}
		if xs[r.Tag] == nil {
			xs[r.Tag] = map[string]bool{}
		}
		xs[r.Tag][shareX(t, r)] = true
	}
	got := map[int]int{}
	for _, x := range xs {
		got[len(x)]++
	}
	wantHist := map[int]int{}
	for _, n := range want {
		wantHist[n]++
	}
	if fmt.Sprint(got) != fmt.Sprint(wantHist) {
		t.Fatalf("distinct x per artifact %v, want %v (users per query from the log)", got, wantHist)
	}
}

// lockedRandomness serializes a Randomness whose counter is shared.
type lockedRandomness struct {
	mu *sync.Mutex
	r  Randomness
}

func (l lockedRandomness) Evaluate(ctx context.Context, epoch string, inputs [][]byte) ([][]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Evaluate(ctx, epoch, inputs)
}

// BenchmarkDeviceSubmitTokens: the client's CPU per artifact with tokens
// at batch 100, state in memory, ω from fixedRandomness (the
// OPRF's blind/finalize is BenchmarkClientPerArtifact's share): one
// randomness token per distinct artifact and one report token per report
// (blind, finalize with the batch's DLEQ proof check, bind to the report),
// under FT_u one ARC presentation per artifact (and the epoch's one
// credential, amortized), sealing and three onion layers. The in-process
// issuer's own work (Issue) is subtracted: client-ms/artifact is the
// client's alone; tokens=off is the same device without tokens. Run with
// -cpu 1 for per-core.
func BenchmarkDeviceSubmitTokens(b *testing.B) {
	for _, bc := range []struct {
		pol    star.Policy
		tokens bool
	}{{star.FTu, false}, {star.FTu, true}, {star.FTa, true}} {
		b.Run(fmt.Sprintf("policy=%s/tokens=%v", bc.pol, bc.tokens), func(b *testing.B) {
			const batch = 100
			_, route := newHops(b)
			c := &Client{App: apps.QueryApp{}, Epoch: "e", Policy: bc.pol, K: 5, Randomness: fixedRandomness{}, Route: route,
				Publish: func(context.Context, []byte) error { return nil }}
			iss := newFakeIssuer(b, "e", 1<<30, 1<<30)
			c.RandomnessWith = func(ts oprfclient.TokenSource) Randomness { return tokenPaying{ts} }
			var d *Device
			if bc.tokens {
				d = newTokenDevice(c, newMemStore(), iss)
			} else {
				d = newClientDevice(c, newMemStore())
			}
			arts := make([]apps.Artifact, batch)
			cpu0 := cpuTime()
			b.ResetTimer()
			sent := 0
			for i := 0; i < b.N; i += batch {
				for j := range arts {
					arts[j] = apps.Artifact{Primary: fmt.Sprintf("made up query %d", i+j), Time: t0.Add(time.Duration(i+j) * time.Second)}
				}
				n, err := d.Submit(context.Background(), "query", arts...)
				if err != nil {
					b.Fatal(err)
				}
				sent += n
			}
			// CPU time, not wall time (a shared machine); the issuer's share
			// of it taken as its share of the wall time (one goroutine)
			cpu := cpuTime() - cpu0
			issuerShare := float64(iss.serverTime) / float64(b.Elapsed())
			b.ReportMetric(cpu.Seconds()*1000*(1-issuerShare)/float64(sent), "client-cpu-ms/artifact")
			b.ReportMetric(cpu.Seconds()*1000*issuerShare/float64(sent), "issuer-cpu-ms/artifact")
		})
	}
}

// tokenPaying is fixedRandomness that first takes one randomness token
// per input from its TokenSource (what oprfclient does before sending).
type tokenPaying struct{ ts oprfclient.TokenSource }

func (p tokenPaying) Evaluate(ctx context.Context, epoch string, inputs [][]byte) ([][]byte, error) {
	if _, err := p.ts.RandomnessTokens(ctx, epoch, len(inputs)); err != nil {
		return nil, err
	}
	return fixedRandomness{}.Evaluate(ctx, epoch, inputs)
}
