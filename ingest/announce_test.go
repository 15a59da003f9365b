package ingest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/pipelinespec"
)

// TestDownstreamCountsSigned: an answerer on protocol.PipelineSubject
// that holds the operator's key signs 3 admitted reports for the
// request's nonce, while the JSON beside the signature says 1,000 (what
// anyone on the path could write). A device that verifies counts the
// signed 3; FetchDownstream, which verifies nothing, the JSON's 1,000.
// An answer signed for another nonce is refused as stale.
func TestDownstreamCountsSigned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := natsserver.Start(ctx, filepath.Join(t.TempDir(), "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := natsconn.Connect(ns.URL, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	c := pipelinespec.Context{App: "query", Epoch: "e1"}
	var replay atomic.Bool
	sub, err := nc.Subscribe(protocol.PipelineSubject, func(m *nats.Msg) {
		req := pipelinespec.ParseRequest(m.Data)
		if replay.Load() {
			req.Nonce = make([]byte, pipelinespec.NonceSize) // another request's
		}
		signed, err := pipelinespec.SignAnswer(key, pipelinespec.SignedAnswer{Process: "p1", Nonce: req.Nonce, Context: req.Context,
			Counts: pipelinespec.Counts{Admitted: 3}})
		if err != nil {
			t.Error(err)
			return
		}
		b, _ := json.Marshal(pipelinespec.Announcement{Process: "p1", SignedAnswer: signed,
			Reports: map[string]pipelinespec.Counts{req.Context: {Admitted: 1000}}})
		m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := fetchDownstream(ctx, nc, 5*time.Second, c.Pipeline, c.App, c.Epoch, pub, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if got.Admitted != 3 || got.Processes != 1 {
		t.Fatalf("verified: admitted %d by %d processes, want the signed 3 by 1", got.Admitted, got.Processes)
	}
	un, err := FetchDownstream(ctx, nc, 5*time.Second, c.Pipeline, c.App, c.Epoch)
	if err != nil || un.Admitted != 1000 {
		t.Fatalf("unverified: admitted %d (%v), want the JSON's 1000", un.Admitted, err)
	}
	replay.Store(true)
	if _, err := fetchDownstream(ctx, nc, 2*time.Second, c.Pipeline, c.App, c.Epoch, pub, slog.Default()); !errors.Is(err, ErrAnnouncementStale) {
		t.Fatalf("an answer for another nonce: %v, want ErrAnnouncementStale", err)
	}
}
