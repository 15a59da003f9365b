package prio3

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/issuer"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// TestUploadKeepsReportWhileIssuerAway: the helper's issuer gives the
// day's helper token, the leader's issuer is away (a rolling update longer
// than the token client's bound), so the Upload fails. When the leader's
// issuer is back, the next Upload of the day sends the same report with
// the helper token it already has — before, it sharded a new report whose
// helper-token request the helper's issuer refused as over budget (one
// per identity and day), and the day was lost. The upload opens to the
// day's counts; each issuer issued one token.
func TestUploadKeepsReportWhileIssuerAway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second) // bounds the whole test
	defer cancel()
	ns, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub, id, _ := ed25519.GenerateKey(rand.Reader)
	issuers := map[string]*issuer.Service{}
	for _, role := range []string{keydir.RolePrio3Helper, keydir.RolePrio3Leader} {
		keys := filepath.Join(t.TempDir(), role)
		if err := keydir.GenerateRole(keys, role); err != nil {
			t.Fatal(err)
		}
		if err := keydir.EnrollIdentity(keys, pub); err != nil {
			t.Fatal(err)
		}
		if issuers[role], err = issuer.New(nc, keys, issuer.Limits{}, quiet); err != nil {
			t.Fatal(err)
		}
	}
	run := func(s *issuer.Service) {
		s.Ready = make(chan struct{})
		ictx, icancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(ictx) }()
		t.Cleanup(func() { icancel(); <-done })
		select {
		case <-s.Ready:
		case err := <-done:
			t.Fatalf("issuer exited: %v", err)
		case <-ctx.Done():
			t.Fatal("the issuer did not subscribe within the test's deadline")
		}
	}
	run(issuers[keydir.RolePrio3Helper]) // the leader's issuer is away

	w := newWorld(t)
	l := list(t, 10)
	cfg := p3.Config{Kind: p3.KindSumVec, Length: l.Len(), Bits: 4}
	v, err := p3.New("camp", cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := keywords.Day(20421)
	tc := &tokenclient.Client{NC: nc, Identity: id, Timeout: time.Second, Logger: quiet} // gives up after 3 s
	c := &Client{Campaign: "camp", List: l, Config: cfg, Counts: map[keywords.Day]keywords.Sparse{d: {2: 5, 7: 1}},
		HelperToken: func(ctx context.Context, campaign string, day p3.Day, nonce [32]byte) ([]byte, error) {
			return tc.Prio3HelperToken(ctx, campaign, uint32(day), nonce)
		},
		LeaderToken: func(ctx context.Context, campaign string, day p3.Day, nonce [32]byte) ([]byte, error) {
			return tc.Prio3LeaderToken(ctx, campaign, uint32(day), nonce)
		}}
	if _, err := c.Upload(ctx, w.tr, v, d); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("upload with the leader's issuer away: %v, want nats.ErrNoResponders", err)
	}
	run(issuers[keydir.RolePrio3Leader])
	if _, err := c.Upload(ctx, w.tr, v, d); err != nil {
		t.Fatalf("upload once the leader's issuer is back: %v", err)
	}
	if len(w.sent) != 1 {
		t.Fatalf("%d onions sent, want 1", len(w.sent))
	}
	if got := w.open(t, v, w.sent[0], "camp", d); got[2] != 5 || got[7] != 1 {
		t.Fatalf("opened %v, want 5 at 2 and 1 at 7", got)
	}
	h, ld := issuers[keydir.RolePrio3Helper], issuers[keydir.RolePrio3Leader]
	if h.Issued.Load() != 1 || ld.Issued.Load() != 1 || h.RefusedBy(issuer.ReasonBudget) != 0 {
		t.Fatalf("helper issued %d (refused over budget %d), leader issued %d; want 1, 0, 1",
			h.Issued.Load(), h.RefusedBy(issuer.ReasonBudget), ld.Issued.Load())
	}
}
