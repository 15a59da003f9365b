package ingest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	circloprf "github.com/cloudflare/circl/oprf"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/relays"
)

// capture is a Publish that keeps every onion.
type capture struct {
	mu     sync.Mutex
	onions [][]byte
}

func (c *capture) publish(_ context.Context, o []byte) error {
	c.mu.Lock()
	c.onions = append(c.onions, o)
	c.mu.Unlock()
	return nil
}

// reports peels every captured onion down to its report.
func (c *capture) reports(t *testing.T, h hops) []*star.Report {
	t.Helper()
	var out []*star.Report
	for _, o := range c.onions {
		_, in, err := onion.Peel([]*onion.KeyPair{h.a}, o)
		if err == nil {
			_, in, err = onion.Peel([]*onion.KeyPair{h.b}, in)
		}
		if err == nil {
			_, in, err = onion.Peel([]*onion.KeyPair{h.agg}, in)
		}
		if err != nil {
			t.Fatal(err)
		}
		r, err := star.ParseReport(in)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func shareX(t *testing.T, r *star.Report) string {
	b, err := r.Share.X.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func testClient(t testing.TB, pol star.Policy, pub func(context.Context, []byte) error) (hops, *Client) {
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	h, route := newHops(t)
	return h, &Client{App: apps.QueryApp{}, Epoch: "e1", Policy: pol, K: 2, Randomness: newLocalRandomness(key), Route: route, Publish: pub}
}

var t0 = time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)

func art(q string, min int) apps.Artifact {
	return apps.Artifact{Primary: q, Time: t0.Add(time.Duration(min) * time.Minute)}
}

// TestDeviceRestart: a device restarted on the same state directory keeps
// its user secret (same FT_u share x per artifact) and does not send again
// what it sent before the restart; new instances still go out.
func TestDeviceRestart(t *testing.T) {
	dir := t.TempDir()
	var pub capture
	h, c := testClient(t, star.FTu, pub.publish)
	first := []apps.Artifact{art("made up one", 0), art("made up two", 1), art("made up one", 2), art("made up one", 2)}
	open := func() *Device {
		st, err := openDiskStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		return newClientDevice(c, st)
	}
	d := open()
	if n, err := d.Submit(context.Background(), "query", first...); err != nil || n != 4 {
		t.Fatalf("first submit: %d, %v (want 4 instances)", n, err)
	}
	if n, err := d.Submit(context.Background(), "query", first[:2]...); err != nil || n != 0 {
		t.Fatalf("same artifacts again, same process: %d reports, %v (want 0)", n, err)
	}
	d = open() // the restart: a fresh process on the same directory
	if n, err := d.Submit(context.Background(), "query", first...); err != nil || n != 0 {
		t.Fatalf("after restart, the same artifacts: %d reports, %v (want 0)", n, err)
	}
	// a new instance (another time) and one more equal instance (the
	// call's third "made up one" at minute 2) are new
	more := append(first, art("made up two", 5), art("made up one", 2))
	if n, err := d.Submit(context.Background(), "query", more...); err != nil || n != 2 {
		t.Fatalf("after restart, two new instances among old ones: %d reports, %v (want 2)", n, err)
	}
	rs := pub.reports(t, h)
	if len(rs) != 6 {
		t.Fatalf("%d reports in all, want 6", len(rs))
	}
	xs := map[[32]byte]map[string]bool{}
	for _, r := range rs {
		if xs[r.Tag] == nil {
			xs[r.Tag] = map[string]bool{}
		}
		xs[r.Tag][shareX(t, r)] = true
	}
	if len(xs) != 2 {
		t.Fatalf("%d tags, want 2", len(xs))
	}
	for _, x := range xs {
		if len(x) != 1 {
			t.Fatalf("an artifact's reports carry %d share x values across the restart, want 1 (one user secret per epoch)", len(x))
		}
	}
	// the secret is the one on disk, 32 bytes, 0600
	fi, err := os.Stat(filepath.Join(dir, "secret-e1"))
	if err != nil || fi.Size() != 32 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", fi, err)
	}
	// the record names no artifact
	b, err := os.ReadFile(filepath.Join(dir, "sent", "query_e1_ft-u_2.log"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "made up") || strings.Count(string(b), "i ") != 6 {
		t.Fatalf("sent record: %d instance lines, plaintext %v", strings.Count(string(b), "i "), strings.Contains(string(b), "made up"))
	}
}

// TestDeviceMemoryIsANewUser: without a state directory a restarted device
// is another user: its share x differs (what Memory warns about).
func TestDeviceMemoryIsANewUser(t *testing.T) {
	var pub capture
	h, c := testClient(t, star.FTu, pub.publish)
	for range 2 {
		if n, err := newClientDevice(c, newMemStore()).Submit(context.Background(), "query", art("made up", 0)); err != nil || n != 1 {
			t.Fatalf("%d, %v", n, err)
		}
	}
	rs := pub.reports(t, h)
	if shareX(t, rs[0]) == shareX(t, rs[1]) {
		t.Fatal("two in-memory devices share x")
	}
}

// TestDeviceLimitAcrossCalls: Limit caps the epoch, not each call, and
// survives a restart.
func TestDeviceLimitAcrossCalls(t *testing.T) {
	for _, distinct := range []bool{false, true} {
		t.Run(fmt.Sprint("distinct=", distinct), func(t *testing.T) {
			dir := t.TempDir()
			var pub capture
			h, c := testClient(t, star.FTa, pub.publish)
			c.Limit, c.LimitDistinct = 3, distinct
			open := func() *Device {
				st, err := openDiskStore(dir)
				if err != nil {
					t.Fatal(err)
				}
				return newClientDevice(c, st)
			}
			ctx := context.Background()
			n1, err := open().Submit(ctx, "query", art("a", 0), art("a", 1))
			if err != nil {
				t.Fatal(err)
			}
			n2, err := open().Submit(ctx, "query", art("a", 2), art("b", 3), art("c", 4), art("d", 5))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, r := range pub.reports(t, h) {
				got[fmt.Sprintf("%x", r.Tag[:4])]++
			}
			// expected, by hand: instances: a@0, a@1 then the most recent
			// one of the second call (d@5); distinct: a once, then the two
			// most recent new ones (c, d)
			want1, want2, wantTags := 2, 1, 2
			if distinct {
				want1, want2, wantTags = 1, 2, 3
			}
			if n1 != want1 || n2 != want2 || len(got) != wantTags {
				t.Fatalf("sent %d then %d over %d artifacts, want %d, %d over %d", n1, n2, len(got), want1, want2, wantTags)
			}
		})
	}
}

// TestStateTornLine: a record line cut by a crash is dropped and the next
// append starts on its own line.
func TestStateTornLine(t *testing.T) {
	dir := t.TempDir()
	st, err := openDiskStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	k := sendKey{App: "query", Epoch: "e", Policy: star.FTu, K: 2}
	id1, id2 := [16]byte{1}, [16]byte{2}
	if err := st.record(k, [][16]byte{id1}, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sent", k.file())
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("i 0203")
	f.Close()
	st, _ = openDiskStore(dir)
	if err := st.record(k, [][16]byte{id2}, nil); err != nil {
		t.Fatal(err)
	}
	st, _ = openDiskStore(dir)
	r, err := st.sent(k)
	if err != nil || r.total != 2 || r.instances[id1] != 1 || r.instances[id2] != 1 {
		t.Fatalf("after a torn line: %+v, %v", r, err)
	}
	// a damaged line in the middle is an error that says what to do
	os.WriteFile(path, []byte("i zz\ni 01010101010101010101010101010101\n"), 0o600)
	st, _ = openDiskStore(dir)
	if _, err := st.sent(k); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("damaged record: %v", err)
	}
	// a damaged secret is refused, not replaced
	os.WriteFile(filepath.Join(dir, "secret-e"), []byte("short"), 0o600)
	if _, err := st.secret("e"); err == nil || !strings.Contains(err.Error(), "count this device twice") {
		t.Fatalf("damaged secret: %v", err)
	}
}

// pinStub is a Randomness that also shows a public key.
type pinStub struct {
	localRandomness
	key []byte
}

func (p *pinStub) PublicKey(context.Context, string) ([]byte, error) { return p.key, nil }

func TestPinRandomnessKey(t *testing.T) {
	st, _ := openDiskStore(t.TempDir())
	p := &pinStub{key: []byte("key one, 32 bytes long, made up.")}
	ctx := context.Background()
	if err := pinRandomnessKey(ctx, p, st, "e"); err != nil {
		t.Fatal(err)
	}
	if err := pinRandomnessKey(ctx, p, st, "e"); err != nil {
		t.Fatalf("same key again: %v", err)
	}
	p.key = []byte("key two, 32 bytes long, made up.")
	if err := pinRandomnessKey(ctx, p, st, "e"); !errors.Is(err, ErrRandomnessKeyChanged) {
		t.Fatalf("changed key: %v", err)
	}
	if err := pinRandomnessKey(ctx, p, st, "e2"); err != nil {
		t.Fatalf("another epoch pins its own key: %v", err)
	}
}

func TestNewConfigErrors(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Epoch: "bad epoch", K: 2, Memory: true}, "Config.Epoch"},
		{Config{Epoch: "e", K: 0, Memory: true}, "Config.K"},
		{Config{Epoch: "e", K: 2}, "Config.StateDir"},
		{Config{Epoch: "e", K: 2, Memory: true}, "Config.KeysDir"},
		{Config{Epoch: "e", K: 2, StateDir: t.TempDir()}, "give KeysDir"},
	} {
		if _, err := New(ctx, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
}

// fixedRandomness returns ω = SHA-512-sized derivations of the input
// without the OPRF (the benchmark's stand-in: it measures the client's
// sealing and wrapping, not the service).
type fixedRandomness struct{}

func (fixedRandomness) Evaluate(_ context.Context, _ string, inputs [][]byte) ([][]byte, error) {
	out := make([][]byte, len(inputs))
	for i, in := range inputs {
		a := sha256.Sum256(in)
		b := sha256.Sum256(a[:])
		out[i] = append(a[:], b[:]...)
	}
	return out, nil
}

// BenchmarkDeviceSubmit: artifacts/s of Device.Submit — state (ids,
// record), sealing and three onion layers; ω is precomputed-style
// (fixedRandomness) and publishing discards, so this is the client's CPU
// per artifact; with state=disk every Submit appends to the record and
// fsyncs it (batch=1: one fsync per artifact). With OPRF, the client's blind and finalize add
// BenchmarkClientPerArtifact's share. Run with -cpu 1 for per-core.
func BenchmarkDeviceSubmit(b *testing.B) {
	for _, bc := range []struct {
		state string
		batch int
	}{{"disk", 1}, {"disk", 100}, {"memory", 100}} {
		batch := bc.batch
		b.Run(fmt.Sprintf("state=%s/batch=%d", bc.state, batch), func(b *testing.B) {
			_, route := newHops(b)
			c := &Client{App: apps.QueryApp{}, Epoch: "e", Policy: star.FTu, K: 5, Randomness: fixedRandomness{}, Route: route,
				Publish: func(context.Context, []byte) error { return nil }}
			var st store = newMemStore()
			if bc.state == "disk" {
				ds, err := openDiskStore(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				st = ds
			}
			d := newClientDevice(c, st)
			arts := make([]apps.Artifact, batch)
			b.ResetTimer()
			sent := 0
			for i := 0; i < b.N; i += batch {
				for j := range arts {
					arts[j] = apps.Artifact{Primary: fmt.Sprintf("made up query %d", (i+j)%1000), Time: t0.Add(time.Duration(i+j) * time.Second)}
				}
				n, err := d.Submit(context.Background(), "query", arts...)
				if err != nil {
					b.Fatal(err)
				}
				sent += n
			}
			b.ReportMetric(float64(sent)/b.Elapsed().Seconds(), "artifacts/s")
		})
	}
}

// natsDeployment is an embedded NATS with the relay stream and a keys
// directory: what New needs, without relays consuming.
func natsDeployment(t testing.TB) (url, keys string, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	ns, err := natsserver.Start(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	keys = filepath.Join(dir, "keys")
	if err := keydir.EnsureKeys(keys); err != nil {
		t.Fatal(err)
	}
	nc, err := natsconn.Connect(ns.URL, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if err := relays.EnsureStream(ctx, js, 0); err != nil {
		t.Fatal(err)
	}
	return ns.URL, keys, js
}

func streamMsgs(t testing.TB, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), relays.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestNewPublishes: a Device from New publishes to relay a's inbox, pins
// the route keys in its state, and after a restart without KeysDir sends
// nothing it sent before.
func TestNewPublishes(t *testing.T) {
	url, keys, js := natsDeployment(t)
	state := t.TempDir()
	ctx := context.Background()
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	cfg := Config{StateDir: state, NATS: url, KeysDir: keys, SkipRouteCheck: true,
		Randomness: newLocalRandomness(key), Epoch: "e1", K: 2}
	arts := []apps.Artifact{art("made up one", 0), art("made up two", 1)}
	for run, want := range []int{2, 0} {
		d, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		n, err := d.Submit(ctx, "query", arts...)
		if err != nil || n != want {
			t.Fatalf("run %d: %d reports, %v (want %d)", run, n, err, want)
		}
		if err := d.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if got := streamMsgs(t, js); got != 2 {
			t.Fatalf("run %d: relay a's inbox holds %d reports, want 2", run, got)
		}
		cfg.KeysDir = "" // the restart uses the pinned route
	}
	// no randomness configured: the device uses the randomness service's
	// client (oprfclient) on its own NATS connection
	if d, err := New(ctx, Config{StateDir: state, NATS: url, SkipRouteCheck: true, Epoch: "e1", K: 2}); err != nil {
		t.Fatalf("New without a randomness client: %v", err)
	} else if c, err := d.newClient("query"); err != nil {
		t.Fatal(err)
	} else if _, ok := c.Randomness.(*oprfclient.Client); !ok {
		t.Fatalf("default randomness is %T, want *oprfclient.Client", c.Randomness)
	} else if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// the route check runs by default: no relay answers here, a warning only
	d, err := New(ctx, Config{StateDir: state, NATS: url, Randomness: newLocalRandomness(key), Epoch: "e1", K: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Submit(ctx, "no-such-app", arts...); err == nil {
		t.Fatal("unknown app accepted")
	}
	// one device at a time per state directory: a second is refused while
	// the first is open, and accepted once it closed
	if d2, err := New(ctx, Config{StateDir: state, NATS: url, SkipRouteCheck: true, Randomness: newLocalRandomness(key), Epoch: "e1", K: 2}); !errors.Is(err, ErrStateInUse) {
		if d2 != nil {
			d2.Close(ctx)
		}
		t.Fatalf("second device on one state: %v, want ErrStateInUse", err)
	}
	d.Close(ctx)
	d3, err := New(ctx, Config{StateDir: state, NATS: url, SkipRouteCheck: true, Randomness: newLocalRandomness(key), Epoch: "e1", K: 2})
	if err != nil {
		t.Fatalf("device after the first closed: %v", err)
	}
	d3.Close(ctx)
}

// BenchmarkDeviceSubmitNATS: Device.Submit through New, publishing to an
// embedded NATS JetStream inbox (flow control included, Flush at the
// end), state on disk, ω from fixedRandomness. Run with -cpu 1.
func BenchmarkDeviceSubmitNATS(b *testing.B) {
	url, keys, _ := natsDeployment(b)
	ctx := context.Background()
	d, err := New(ctx, Config{StateDir: b.TempDir(), NATS: url, KeysDir: keys, SkipRouteCheck: true,
		Randomness: fixedRandomness{}, Epoch: "e", K: 5})
	if err != nil {
		b.Fatal(err)
	}
	const batch = 100
	arts := make([]apps.Artifact, batch)
	b.ResetTimer()
	sent := 0
	for i := 0; i < b.N; i += batch {
		for j := range arts {
			arts[j] = apps.Artifact{Primary: fmt.Sprintf("made up query %d", (i+j)%1000), Time: t0.Add(time.Duration(i+j) * time.Second)}
		}
		n, err := d.Submit(ctx, "query", arts...)
		if err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	if err := d.Close(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(sent)/b.Elapsed().Seconds(), "artifacts/s")
}

// TestReplayStateDir: a replay with StateDir keeps each AnonID's device on
// disk, so replaying the same log again sends nothing; without it every
// replay sends everything again (each AnonID a new device).
func TestReplayStateDir(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log.tsv")
	// made-up log: user 1 asks two queries (one twice, apart), user 2 one
	rows := "AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n" +
		"1\tmade up one\t2006-03-01 10:00:00\t\t\n" +
		"1\tmade up two\t2006-03-01 10:01:00\t\t\n" +
		"1\tmade up one\t2006-03-01 10:02:00\t\t\n" +
		"2\tmade up one\t2006-03-01 11:00:00\t\t\n"
	if err := os.WriteFile(log, []byte(rows), 0o600); err != nil {
		t.Fatal(err)
	}
	const want = 4 // query instances by hand: one, two, one; one
	for _, stateDir := range []string{"", t.TempDir()} {
		var pub capture
		_, c := testClient(t, star.FTu, pub.publish)
		var sums []int64
		for range 2 {
			sum, err := (&Replay{Client: c, StateDir: stateDir, Workers: 2}).Run(context.Background(), log)
			if err != nil || sum.Users != 2 {
				t.Fatalf("replay: %+v, %v", sum, err)
			}
			sums = append(sums, sum.Reports)
		}
		second := int64(want)
		if stateDir != "" {
			second = 0
		}
		if sums[0] != want || sums[1] != second {
			t.Fatalf("StateDir %q: replays sent %v reports, want [%d %d]", stateDir, sums, want, second)
		}
	}
}

// TestDevicePads: under padding (dp-gsu) a device sends exactly Limit
// reports in its first Submit of the epoch — its m most frequent distinct
// artifacts plus dummies — whether it has one artifact or none, all
// onions of one length; a later Submit of the epoch (after a restart on
// the same state too) sends nothing.
func TestDevicePads(t *testing.T) {
	const m = 4
	for _, arts := range [][]apps.Artifact{{art("a", 0), art("b", 1), art("a", 2)}, {}} {
		dir := t.TempDir()
		var pub capture
		h, c := testClient(t, star.FTu, pub.publish)
		c.Limit, c.LimitDistinct, c.Window, c.Pad = m, true, 1<<30, true
		open := func() *Device {
			st, err := openDiskStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			return newClientDevice(c, st)
		}
		ctx := context.Background()
		n1, err := open().Submit(ctx, "query", arts...)
		if err != nil {
			t.Fatal(err)
		}
		n2, err := open().Submit(ctx, "query", art("c", 5), art("d", 6))
		if err != nil {
			t.Fatal(err)
		}
		tags := map[[32]byte]bool{}
		for _, r := range pub.reports(t, h) {
			tags[r.Tag] = true
		}
		for _, o := range pub.onions {
			if len(o) != len(pub.onions[0]) {
				t.Fatalf("onions of %d and %d bytes", len(o), len(pub.onions[0]))
			}
		}
		if n1 != m || n2 != 0 || len(pub.onions) != m || len(tags) != m {
			t.Fatalf("%d artifacts: sent %d then %d (%d onions, %d tags), want %d then 0", len(arts), n1, n2, len(pub.onions), len(tags), m)
		}
	}
}
