package randomness

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/protocol"
)

// TestServiceOverNATS: ω from the service over a real NATS server equals the
// unblinded OPRF under the epoch key, is the same for every client, differs
// across epochs, survives a service restart (seed on disk), and bad requests
// get a clear error reply.
func TestServiceOverNATS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	ns, err := natsserver.Start(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	seed := filepath.Join(dir, "keys", "randomness.seed")
	serve := func() context.CancelFunc {
		keys, err := LoadOrCreateSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(ctx)
		s := &Service{NC: nc, Keys: keys}
		go s.Run(sctx)
		time.Sleep(50 * time.Millisecond)
		return stop
	}
	stop := serve()
	c := &Client{NC: nc, Batch: 3}
	inputs := [][]byte{protocol.OPRFInput("query", "e1", "a"), protocol.OPRFInput("query", "e1", "b"),
		protocol.OPRFInput("query", "e1", "c"), protocol.OPRFInput("query", "e1", "a")}
	w1, err := c.Evaluate(ctx, "e1", inputs)
	if err != nil {
		t.Fatal(err)
	}
	if len(w1) != 4 || string(w1[0]) != string(w1[3]) || string(w1[0]) == string(w1[1]) {
		t.Fatal("ω must be a function of the input: equal for equal inputs, different otherwise")
	}
	w2, _ := c.Evaluate(ctx, "e2", inputs[:1])
	if string(w2[0]) == string(w1[0]) {
		t.Fatal("ω must differ across epochs")
	}
	stop()
	stop = serve() // restarted service: same seed, same epoch keys
	defer stop()
	w3, err := c.Evaluate(ctx, "e1", inputs[:1])
	if err != nil || string(w3[0]) != string(w1[0]) {
		t.Fatalf("after restart ω changed (%v)", err)
	}
	if _, err := c.Evaluate(ctx, "bad epoch!", inputs[:1]); err == nil || !strings.Contains(err.Error(), "invalid epoch") {
		t.Fatalf("bad epoch: %v", err)
	}
	m, err := nc.RequestWithContext(ctx, Subject, []byte{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := protocol.ParseRandomnessResponse(m.Data)
	if err != nil || resp.Error == "" {
		t.Fatalf("malformed request: want an error reply, got %+v %v", resp, err)
	}
}
