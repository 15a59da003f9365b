package randomness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/oprf"
)

type env struct {
	t   *testing.T
	ctx context.Context
	nc  *nats.Conn
	dir string
}

func newEnv(t *testing.T) *env {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	ns, err := natsserver.Start(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &env{t: t, ctx: ctx, nc: nc, dir: dir}
}

// serve runs a service on the key directory and returns its keys and a
// stop func that waits until the service unsubscribed.
func (e *env) serve(dir string, o ...Options) (*Keys, func()) {
	var opts Options
	if len(o) > 0 {
		opts = o[0]
	}
	keys, err := Open(dir, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	sctx, stop := context.WithCancel(e.ctx)
	s := &Service{NC: e.nc, Keys: keys}
	done := make(chan struct{})
	go func() { s.Run(sctx); close(done) }()
	time.Sleep(50 * time.Millisecond)
	return keys, func() { stop(); <-done; e.nc.Flush() }
}

// openEpochs opens named epochs as the operator does (Keys.OpenEpoch).
func openEpochs(t *testing.T, keys *Keys, epochs ...string) {
	t.Helper()
	for _, ep := range epochs {
		if _, _, err := keys.OpenEpoch(ep); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServiceOverNATS: ω from the service over a real NATS server is the
// same for every client, differs across epochs, survives a service restart
// (key files on disk), and bad requests get a clear error reply.
func TestServiceOverNATS(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	dir := filepath.Join(e.dir, "keys", "randomness.keys")
	keys, stop := e.serve(dir)
	openEpochs(t, keys, "e1", "e2") // the operator opens named epochs
	c := &oprfclient.Client{NC: e.nc, Batch: 3}
	inputs := [][]byte{oprf.OPRFInput("query", "e1", "a"), oprf.OPRFInput("query", "e1", "b"),
		oprf.OPRFInput("query", "e1", "c"), oprf.OPRFInput("query", "e1", "a")}
	w1, err := c.Evaluate(ctx, "e1", inputs)
	if err != nil {
		t.Fatal(err)
	}
	if len(w1) != 4 || string(w1[0]) != string(w1[3]) || string(w1[0]) == string(w1[1]) {
		t.Fatal("ω must be a function of the input: equal for equal inputs, different otherwise")
	}
	other := &oprfclient.Client{NC: e.nc}
	w1b, err := other.Evaluate(ctx, "e1", inputs[:1])
	if err != nil || string(w1b[0]) != string(w1[0]) {
		t.Fatalf("a second client must get the same ω (%v)", err)
	}
	w2, _ := c.Evaluate(ctx, "e2", inputs[:1])
	if string(w2[0]) == string(w1[0]) {
		t.Fatal("ω must differ across epochs")
	}
	stop()
	_, stop = e.serve(dir) // restarted service: same key files, same epoch keys
	defer stop()
	w3, err := c.Evaluate(ctx, "e1", inputs[:1])
	if err != nil || string(w3[0]) != string(w1[0]) {
		t.Fatalf("after restart ω changed (%v)", err)
	}
	if _, err := c.Evaluate(ctx, "bad epoch!", inputs[:1]); err == nil || !strings.Contains(err.Error(), "invalid epoch") {
		t.Fatalf("bad epoch: %v", err)
	}
	m, err := e.nc.RequestWithContext(ctx, protocol.RandomnessSubject, []byte{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := oprf.ParseRandomnessResponse(m.Data)
	if err != nil || resp.Error == "" {
		t.Fatalf("malformed request: want an error reply, got %+v %v", resp, err)
	}
}

// TestWrongKeyService: a client that pinned the epoch key of service A and
// is then answered by service B (another key directory) gets a clear error — the
// proof fails, and the published key differs from the pinned one — and no ω.
func TestWrongKeyService(t *testing.T) {
	e := newEnv(t)
	keysA, stopA := e.serve(filepath.Join(e.dir, "a", "randomness.keys"))
	pkA, _, err := keysA.OpenEpoch("e1")
	if err != nil {
		t.Fatal(err)
	}
	stopA()
	keysB, stopB := e.serve(filepath.Join(e.dir, "b", "randomness.keys"))
	defer stopB()
	openEpochs(t, keysB, "e1", "e2")
	in := [][]byte{oprf.OPRFInput("query", "e1", "a")}

	pinned := &oprfclient.Client{NC: e.nc, Pinned: map[string][]byte{"e1": pkA}}
	out, err := pinned.Evaluate(e.ctx, "e1", in)
	if !errors.Is(err, oprf.ErrProof) || out != nil || !strings.Contains(err.Error(), "proof failed") {
		t.Fatalf("service under another key: out=%v err=%v, want protocol.ErrProof", out != nil, err)
	}
	if _, err := pinned.PublicKey(e.ctx, "e1"); !errors.Is(err, oprfclient.ErrKeyChanged) {
		t.Fatalf("published key differs from pinned: %v, want oprfclient.ErrKeyChanged", err)
	}

	// trust on first use through a pin file: the next run refuses B's key
	pins := filepath.Join(e.dir, "client", "randomness.pins")
	if err := os.MkdirAll(filepath.Dir(pins), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pins, []byte(fmt.Sprintf("e1 %x\n", pkA)), 0o600); err != nil {
		t.Fatal(err)
	}
	tofu := &oprfclient.Client{NC: e.nc, PinFile: pins}
	if _, err := tofu.Evaluate(e.ctx, "e1", in); !errors.Is(err, oprf.ErrProof) {
		t.Fatalf("pin file ignored: %v", err)
	}
	fresh := &oprfclient.Client{NC: e.nc, PinFile: pins}
	if _, err := fresh.Evaluate(e.ctx, "e2", in); err != nil { // e2 unpinned: pinned now
		t.Fatal(err)
	}
	b, _ := os.ReadFile(pins)
	if strings.Count(string(b), "\n") != 2 || !strings.Contains(string(b), "e2 ") {
		t.Fatalf("pin file after first use of e2: %d lines", strings.Count(string(b), "\n"))
	}
}

// TestClosedEpoch: Keys.Close refuses the epoch with a clear error to
// clients, persists across a restart, and reaches another process sharing
// the key directory.
func TestClosedEpoch(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(e.dir, "keys", "randomness.keys")
	keys, stop := e.serve(dir)
	openEpochs(t, keys, "2006-03", "2006-04")
	c := &oprfclient.Client{NC: e.nc}
	in := [][]byte{oprf.OPRFInput("query", "2006-03", "a")}
	if _, err := c.Evaluate(e.ctx, "2006-03", in); err != nil {
		t.Fatal(err)
	}
	other, err := Open(dir, Options{}) // a second process on the same files
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Epoch("2006-03"); err != nil {
		t.Fatal(err)
	}
	if err := keys.Close("2006-03"); err != nil {
		t.Fatal(err)
	}
	_, err = c.Evaluate(e.ctx, "2006-03", in)
	if !errors.Is(err, protocol.ErrEpochClosed) || !strings.Contains(err.Error(), "2006-03") {
		t.Fatalf("closed epoch: %v, want ErrEpochClosed naming the epoch", err)
	}
	if _, err := (&oprfclient.Client{NC: e.nc}).PublicKey(e.ctx, "2006-03"); !errors.Is(err, protocol.ErrEpochClosed) {
		t.Fatalf("public key of a closed epoch: %v", err)
	}
	if _, err := other.Epoch("2006-03"); !errors.Is(err, protocol.ErrEpochClosed) {
		t.Fatalf("other process (key cached): %v", err)
	}
	if _, err := c.Evaluate(e.ctx, "2006-04", in); err != nil {
		t.Fatalf("open epoch refused: %v", err)
	}
	stop()
	again, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Closed("2006-03") || again.Closed("2006-04") {
		t.Fatal("closed epochs must survive a restart")
	}
	if err := again.Close("2006-03"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, closedFile))
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "2006-03 ") {
		t.Fatalf("Close must be idempotent: file %q", b)
	}
}

// TestClientRetriesUntilServiceAnswers: a request that finds no responder
// (the service is restarting, or its NATS node is away) is re-sent until
// the service answers; with RetryFor < 0 it fails at once.
func TestClientRetriesUntilServiceAnswers(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(e.dir, "keys", "randomness.keys")
	inputs := [][]byte{oprf.OPRFInput("query", "e1", "a")}
	openEpochs(t, open(t, dir, Options{}), "e1", "e2")

	if _, err := (&oprfclient.Client{NC: e.nc, RetryFor: -1}).Evaluate(e.ctx, "e1", inputs); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no service, no retries: %v, want ErrNoResponders", err)
	}
	started := make(chan func(), 1)
	go func() {
		time.Sleep(700 * time.Millisecond)
		_, stop := e.serve(dir)
		started <- stop
	}()
	c := &oprfclient.Client{NC: e.nc, Timeout: 2 * time.Second}
	w, err := c.Evaluate(e.ctx, "e1", inputs)
	(<-started)()
	if err != nil {
		t.Fatalf("Evaluate while the service starts late: %v", err)
	}
	if len(w) != 1 || len(w[0]) == 0 {
		t.Fatalf("got %d outputs", len(w))
	}
	if _, err := (&oprfclient.Client{NC: e.nc, RetryFor: 300 * time.Millisecond}).Evaluate(e.ctx, "e2", inputs); err == nil ||
		!strings.Contains(err.Error(), "no answer within") {
		t.Fatalf("service gone, short retry budget: %v", err)
	}
}
