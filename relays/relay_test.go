package relays_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	ikafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/relays"
)

const topic = "reports"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is one NATS server with the relay stream and one kfake broker with
// the reports topic.
type env struct {
	t      *testing.T
	nats   *natsserver.Server
	broker *ikafka.Broker
	js     jetstream.JetStream // for publishers and inspection
	a, b   *onion.KeyPair      // relay keys
	agg    *onion.KeyPair      // aggregator key (innermost layer)
}

func newEnv(t testing.TB, maxMsgs int64) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	br, err := ikafka.Config{Dir: t.TempDir(), Partitions: 4}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(br.Close)
	if err := ikafka.EnsureTopics(ctx, br.Addr, 4, topic); err != nil {
		t.Fatal(err)
	}
	e := &env{nats: ns, broker: br}
	e.js = e.connect(t)
	// Concurrent EnsureStream calls from several "processes" are fine.
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- relays.EnsureStream(ctx, e.connect(t), maxMsgs)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range []**onion.KeyPair{&e.a, &e.b, &e.agg} {
		if *k, err = onion.GenerateKeyPair(byte(i + 1)); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// connect opens a separate NATS connection, as a separate process would.
func (e *env) connect(t testing.TB) jetstream.JetStream {
	nc, err := nats.Connect(e.nats.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// report is one client report: its payload and the Kafka key relay b uses.
type report struct {
	payload []byte
	key     []byte
}

func randomReports(n int) []report {
	rs := make([]report, n)
	for i := range rs {
		p := make([]byte, 48+i%200)
		crand.Read(p)
		copy(p, fmt.Sprintf("r%06d", i))
		rs[i] = report{payload: p, key: []byte{byte(rand.N(256)), byte(rand.N(256))}}
	}
	return rs
}

// onion wraps a report for the route client → a → b → Kafka → aggregator.
func (e *env) onion(t testing.TB, r report) []byte {
	inner, err := onion.SealLayer(e.agg.PublicKey(), onion.Hop{Kind: onion.HopDeliver}, r.payload)
	if err != nil {
		t.Fatal(err)
	}
	forB, err := onion.SealLayer(e.b.PublicKey(), onion.Hop{Kind: onion.HopKafka, Key: r.key}, inner)
	if err != nil {
		t.Fatal(err)
	}
	forA, err := onion.SealLayer(e.a.PublicKey(), onion.Hop{Kind: onion.HopRelay, Subject: protocol.RelaySubject("b")}, forB)
	if err != nil {
		t.Fatal(err)
	}
	return forA
}

func (e *env) onions(t testing.TB, rs []report) [][]byte {
	out := make([][]byte, len(rs))
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(rs); i += 4 {
				out[i] = e.onion(t, rs[i])
			}
		}(w)
	}
	wg.Wait()
	return out
}

// running is a relay goroutine that can be stopped.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func (r *running) stop(t testing.TB) {
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("relay Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("relay did not stop")
	}
}

func start(r *relays.Relay) *running {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return &running{cancel: cancel, done: done}
}

func (e *env) relayA(t testing.TB, st *relays.Stats) *relays.Relay {
	return &relays.Relay{Name: "a", Keys: []*onion.KeyPair{e.a}, JS: e.connect(t), Logger: quiet, Stats: st}
}

func (e *env) relayB(t testing.TB, w relays.KafkaWriter, st *relays.Stats) *relays.Relay {
	return &relays.Relay{Name: "b", Keys: []*onion.KeyPair{e.b}, JS: e.connect(t), Kafka: w, Logger: quiet, Stats: st}
}

func (e *env) writer(t testing.TB) *kafka.Writer {
	w := ikafka.NewWriter(e.broker.Addr, topic)
	t.Cleanup(func() { ikafka.CloseWriter(w) })
	return w
}

// readAll returns every record of the topic, over all partitions.
func readAll(ctx context.Context, addr string) ([]kafka.Message, error) {
	n, err := ikafka.Partitions(ctx, addr, topic)
	if err != nil {
		return nil, err
	}
	var all []kafka.Message
	for p := 0; p < n; p++ {
		conn, err := kafka.DialLeader(ctx, "tcp", addr, topic, p)
		if err != nil {
			return nil, err
		}
		last, err := conn.ReadLastOffset()
		if err != nil {
			conn.Close()
			return nil, err
		}
		if last > 0 {
			if _, err := conn.Seek(0, kafka.SeekAbsolute); err != nil {
				conn.Close()
				return nil, err
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			batch := conn.ReadBatch(1, 64<<20)
			for {
				m, err := batch.ReadMessage()
				if err != nil {
					break
				}
				all = append(all, m)
				if m.Offset >= last-1 {
					break
				}
			}
			batch.Close()
		}
		conn.Close()
	}
	return all, nil
}

// waitKafka polls the topic until it holds at least want records.
func (e *env) waitKafka(t testing.TB, want int, timeout time.Duration) []kafka.Message {
	t.Helper()
	// it ends as soon as the records are there: a generous bound costs only
	// on a failure (under -race on a loaded machine one read took over 30 s)
	timeout = max(timeout, 2*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		// each read has its own bound, so one stuck dial does not use up
		// the whole wait
		rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
		msgs, err := readAll(rctx, e.broker.Addr)
		rcancel()
		if err == nil && len(msgs) >= want {
			return msgs
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Kafka topic has %d records, want %d after %s (err %v)", len(msgs), want, timeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkDelivered asserts that the records are exactly the reports (as a
// set), keyed by their hop key (cut to onion.ReportKeyLen bytes), without
// headers, and returns the number of duplicate records (allowed by
// at-least-once delivery).
func (e *env) checkDelivered(t testing.TB, rs []report, msgs []kafka.Message) (dups int) {
	t.Helper()
	want := make(map[string][]byte, len(rs))
	for _, r := range rs {
		want[string(r.payload)] = r.key
	}
	got := map[string]bool{}
	for _, m := range msgs {
		if len(m.Headers) != 0 {
			t.Fatalf("record has %d headers; reports must have none", len(m.Headers))
		}
		hop, payload, err := onion.Peel([]*onion.KeyPair{e.agg}, m.Value)
		if err != nil || hop.Kind != onion.HopDeliver {
			t.Fatalf("record value is not an aggregator layer: %v", err)
		}
		key, ok := want[string(payload)]
		if !ok {
			t.Fatalf("record with an unknown payload")
		}
		if len(key) > onion.ReportKeyLen {
			key = key[:onion.ReportKeyLen] // relay b passes on the tag bucket only
		}
		if !bytes.Equal(m.Key, key) {
			t.Fatalf("record keyed %x, want the hop key's first %d bytes %x", m.Key, onion.ReportKeyLen, key)
		}
		if got[string(payload)] {
			dups++
		}
		got[string(payload)] = true
	}
	if len(got) != len(want) {
		t.Fatalf("%d distinct reports arrived, want %d", len(got), len(want))
	}
	return dups
}

func (e *env) waitDrained(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, err := relays.Drained(context.Background(), e.js, "a", "b")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("relays not drained")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func publishAll(t testing.TB, pub *publish.Publisher, layers [][]byte, workers int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(layers); i += workers {
				if err := pub.Publish(ctx, layers[i]); err != nil {
					t.Errorf("Publish: %v", err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// (a) 2,000 three-layer reports through two relay-a processes and one
// relay b arrive in Kafka, keyed by the hop key, none lost.
func TestRelayChainDeliversAll(t *testing.T) {
	e := newEnv(t, 0)
	rs := randomReports(2000)
	layers := e.onions(t, rs)

	reg := prometheus.NewRegistry()
	var stA1, stA2, stB relays.Stats
	ra1, ra2 := e.relayA(t, &stA1), e.relayA(t, &stA2)
	ra1.Registerer, ra2.Registerer = reg, reg
	rb := e.relayB(t, e.writer(t), &stB)
	rb.Registerer = reg
	runs := []*running{start(ra1), start(ra2), start(rb)}
	defer func() {
		for _, r := range runs {
			r.stop(t)
		}
	}()

	pub := &publish.Publisher{JS: e.connect(t), Subject: protocol.RelaySubject("a")}
	t0 := time.Now()
	publishAll(t, pub, layers, 8)
	msgs := e.waitKafka(t, len(rs), 30*time.Second)
	t.Logf("2,000 reports client→a→b→Kafka in %v", time.Since(t0))
	e.waitDrained(t)
	if dups := e.checkDelivered(t, rs, msgs); dups != 0 {
		t.Errorf("%d duplicate records without any failure", dups)
	}
	a1, a2, b := stA1.Snapshot(), stA2.Snapshot(), stB.Snapshot()
	t.Logf("relay a#1 %+v, relay a#2 %+v, relay b %+v", a1, a2, b)
	if a1.Forwarded+a2.Forwarded != 2000 || b.Forwarded != 2000 {
		t.Errorf("forwarded a=%d+%d b=%d, want 2000 each hop", a1.Forwarded, a2.Forwarded, b.Forwarded)
	}
	if a1.Forwarded == 0 || a2.Forwarded == 0 {
		t.Errorf("the two relay-a processes did not share the work: %d / %d", a1.Forwarded, a2.Forwarded)
	}
	if a1.Dropped()+a2.Dropped()+b.Dropped() != 0 {
		t.Errorf("valid layers dropped")
	}
	if pub.Published.Load() != 2000 {
		t.Errorf("Published = %d, want 2000", pub.Published.Load())
	}
	// Prometheus counters match Stats.
	if got := promValue(t, reg, "crowdlog_relay_forwarded_total", "b"); got != 2000 {
		t.Errorf("crowdlog_relay_forwarded_total{relay=b} = %v, want 2000", got)
	}
	if got := promValue(t, reg, "crowdlog_relay_reports_in_total", "a"); got != float64(a1.In+a2.In) {
		t.Errorf("crowdlog_relay_reports_in_total{relay=a} = %v, want %d", got, a1.In+a2.In)
	}
}

// promValue returns a registered counter's value by name and relay label.
func promValue(t testing.TB, reg *prometheus.Registry, name, relay string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0.0, false // summed over other labels (e.g. every drop reason)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "relay" && l.GetValue() == relay {
					sum += m.GetCounter().GetValue()
					found = true
				}
			}
		}
	}
	if !found {
		t.Fatalf("metric %s{relay=%s} not registered", name, relay)
	}
	return sum
}

// (b) Bad inputs are dropped and counted by reason; valid ones all arrive.
// As an attack (oversize, garbage and off-route onions from a client), it
// prints its ATTACK line: none of them reaches Kafka, none blocks the 300
// honest reports.
func TestAttackBadOnions(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	rs := randomReports(300)
	good := e.onions(t, rs)

	var bad [][]byte
	want := relays.StatsSnapshot{}
	// random bytes (not starting with the version byte)
	for i := 0; i < 40; i++ {
		b := make([]byte, rand.N(2000))
		crand.Read(b)
		if len(b) > 0 {
			b[0] = 0xFF
		}
		bad = append(bad, b)
		want.Malformed++
	}
	// random bytes with a valid header for relay a: decryption fails
	for i := 0; i < 20; i++ {
		b := make([]byte, 100+rand.N(1000))
		crand.Read(b)
		b[0], b[1] = protocol.Version, e.a.ID
		bad = append(bad, b)
		want.Malformed++
	}
	// truncated valid layers
	for i := 0; i < 40; i++ {
		l := e.onion(t, rs[i])
		bad = append(bad, l[:rand.N(len(l))])
		want.Malformed++
	}
	// a layer for an unknown key id
	other, _ := onion.GenerateKeyPair(77)
	for i := 0; i < 20; i++ {
		l, err := onion.SealLayer(other.PublicKey(), onion.Hop{Kind: onion.HopRelay, Subject: protocol.RelaySubject("b")}, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		bad = append(bad, l)
		want.UnknownKey++
	}
	// wrong hops at a relay: deliver, foreign subject, itself, wildcard,
	// Kafka at relay a, a relay off the route
	for _, hop := range []onion.Hop{
		{Kind: onion.HopDeliver},
		{Kind: onion.HopRelay, Subject: "other.subject"},
		{Kind: onion.HopRelay, Subject: protocol.RelaySubject("a")},
		{Kind: onion.HopRelay, Subject: protocol.RelaySubjectPrefix + ">"},
		{Kind: onion.HopRelay, Subject: protocol.RelaySubjectPrefix + "b.c"},
		{Kind: onion.HopKafka, Key: []byte{1, 2}},                   // relay a has no Kafka writer, and is not the last hop
		{Kind: onion.HopRelay, Subject: protocol.RelaySubject("c")}, // a valid relay, not the route's next
	} {
		for i := 0; i < 5; i++ {
			l, err := onion.SealLayer(e.a.PublicKey(), hop, []byte("inner"))
			if err != nil {
				t.Fatal(err)
			}
			bad = append(bad, l)
			want.WrongHop++
		}
	}
	// An oversized layer is refused by the Publisher...
	big := make([]byte, onion.MaxLayer+relays.HeaderAllowance+100)
	pub := &publish.Publisher{JS: e.connect(t), Subject: protocol.RelaySubject("a")}
	if err := pub.Publish(ctx, big); !errors.Is(err, publish.ErrTooLarge) {
		t.Fatalf("Publish(oversized) = %v, want ErrTooLarge", err)
	}
	// ...and, published raw (the stream leaves HeaderAllowance), dropped by the relay.
	for i := 0; i < 3; i++ {
		if _, err := e.js.Publish(ctx, protocol.RelaySubject("a"), big[:onion.MaxLayer+1+i]); err != nil {
			t.Fatalf("raw oversized publish: %v", err)
		}
		want.Oversized++
	}
	// Larger than the stream allows at all: rejected by JetStream.
	if _, err := e.js.Publish(ctx, protocol.RelaySubject("a"), big[:onion.MaxLayer+relays.HeaderAllowance+1]); err == nil {
		t.Fatal("stream accepted a message larger than MaxLayer+HeaderAllowance")
	}
	// Relay b gets a layer from a that is garbage for b.
	for i := 0; i < 10; i++ {
		junk := make([]byte, 300)
		crand.Read(junk)
		junk[0], junk[1] = protocol.Version, e.b.ID
		l, err := onion.SealLayer(e.a.PublicKey(), onion.Hop{Kind: onion.HopRelay, Subject: protocol.RelaySubject("b")}, junk)
		if err != nil {
			t.Fatal(err)
		}
		bad = append(bad, l)
	}

	all := append(append([][]byte{}, good...), bad...)
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })

	var stA, stB relays.Stats
	runs := []*running{start(e.relayA(t, &stA)), start(e.relayB(t, e.writer(t), &stB))}
	defer func() {
		for _, r := range runs {
			r.stop(t)
		}
	}()
	publishAll(t, pub, all, 4)
	msgs := e.waitKafka(t, len(rs), 30*time.Second)
	e.waitDrained(t)
	e.checkDelivered(t, rs, msgs)

	a, b := stA.Snapshot(), stB.Snapshot()
	t.Logf("relay a %+v; relay b %+v", a, b)
	if a.Malformed != want.Malformed || a.UnknownKey != want.UnknownKey || a.WrongHop != want.WrongHop || a.Oversized != want.Oversized {
		t.Errorf("relay a drops: malformed %d unknown-key %d wrong-hop %d oversized %d; want %d %d %d %d",
			a.Malformed, a.UnknownKey, a.WrongHop, a.Oversized, want.Malformed, want.UnknownKey, want.WrongHop, want.Oversized)
	}
	if a.Forwarded != uint64(len(good)+10) {
		t.Errorf("relay a forwarded %d, want %d", a.Forwarded, len(good)+10)
	}
	if b.Malformed != 10 || b.Forwarded != uint64(len(good)) || b.Dropped() != 10 {
		t.Errorf("relay b: %+v, want 10 malformed and %d forwarded", b, len(good))
	}
	fmt.Printf("ATTACK oversize-garbage-onions: %d oversized, %d malformed, %d unknown-key, %d off-route layers at relay a and 10 garbage layers at relay b: %d forwarded past relay b beyond the %d honest reports (all %d delivered)\n",
		a.Oversized, a.Malformed, a.UnknownKey, a.WrongHop, int(b.Forwarded)-len(good), len(good), len(msgs))
	// Dropped messages are terminated, not redelivered.
	time.Sleep(300 * time.Millisecond)
	if a2 := stA.Snapshot(); a2.In != a.In {
		t.Errorf("dropped messages were redelivered: In %d → %d", a.In, a2.In)
	}
}

// flakyWriter fails its first n calls, then writes through.
type flakyWriter struct {
	w     relays.KafkaWriter
	n     int32
	calls atomic.Int32
}

func (f *flakyWriter) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	if f.calls.Add(1) <= f.n {
		return errors.New("injected Kafka failure")
	}
	return f.w.WriteMessages(ctx, msgs...)
}

// (c) A relay whose Kafka writer fails for a while delivers everything once
// it recovers.
func TestRelayRetriesFailedKafkaWrites(t *testing.T) {
	e := newEnv(t, 0)
	rs := randomReports(500)
	layers := e.onions(t, rs)
	fw := &flakyWriter{w: e.writer(t), n: 4}
	var stB relays.Stats
	rb := e.relayB(t, fw, &stB)
	rb.NakDelay = 100 * time.Millisecond
	runs := []*running{start(e.relayA(t, nil)), start(rb)}
	defer func() {
		for _, r := range runs {
			r.stop(t)
		}
	}()
	publishAll(t, &publish.Publisher{JS: e.connect(t), Subject: protocol.RelaySubject("a")}, layers, 4)
	msgs := e.waitKafka(t, len(rs), 30*time.Second)
	e.waitDrained(t)
	e.checkDelivered(t, rs, msgs)
	b := stB.Snapshot()
	t.Logf("relay b %+v, writer calls %d", b, fw.calls.Load())
	if b.ForwardFailures == 0 || fw.calls.Load() <= fw.n {
		t.Errorf("the injected failures did not happen: %+v", b)
	}
	if b.Forwarded != uint64(len(rs)) {
		t.Errorf("relay b forwarded %d, want %d", b.Forwarded, len(rs))
	}
	// redeliveries of messages whose forward failed are not replays
	if b.Replay != 0 {
		t.Errorf("relay b dropped %d redelivered layers as replays, want 0", b.Replay)
	}
}

// blockingWriter signals its first call and blocks it until ctx ends.
type blockingWriter struct {
	entered chan struct{}
	once    sync.Once
}

func (b *blockingWriter) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	b.once.Do(func() { close(b.entered) })
	<-ctx.Done()
	return ctx.Err()
}

// (d) A relay cancelled mid-batch (fetched, not acked) loses nothing after
// a restart; also when its connection dies without a chance to Nak (a
// killed process), via AckWait redelivery.
func TestRelayCancelledMidBatchLosesNothing(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			e := newEnv(t, 0)
			rs := randomReports(400)
			layers := e.onions(t, rs)
			ra := start(e.relayA(t, nil))
			defer ra.stop(t)

			bw := &blockingWriter{entered: make(chan struct{})}
			nc, err := nats.Connect(e.nats.URL)
			if err != nil {
				t.Fatal(err)
			}
			js, _ := jetstream.New(nc)
			var st1 relays.Stats
			r1 := &relays.Relay{Name: "b", Keys: []*onion.KeyPair{e.b}, JS: js, Kafka: bw, Logger: quiet, Stats: &st1, AckWait: 2 * time.Second}
			run1 := start(r1)
			publishAll(t, &publish.Publisher{JS: e.connect(t), Subject: protocol.RelaySubject("a")}, layers, 4)
			select {
			case <-bw.entered:
			case <-time.After(20 * time.Second):
				t.Fatal("relay b never reached its Kafka write")
			}
			if crash {
				nc.Close() // no Ack, no Nak can leave this "process"
			}
			run1.cancel()
			if err := <-run1.done; err != nil && !(crash && errors.Is(err, nats.ErrConnectionClosed)) {
				t.Fatalf("relay Run: %v", err)
			}
			nc.Close()
			if n := st1.Snapshot().Forwarded; n != 0 {
				t.Fatalf("blocked relay forwarded %d", n)
			}
			if st1.Snapshot().In == 0 {
				t.Fatal("blocked relay fetched nothing")
			}

			var st2 relays.Stats
			r2 := e.relayB(t, e.writer(t), &st2)
			r2.AckWait = 2 * time.Second
			run2 := start(r2)
			defer run2.stop(t)
			msgs := e.waitKafka(t, len(rs), 30*time.Second)
			e.waitDrained(t)
			e.checkDelivered(t, rs, msgs)
			t.Logf("first relay b %+v; restarted relay b %+v", st1.Snapshot(), st2.Snapshot())
		})
	}
}

// (e) Backpressure: with a 100-message inbox and no relay, Publish blocks
// (no error, no drop) until relays start; then everything arrives.
func TestPublishBackpressure(t *testing.T) {
	e := newEnv(t, 100)
	rs := randomReports(600)
	layers := e.onions(t, rs)
	pub := &publish.Publisher{JS: e.connect(t), Subject: protocol.RelaySubject("a"), MaxPending: 50, MaxBackoff: 200 * time.Millisecond, Logger: quiet}

	var returned atomic.Int64
	pubDone := make(chan error, 1)
	go func() {
		ctx := context.Background()
		for _, l := range layers {
			if err := pub.Publish(ctx, l); err != nil {
				pubDone <- err
				return
			}
			returned.Add(1)
		}
		pubDone <- pub.Flush(ctx)
	}()

	time.Sleep(1500 * time.Millisecond)
	n := returned.Load()
	select {
	case err := <-pubDone:
		t.Fatalf("publishing finished without a relay (err %v) after %d layers", err, n)
	default:
	}
	st, err := e.js.Stream(context.Background(), relays.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(protocol.RelaySubject("a")))
	if err != nil {
		t.Fatal(err)
	}
	stored := info.State.Subjects[protocol.RelaySubject("a")]
	t.Logf("blocked after %d Publish calls; inbox holds %d; retried %d", n, stored, pub.Retried.Load())
	if stored != 100 {
		t.Errorf("inbox holds %d, want its limit 100", stored)
	}
	if n < 100 || n > 100+50+1 {
		t.Errorf("%d Publish calls returned; want 100 stored + at most MaxPending outstanding", n)
	}
	if pub.Retried.Load() == 0 {
		t.Error("no retries while the inbox was full")
	}

	runs := []*running{start(e.relayA(t, nil)), start(e.relayB(t, e.writer(t), nil))}
	defer func() {
		for _, r := range runs {
			r.stop(t)
		}
	}()
	select {
	case err := <-pubDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("publishing did not resume after relays started")
	}
	msgs := e.waitKafka(t, len(rs), 30*time.Second)
	e.waitDrained(t)
	e.checkDelivered(t, rs, msgs)
	if pub.Published.Load() != uint64(len(rs)) || pub.Failed.Load() != 0 {
		t.Errorf("Published %d Failed %d, want %d and 0", pub.Published.Load(), pub.Failed.Load(), len(rs))
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	k, _ := onion.GenerateKeyPair(1)
	ctx := context.Background()
	for _, r := range []*relays.Relay{
		{Name: "", Keys: []*onion.KeyPair{k}},
		{Name: "a.b", Keys: []*onion.KeyPair{k}},
		{Name: "a"},
		{Name: "a", Keys: []*onion.KeyPair{k}}, // no JS
	} {
		if err := r.Run(ctx); err == nil {
			t.Errorf("Run(%+v) accepted a bad configuration", r.Name)
		}
	}
}

// BenchmarkRelayPeelForward measures one relay peeling HopKafka layers
// (~700 bytes) and producing them to kfake, in messages per second, for
// several batch sizes (NATS, kfake and the relay share the machine).
func BenchmarkRelayPeelForward(b *testing.B) {
	for _, batch := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchRelay(b, batch) })
	}
}

func benchRelay(b *testing.B, batch int) {
	e := newEnv(b, 0)
	ctx := context.Background()
	n := b.N
	layers := make([][]byte, n)
	inner := make([]byte, 560)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				l, err := onion.SealLayer(e.b.PublicKey(), onion.Hop{Kind: onion.HopKafka, Key: []byte{byte(i), byte(i >> 8)}}, inner)
				if err != nil {
					b.Error(err)
					return
				}
				layers[i] = l
			}
		}(w)
	}
	wg.Wait()
	pub := &publish.Publisher{JS: e.connect(b), Subject: protocol.RelaySubject("b")}
	for _, l := range layers {
		if err := pub.Publish(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	var st relays.Stats
	rb := e.relayB(b, e.writer(b), &st)
	rb.BatchSize = batch
	rb.PoolSize = 1 // forward every fetch: the pool would only add T to the tail
	b.ResetTimer()
	r := start(rb)
	for st.Forwarded.Load() < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
	r.stop(b)
}

// TestRelayDropsReplays: one onion published 1,000 times to relay a (no
// Nats-Msg-Id, so JetStream's duplicate window does not help) is forwarded
// once and dropped 999 times as "replay"; its relay-b layer replayed 100
// times straight into relay b's inbox after it was forwarded is dropped 100
// times. Other reports pass untouched: Kafka holds each report exactly once.
func TestRelayDropsReplays(t *testing.T) {
	e := newEnv(t, 0)
	rs := randomReports(20)
	layers := e.onions(t, rs)
	var stA, stB relays.Stats
	reg := prometheus.NewRegistry()
	ra := e.relayA(t, &stA)
	ra.Registerer = reg
	runs := []*running{start(ra), start(e.relayB(t, e.writer(t), &stB))}
	defer func() {
		for _, r := range runs {
			r.stop(t)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const replays = 1000
	for i := 0; i < replays; i++ {
		if _, err := e.js.Publish(ctx, protocol.RelaySubject("a"), layers[0]); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range layers[1:] {
		if _, err := e.js.Publish(ctx, protocol.RelaySubject("a"), l); err != nil {
			t.Fatal(err)
		}
	}
	msgs := e.waitKafka(t, len(rs), 30*time.Second)
	e.waitDrained(t)
	_, forB, err := onion.Peel([]*onion.KeyPair{e.a}, layers[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, err := e.js.Publish(ctx, protocol.RelaySubject("b"), forB); err != nil {
			t.Fatal(err)
		}
	}
	e.waitDrained(t)
	time.Sleep(200 * time.Millisecond)
	msgs, err = readAll(ctx, e.broker.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if dups := e.checkDelivered(t, rs, msgs); dups != 0 || len(msgs) != len(rs) {
		t.Fatalf("Kafka holds %d records (%d duplicates), want each of %d reports once", len(msgs), dups, len(rs))
	}
	a, b := stA.Snapshot(), stB.Snapshot()
	t.Logf("relay a %+v; relay b %+v", a, b)
	if a.Replay != replays-1 || a.Forwarded != uint64(len(rs)) {
		t.Errorf("relay a: %d replays dropped (want %d), %d forwarded (want %d)", a.Replay, replays-1, a.Forwarded, len(rs))
	}
	if b.Replay != 100 || b.Forwarded != uint64(len(rs)) {
		t.Errorf("relay b: %d replays dropped (want 100), %d forwarded (want %d)", b.Replay, b.Forwarded, len(rs))
	}
	if v := promValue(t, reg, "crowdlog_relay_dropped_total", "a"); v != replays-1 {
		t.Errorf("crowdlog_relay_dropped_total{relay=a} = %v, want %d", v, replays-1)
	}
}
