package prio3

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	ikafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// svcEnv is an embedded NATS server, a kfake broker with a data directory,
// a leader's, a helper's and a collector's keys (world) and a clock the
// test moves.
type svcEnv struct {
	t          *testing.T
	ctx        context.Context
	ns         *natsserver.Server
	br         *ikafka.Broker
	w          *world
	clock      atomic.Int64 // unix nanoseconds: the leader's clock
	hclock     atomic.Int64 // the helper's
	lDir, hDir string
	// the leader operator's signing key and its public half
	signKey ed25519.PrivateKey
	signPub ed25519.PublicKey
}

func newSvcEnv(t *testing.T, m p3.Config, minBatch uint64, grace time.Duration) *svcEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	e := &svcEnv{t: t, ctx: ctx, lDir: t.TempDir(), hDir: t.TempDir()}
	var err error
	if e.signPub, e.signKey, err = ed25519.GenerateKey(nil); err != nil {
		t.Fatal(err)
	}
	if e.ns, err = natsserver.Start(ctx, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.ns.Shutdown)
	if e.br, err = (ikafka.Config{Dir: t.TempDir(), Partitions: 4}).Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.br.Close)
	if err := ikafka.EnsureTopics(ctx, e.br.Addr, 4, protocol.Prio3UploadsTopic, protocol.Prio3SharesTopic); err != nil {
		t.Fatal(err)
	}
	e.w = newWorld(t, m, minBatch)
	e.w.cfgL.Grace, e.w.cfgH.Grace = grace, grace
	return e
}

func (e *svcEnv) now() time.Time       { return time.Unix(0, e.clock.Load()).UTC() }
func (e *svcEnv) helperNow() time.Time { return time.Unix(0, e.hclock.Load()).UTC() }

// setNow sets both aggregators' clocks.
func (e *svcEnv) setNow(t time.Time) { e.clock.Store(t.UnixNano()); e.hclock.Store(t.UnixNano()) }

// conn is a NATS connection of its own, as a separate process has.
func (e *svcEnv) conn() *nats.Conn {
	nc, err := nats.Connect(e.ns.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// running is a service started in a goroutine; stop cancels it and waits
// (bounded) for Run to return.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func (r *running) stop(t *testing.T, what string) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30 s", what)
	}
}

func (e *svcEnv) start(run func(context.Context) error) *running {
	ctx, cancel := context.WithCancel(e.ctx)
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx) }()
	e.t.Cleanup(cancel)
	return r
}

func (e *svcEnv) startHelper() (*HelperService, *running) {
	h := &HelperService{Config: e.w.cfgH, NATS: e.conn(), StateDir: e.hDir, Now: e.helperNow, Ready: make(chan struct{}),
		LeaderKey: e.signPub}
	r := e.start(h.Run)
	select {
	case <-h.Ready:
	case err := <-r.done:
		e.t.Fatalf("helper stopped: %v", err)
	case <-time.After(60 * time.Second):
		e.t.Fatal("helper not subscribed within 60 s")
	}
	return h, r
}

func (e *svcEnv) startLeader(maxBatch int) (*LeaderService, *running) {
	l := &LeaderService{Config: e.w.cfgL, Brokers: []string{e.br.Addr}, NATS: e.conn(), StateDir: e.lDir, Now: e.now, SignKey: e.signKey,
		MaxBatch: maxBatch, MaxWait: 50 * time.Millisecond, RequestTimeout: 5 * time.Second, CollectRetry: 200 * time.Millisecond}
	return l, e.start(l.Run)
}

// write produces uploads to the uploads topic, keyed by the campaign.
func (e *svcEnv) write(uploads ...[]byte) {
	e.t.Helper()
	wr := ikafka.NewWriter(e.br.Addr, protocol.Prio3UploadsTopic)
	defer ikafka.CloseWriter(wr)
	msgs := make([]kafka.Message, len(uploads))
	for i, u := range uploads {
		msgs[i] = kafka.Message{Key: []byte(campaign), Value: u}
	}
	if err := wr.WriteMessages(e.ctx, msgs...); err != nil {
		e.t.Fatal(err)
	}
}

// shares reads n messages of the shares topic and groups them by key.
func (e *svcEnv) shares(n int) map[string][][]byte {
	e.t.Helper()
	out := map[string][][]byte{}
	got := 0
	deadline := time.Now().Add(30 * time.Second)
	for got < n && time.Now().Before(deadline) {
		got = 0
		out = map[string][][]byte{}
		for p := 0; p < 4; p++ {
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{e.br.Addr}, Topic: protocol.Prio3SharesTopic, Partition: p, MaxWait: 50 * time.Millisecond})
			for {
				ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
				m, err := r.FetchMessage(ctx)
				cancel()
				if err != nil {
					break
				}
				out[string(m.Key)] = append(out[string(m.Key)], m.Value)
				got++
			}
			r.Close()
		}
	}
	if got != n {
		e.t.Fatalf("%d messages in %s, want %d", got, protocol.Prio3SharesTopic, n)
	}
	return out
}

// waitFor polls cond every 20 ms for at most d.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clients returns n random count vectors of length L (mostly zeros, values
// up to 40 so that b = 4 clips some) and their clipped sum, computed here.
func clients(rng *rand.Rand, n, length int, max uint64) ([][]uint64, []int64) {
	vs := make([][]uint64, n)
	sum := make([]int64, length)
	for i := range vs {
		vs[i] = make([]uint64, length)
		for j := range vs[i] {
			if rng.IntN(4) == 0 {
				vs[i][j] = rng.Uint64N(41)
			}
			sum[j] += int64(min(vs[i][j], max))
		}
	}
	return vs, sum
}

// unshardDay pairs the leader's (role 0) and the helper's (role 1) share of
// one key and unshards them.
func (e *svcEnv) unshardDay(msgs [][]byte) *p3.Result {
	e.t.Helper()
	var lead, help []byte
	for _, m := range msgs {
		a, err := p3.ParseAggShare(m)
		if err != nil {
			e.t.Fatal(err)
		}
		if a.Role == 0 {
			lead = m
		} else {
			help = m
		}
	}
	if lead == nil || help == nil {
		e.t.Fatalf("shares of a day: leader %v, helper %v", lead != nil, help != nil)
	}
	res, err := e.w.c.Unshard(lead, help)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

func checkTotals(t *testing.T, day string, got *p3.Result, want []int64, count int) {
	t.Helper()
	if got.Count != uint64(count) {
		t.Errorf("%s: count %d, want %d", day, got.Count, count)
	}
	for i := range want {
		if got.Totals[i] != want[i] {
			t.Fatalf("%s keyword %d: total %d, want %d", day, i, got.Totals[i], want[i])
		}
	}
}

// gathered returns the value of metric name with labels from reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

// TestServices: 2 days × 25 clients (L = 100, b = 4) uploaded straight to
// prio3-uploads, a leader and a helper service with their own keys and
// NATS connections, the test's clock: both days' totals read back from
// prio3-shares and unsharded equal the sums of the clients' clipped
// vectors computed here, with count 25 each. A malformed upload, an
// upload for a day after the leader's tomorrow and a replayed upload are
// counted (malformed, future, replay) and change no total; two malformed
// helper requests are counted, unanswered; while the helper's clock is
// behind the leader's it refuses the closed batches (batch_open) and the
// leader asks again later; the metrics show the counts; Config.Retain
// after the close the leader's snapshot holds neither batch.
func TestServices(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 100, Bits: 4}
	e := newSvcEnv(t, m, 5, 48*time.Hour)
	e.w.cfgL.Retain, e.w.cfgH.Retain = 48*time.Hour, 48*time.Hour
	day2 := p3.DayOf(time.Date(2006, 3, 2, 0, 0, 0, 0, time.UTC))
	day1 := day2 - 1
	e.setNow(day2.Start().Add(12 * time.Hour))
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 25
	c1, want1 := clients(rng, n, m.Length, 15)
	c2, want2 := clients(rng, n, m.Length, 15)
	up1, up2 := e.w.shardAll(t, day1, c1), e.w.shardAll(t, day2, c2)
	fut := e.w.shardAll(t, day2+2, c1[:1])

	h, hr := e.startHelper()
	l, lr := e.startLeader(0)
	e.write(up1...)
	e.write([]byte("not an upload"), fut[0], up1[3])
	e.write(up2...)
	// requests the helper cannot handle (signed by the leader's key, so
	// they pass the helper's check): no answer, counted
	nc := e.conn()
	for _, bad := range [][]byte{{p3.WireVersion, 1, 0}, {9, 9, 9}} {
		signed, err := p3.SignReq(e.signKey, bad, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Request(protocol.Prio3HelperSubject, signed, 300*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
			t.Errorf("malformed request %x: %v, want a timeout (no answer)", bad, err)
		}
	}
	waitFor(t, "the leader to prepare every upload", 60*time.Second, func() bool { return l.Stats().Prepared == 2*n && l.Stats().Uploads == 2*n+3 })
	// every record read is applied and snapshotted: Applied reaches the
	// partitions' ends (2n+3 records, from offset 0)
	waitFor(t, "Applied to pass every record", 30*time.Second, func() bool {
		sum := int64(0)
		for _, off := range l.Applied() {
			sum += off
		}
		return sum == 2*n+3
	})
	st := l.Stats()
	for reason, want := range map[string]uint64{"malformed": 1, "future": 1, "replay": 1} {
		if st.Rejected[reason] != want {
			t.Errorf("leader rejected %q: %d, want %d (all: %v)", reason, st.Rejected[reason], want, st.Rejected)
		}
	}
	waitFor(t, "the helper to count both malformed requests", 60*time.Second, func() bool { return h.Stats().Rejected[ReasonMalformedRequest] == 2 })
	if hs := h.Stats(); hs.Prepared != 2*n {
		t.Errorf("helper prepared %d, want %d", hs.Prepared, 2*n)
	}
	if l.Shares.Load() != 0 {
		t.Fatal("a batch was collected before its day's end + grace")
	}
	// both days close by the leader's clock; the helper's is behind: it
	// refuses (batch_open) until its clock closes them too, then both
	// batches are collected once each
	closedAt := day2.Start().Add(24*time.Hour + 48*time.Hour + time.Minute)
	e.clock.Store(closedAt.UnixNano())
	waitFor(t, "the helper to refuse an open batch", 30*time.Second, func() bool { return h.Stats().CollectRefused["batch_open"] >= 2 })
	if l.Shares.Load() != 0 {
		t.Fatal("shares written while the helper's clock had the batches open")
	}
	e.setNow(closedAt)
	waitFor(t, "both batches collected", 30*time.Second, func() bool { return l.Shares.Load() == 2 })
	got := e.shares(4)
	for d, want := range map[p3.Day][]int64{day1: want1, day2: want2} {
		key := campaign + "/" + d.String()
		checkTotals(t, d.String(), e.unshardDay(got[key]), want, n)
	}
	reg := prometheus.NewRegistry()
	l.Register(reg)
	h.Register(reg)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"crowdlog_prio3_uploads_total", nil, 2*n + 3},
		{"crowdlog_prio3_prepared_total", map[string]string{"role": "leader"}, 2 * n},
		{"crowdlog_prio3_prepared_total", map[string]string{"role": "helper"}, 2 * n},
		{"crowdlog_prio3_rejected_total", map[string]string{"role": "leader", "reason": "future"}, 1},
		{"crowdlog_prio3_rejected_total", map[string]string{"role": "helper", "reason": ReasonMalformedRequest}, 2},
		{"crowdlog_prio3_rejected_total", map[string]string{"role": "helper", "reason": "proof"}, 0},
		{"crowdlog_prio3_collected_total", map[string]string{"role": "leader"}, 2},
		{"crowdlog_prio3_collected_total", map[string]string{"role": "helper"}, 2},
		{"crowdlog_prio3_collect_refused_total", map[string]string{"role": "helper", "reason": "mismatch"}, 0},
	} {
		if v := gathered(t, reg, c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	// Retain after the close, the leader drops both collected batches
	e.setNow(closedAt.Add(48 * time.Hour))
	steps := l.Steps.Load()
	waitFor(t, "three more leader steps", 60*time.Second, func() bool { return l.Steps.Load() >= steps+3 })
	lr.stop(t, "leader")
	hr.stop(t, "helper")
	kept, f, _, err := loadLeader(e.lDir, e.w.cfgL)
	if err != nil {
		t.Fatal(err)
	}
	if logs, _ := filepath.Glob(filepath.Join(e.lDir, "*.log")); len(logs) != 0 {
		t.Errorf("after Retain: batch logs %v left", logs)
	}
	if len(kept.Days()) != 0 || len(f.done) != 0 || kept.Stats.Prepared != 2*n {
		t.Errorf("after Retain: days %v, done %v, prepared %d; want none, none, %d", kept.Days(), f.done, kept.Stats.Prepared, 2*n)
	}
}

// TestServicesRestart: 40 clients' uploads of one day; the leader (4
// uploads per step) and the helper are stopped mid-stream, and the leader
// restarts from an older snapshot than its last (as after losing its
// latest writes), so it reads uploads the helper already prepared again;
// an upload is replayed while both are down. After both restart from
// their state directories: every upload is counted once at both (leader
// and helper prepared exactly 40, the replay counted), and the unsharded
// totals equal the clients' clipped sums.
func TestServicesRestart(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 100, Bits: 4}
	e := newSvcEnv(t, m, 5, 48*time.Hour)
	day := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 40
	cs, want := clients(rng, n, m.Length, 15)
	ups := e.w.shardAll(t, day, cs)

	h1, hr := e.startHelper()
	l, lr := e.startLeader(4)
	// the first 12 uploads alone, so that the older snapshot is taken
	// before the rest exist (however fast the leader prepares)
	const first = 12
	e.write(ups[:first]...)
	state := filepath.Join(e.lDir, LeaderStateFile)
	waitFor(t, "the first 12 reports prepared", 60*time.Second, func() bool { return l.Stats().Prepared >= first })
	old, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	e.write(ups[first:]...)
	waitFor(t, "20 reports prepared", 60*time.Second, func() bool { return l.Stats().Prepared >= 20 })
	lr.stop(t, "leader")
	hr.stop(t, "helper")
	helperBefore := h1.Stats().Prepared
	restored, _, err := decodeLeaderFile(e.w.cfgL, old)
	if err != nil {
		t.Fatal(err)
	}
	// the older snapshot lacks reports the helper committed: the restart
	// must prepare them again without counting them twice
	if restored.Stats.Prepared >= helperBefore {
		t.Fatalf("older snapshot has %d reports prepared, the helper %d: nothing to re-prepare", restored.Stats.Prepared, helperBefore)
	}
	t.Logf("restart: older snapshot %d prepared, helper %d, leader at its stop %d", restored.Stats.Prepared, helperBefore, l.Stats().Prepared)
	if err := os.WriteFile(state, old, 0o600); err != nil {
		t.Fatal(err)
	}
	e.write(ups[0]) // a replay while both are down

	h2, hr2 := e.startHelper()
	l2, lr2 := e.startLeader(4)
	waitFor(t, "every upload read after the restart", 60*time.Second, func() bool { return l2.Stats().Uploads == n+1 })
	waitFor(t, "every report prepared", 60*time.Second, func() bool { return l2.Stats().Prepared == n })
	st := l2.Stats()
	if st.Rejected["replay"] != 1 || len(st.Rejected) != 1 {
		t.Errorf("leader rejected %v, want only 1 replay", st.Rejected)
	}
	if hs := h2.Stats(); hs.Prepared != n || len(hs.Rejected) != 0 {
		t.Errorf("helper prepared %d (rejected %v), want %d and none", hs.Prepared, hs.Rejected, n)
	}
	e.setNow(day.Start().Add(24*time.Hour + 48*time.Hour + time.Minute))
	waitFor(t, "the batch collected", 30*time.Second, func() bool { return l2.Shares.Load() == 1 })
	got := e.shares(2)
	checkTotals(t, day.String(), e.unshardDay(got[campaign+"/"+day.String()]), want, n)
	lr2.stop(t, "leader")
	hr2.stop(t, "helper")
	// a third start changes nothing: the batch is recorded as collected
	_, hr3 := e.startHelper()
	l3, lr3 := e.startLeader(4)
	// (a few whole steps, each of which would collect a batch not done)
	waitFor(t, "three steps of the restarted leader", 60*time.Second, func() bool { return l3.Steps.Load() >= 3 })
	if l3.Shares.Load() != 0 {
		t.Errorf("restarted leader: %d steps, %d share pairs written again", l3.Steps.Load(), l3.Shares.Load())
	}
	lr3.stop(t, "leader")
	hr3.stop(t, "helper")
	if b, _ := os.ReadFile(state); bytes.Equal(b, old) {
		t.Error("the leader's snapshot did not change after the restart")
	}
}

// TestServicesHelperOutage: the helper stops while the leader keeps
// running and uploads keep coming; the leader's requests fail and are
// retried, and it reads no further uploads meanwhile (at most one step's
// batch); once the helper is back every
// report is prepared exactly once at both and the totals equal the
// clients' clipped sums.
func TestServicesHelperOutage(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 50, Bits: 4}
	e := newSvcEnv(t, m, 5, 48*time.Hour)
	day := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 20
	cs, want := clients(rng, n, m.Length, 15)
	ups := e.w.shardAll(t, day, cs)
	_, hr := e.startHelper()
	l, lr := e.startLeader(4)
	e.write(ups[:n/2]...)
	waitFor(t, "the first half prepared", 30*time.Second, func() bool { return l.Stats().Prepared == n/2 })
	hr.stop(t, "helper")
	e.write(ups[n/2:]...)
	waitFor(t, "the leader to read an upload while the helper is down", 30*time.Second, func() bool { return l.Stats().Uploads > n/2 })
	steps := l.Steps.Load()
	waitFor(t, "leader steps without the helper", 30*time.Second, func() bool { return l.Steps.Load() >= steps+3 })
	if p := l.Stats().Prepared; p != n/2 {
		t.Fatalf("prepared %d without a helper, want %d", p, n/2)
	}
	// an unanswered request stops the reading: one step's uploads at most
	if u := l.Stats().Uploads; u > n/2+4 {
		t.Errorf("the leader read %d uploads while its request was unanswered, want at most %d", u, n/2+4)
	}
	h2, hr2 := e.startHelper()
	waitFor(t, "every report prepared", 30*time.Second, func() bool { return l.Stats().Prepared == n && l.Stats().Uploads == n })
	if hs := h2.Stats(); hs.Prepared != n {
		t.Errorf("helper prepared %d, want %d", hs.Prepared, n)
	}
	e.setNow(day.Start().Add(24*time.Hour + 48*time.Hour + time.Minute))
	waitFor(t, "the batch collected", 30*time.Second, func() bool { return l.Shares.Load() == 1 })
	checkTotals(t, day.String(), e.unshardDay(e.shares(2)[campaign+"/"+day.String()]), want, n)
	lr.stop(t, "leader")
	hr2.stop(t, "helper")
}

// TestFetchFills: with a fill time a step takes uploads that arrive after
// its first until it holds max (here the fill time is never reached, so
// the result does not depend on the machine's speed); skipped records do
// not count toward max.
func TestFetchFills(t *testing.T) {
	in := make(chan upload)
	go func() {
		for i := range 4 {
			time.Sleep(20 * time.Millisecond)
			in <- upload{offset: int64(i), skip: i == 1}
		}
	}()
	got := fetch(context.Background(), in, 3, time.Minute, time.Hour)
	if len(got) != 4 || got[3].offset != 3 {
		t.Fatalf("fetch took %d uploads, want all 4 (3 and a skipped record)", len(got))
	}
	// ending the context ends the fill with what it holds
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		in <- upload{offset: 9}
		cancel()
	}()
	if got := fetch(ctx, in, 3, time.Minute, time.Hour); len(got) != 1 || got[0].offset != 9 {
		t.Fatalf("after cancel: %d uploads, want the 1 sent", len(got))
	}
}
