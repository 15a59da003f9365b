package tokenclient_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"path/filepath"
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

// TestSplitIssuers: key custody split by verifier. The aggregator's
// operator runs an issuer on its own keys directory (report tokens, ARC)
// and the randomness operator one on its own (randomness tokens, its own
// subjects and counters bucket); neither directory holds the other's key.
// A client gets all three kinds, each verifying under its holder's key
// only, and its pin is the same fingerprint a single issuer's would be.
func TestSplitIssuers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	root := t.TempDir()
	agg, rnd, att := filepath.Join(root, "aggregator"), filepath.Join(root, "randomness"), filepath.Join(root, "attester")
	for dir, role := range map[string]string{agg: keydir.RoleAggregator, rnd: keydir.RoleRandomness, att: keydir.RoleAttester} {
		if err := keydir.GenerateRole(dir, role); err != nil {
			t.Fatal(err)
		}
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	if err := keydir.EnrollIdentity(att, pub); err != nil {
		t.Fatal(err)
	}
	if _, err := keydir.ExportPublic(att, att+".public"); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{agg, rnd} {
		if _, _, err := keydir.ImportPublic(dir, att+".public"); err != nil {
			t.Fatal(err)
		}
		if err := keydir.EnsureIssuerKeys(dir, epoch); err != nil {
			t.Fatal(err)
		}
	}
	services := map[string]*issuer.Service{}
	for _, dir := range []string{agg, rnd} {
		nc, err := nats.Connect(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		s, err := issuer.New(nc, dir, issuer.Limits{RandomnessTokens: 5, ReportTokens: 2}, quiet())
		if err != nil {
			t.Fatal(err)
		}
		services[dir] = s
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { s.Run(rctx); close(done) }()
		defer func() { stop(); <-done }()
	}
	if subj, _, bucket, _ := services[rnd].Subjects(); subj != protocol.IssuerRandomnessSubject || bucket != protocol.IssuerRandomnessCountersBucket {
		t.Fatalf("randomness operator's issuer on %s, %s", subj, bucket)
	}
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	probe := &tokenclient.Client{NC: nc, Timeout: time.Second}
	for {
		if _, err := probe.Keys(ctx, epoch); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("issuers not ready within the test's deadline")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pins := filepath.Join(t.TempDir(), "issuer.pins")
	c := &tokenclient.Client{NC: nc, Identity: priv, Timeout: time.Minute, Logger: quiet(), PinFile: pins}
	rt, err := c.Tokens(ctx, token.KindRandomness, epoch, nonces(5))
	if err != nil {
		t.Fatalf("randomness tokens: %v", err)
	}
	pt, err := c.Tokens(ctx, token.KindReport, epoch, nonces(2))
	if err != nil {
		t.Fatalf("report tokens: %v", err)
	}
	cred, err := c.Credential(ctx, epoch)
	if err != nil {
		t.Fatalf("credential: %v", err)
	}
	rkey, err := keydir.LoadTokenKey(rnd, token.KindRandomness, epoch)
	if err != nil {
		t.Fatal(err)
	}
	pkey, err := keydir.LoadTokenKey(agg, token.KindReport, epoch)
	if err != nil {
		t.Fatal(err)
	}
	akey, err := keydir.LoadARCKey(agg, epoch)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range rt {
		if err := rkey.Verify(tk); err != nil {
			t.Fatal(err)
		}
	}
	for _, tk := range pt {
		if err := pkey.Verify(tk); err != nil {
			t.Fatal(err)
		}
	}
	p, err := cred.Present(rand.Reader, []byte("ctx"), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := akey.VerifyPresentation(p, []byte("ctx"), 1); err != nil {
		t.Fatal(err)
	}
	// budgets per operator; each issuer issued only its kinds
	if _, err := c.Tokens(ctx, token.KindRandomness, epoch, nonces(1)); err == nil {
		t.Error("a 6th randomness token with N = 5")
	}
	if got := services[rnd].Issued.Load(); got != 5 {
		t.Errorf("randomness operator's issuer issued %d, want 5", got)
	}
	if got := services[agg].Issued.Load(); got != 3 {
		t.Errorf("aggregator operator's issuer issued %d, want 3 (2 report tokens, 1 credential)", got)
	}
	// the merged response is what a single issuer holding these keys
	// would answer: same pin fingerprint
	k, _ := c.Keys(ctx, epoch)
	if string(k.Randomness) != string(rkey.Public()) || string(k.Report) != string(pkey.Public()) {
		t.Error("merged keys differ from the operators' keys")
	}
	again := &tokenclient.Client{NC: nc, Identity: priv, Timeout: time.Minute, Logger: quiet(), PinFile: pins}
	if _, err := again.Keys(ctx, epoch); err != nil {
		t.Errorf("restarted client against its pin: %v", err)
	}
}
