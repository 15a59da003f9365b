package relays_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/relays"
)

// batchRecorder is a KafkaWriter that records the size and time of every
// successful WriteMessages call: one call per forwarded batch.
type batchRecorder struct {
	w     relays.KafkaWriter
	mu    sync.Mutex
	sizes []int
	times []time.Time
	total int
}

func (b *batchRecorder) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	if err := b.w.WriteMessages(ctx, msgs...); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, len(msgs))
	b.times = append(b.times, time.Now())
	b.total += len(msgs)
	return nil
}

func (b *batchRecorder) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// layerForB is a relay-b layer (HopKafka) around an aggregator layer.
func (e *env) layerForB(t testing.TB, r report) []byte {
	inner, err := onion.SealLayer(e.agg.PublicKey(), onion.Hop{Kind: onion.HopDeliver}, r.payload)
	if err != nil {
		t.Fatal(err)
	}
	l, err := onion.SealLayer(e.b.PublicKey(), onion.Hop{Kind: onion.HopKafka, Key: r.key}, inner)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestAttackRelayBatchSize: an observer of a relay's input and output under
// light load (one message every 10 ms, the arrival times it sees) links an
// output to its input when a forwarded batch holds few messages. The relay
// must forward batches of at least P = 32 while the load lasts; the last,
// partial pool must still leave within T (nothing waits forever).
func TestAttackRelayBatchSize(t *testing.T) {
	const (
		p     = 32
		n     = 400
		every = 10 * time.Millisecond
		tmo   = 4 * time.Second
	)
	e := newEnv(t, 0)
	rs := randomReports(n)
	layers := make([][]byte, n)
	for i, r := range rs {
		layers[i] = e.layerForB(t, r)
	}
	rec := &batchRecorder{w: e.writer(t)}
	var st relays.Stats
	rb := e.relayB(t, rec, &st)
	rb.PoolSize, rb.PoolTimeout = p, tmo
	run := start(rb)
	defer run.stop(t)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tick := time.NewTicker(every)
	for _, l := range layers {
		<-tick.C
		if _, err := e.js.Publish(ctx, protocol.RelaySubject("b"), l); err != nil {
			t.Fatal(err)
		}
	}
	tick.Stop()
	loadEnd := time.Now()
	for rec.count() < n {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d messages forwarded", rec.count(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec.mu.Lock()
	sizes, times := rec.sizes, rec.times
	rec.mu.Unlock()
	minLoad, loadBatches := n, 0
	var tail int
	var tailAt time.Time
	for i, s := range sizes {
		if times[i].Before(loadEnd) {
			minLoad = min(minLoad, s)
			loadBatches++
		} else {
			tail += s
			tailAt = times[i]
		}
	}
	tailWait := time.Duration(0)
	if tail > 0 {
		tailWait = tailAt.Sub(loadEnd).Round(10 * time.Millisecond)
	}
	fmt.Printf("ATTACK relay-batch-size: min forwarded batch %d of %d (P=%d) over %d batches under 1 msg/10ms load; last %d forwarded %v after the load (T=%v)\n",
		minLoad, p, p, loadBatches, tail, tailWait, tmo)
	t.Logf("batch sizes %v; stats %+v", sizes, st.Snapshot())
	if loadBatches == 0 || minLoad < p {
		t.Fatalf("attack succeeds: a batch of %d messages forwarded under load, want at least P = %d", minLoad, p)
	}
	if tailWait > tmo+2*time.Second {
		t.Fatalf("the last partial pool waited %v, more than T = %v", tailWait, tmo)
	}
}

// TestAttackTagBucketLink: relay b (it sees the hop key) and anyone reading
// topic reports (it sees the Kafka key) group reports by key. With a
// 16-bit key, most tags are alone in their bucket, so a released artifact's
// count matches its bucket's count and links the bucket's reports — and
// relay b's view of their senders' batches — to the artifact. 5,000 real
// reports (distinct artifacts, sealed by star and wrapped by the client's
// ingest.Route.Wrap) go through relays a and b: the keys relay b sees and
// the Kafka keys must take at most onion.ReportBuckets values, no tag alone
// in its bucket, and all reports of one tag still share a key (partition).
func TestAttackTagBucketLink(t *testing.T) {
	const tags = 5000
	e := newEnv(t, 0)
	route := ingest.Route{RelayA: e.a.PublicKey(), RelayB: e.b.PublicKey(), Aggregator: e.agg.PublicKey(), SubjectB: protocol.RelaySubject("b")}
	user, err := star.NewUserSecret()
	if err != nil {
		t.Fatal(err)
	}
	layers := make([][]byte, tags+100)
	tagOf := map[string][32]byte{} // report id → tag
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(layers); i += 4 {
				artifact := fmt.Sprintf("artifact %d", i%tags) // the last 100 repeat a tag: same key
				s, err := star.DeriveSealing(star.LocalOmega("query", "e1", artifact), "query", "e1", star.FTa, 2)
				if err != nil {
					t.Error(err)
					return
				}
				r, err := s.Seal(&user, artifact, "")
				if err != nil {
					t.Error(err)
					return
				}
				if layers[i], err = route.Wrap(r); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				tagOf[string(r.ID[:])] = r.Tag
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// what relay b sees: the hop key in its layer
	bKeys := map[string]bool{}
	for _, l := range layers {
		_, forB, err := onion.Peel([]*onion.KeyPair{e.a}, l)
		if err != nil {
			t.Fatal(err)
		}
		hop, _, err := onion.Peel([]*onion.KeyPair{e.b}, forB)
		if err != nil {
			t.Fatal(err)
		}
		bKeys[string(hop.Key)] = true
	}

	runs := []*running{start(e.relayA(t, nil)), start(e.relayB(t, e.writer(t), nil))}
	defer func() {
		for _, r := range runs {
			r.stop(t)
		}
	}()
	publishAll(t, &publish.Publisher{JS: e.connect(t), Subject: protocol.RelaySubject("a")}, layers, 4)
	msgs := e.waitKafka(t, len(layers), 60*time.Second)

	// what a reader of topic reports sees: the Kafka key of each report;
	// the aggregator's key tells us which tag each report has
	bucketTags := map[string]map[[32]byte]bool{}
	tagKey := map[[32]byte]string{}
	split := 0
	for _, m := range msgs {
		_, in, err := onion.Peel([]*onion.KeyPair{e.agg}, m.Value)
		if err != nil {
			t.Fatal(err)
		}
		r, err := star.ParseReport(in)
		if err != nil {
			t.Fatal(err)
		}
		if tagOf[string(r.ID[:])] != r.Tag {
			t.Fatal("a report arrived that was not sent")
		}
		k := string(m.Key)
		if bucketTags[k] == nil {
			bucketTags[k] = map[[32]byte]bool{}
		}
		bucketTags[k][r.Tag] = true
		if prev, ok := tagKey[r.Tag]; ok && prev != k {
			split++
		}
		tagKey[r.Tag] = k
	}
	alone, fewest := 0, tags
	for _, ts := range bucketTags {
		if len(ts) == 1 {
			alone++
		}
		fewest = min(fewest, len(ts))
	}
	fmt.Printf("ATTACK tag-bucket-link: kafka key distinguishes %d values for %d tags (relay b sees %d); %d tags alone in their bucket, fewest tags per bucket %d; %d tags split over keys\n",
		len(bucketTags), len(tagKey), len(bKeys), alone, fewest, split)
	if len(tagKey) != tags {
		t.Fatalf("%d distinct tags arrived, want %d", len(tagKey), tags)
	}
	if split > 0 {
		t.Fatalf("%d tags have reports under two Kafka keys: their shares would land in different partitions", split)
	}
	if len(bucketTags) > onion.ReportBuckets || len(bKeys) > onion.ReportBuckets || alone > 0 {
		t.Fatalf("attack succeeds: %d Kafka key values (relay b sees %d) for %d tags, %d tags alone in their bucket; want at most %d and none alone",
			len(bucketTags), len(bKeys), tags, alone, onion.ReportBuckets)
	}
}

// TestAttackRelayAmplification: one client publishes onions whose layers
// alternate relay a → relay b → relay a → … (13 layers, the route allows
// 3), so that each published message makes the relays peel, store and
// forward one layer per hop. Relay a may forward only to relay b and relay
// b only to Kafka: each message costs at most the route's 2 peels, and the
// extra layers are dropped as wrong_hop.
func TestAttackRelayAmplification(t *testing.T) {
	const (
		n     = 100
		depth = 13 // aggregator, b (Kafka), then alternating a, b, …, a
	)
	e := newEnv(t, 0)
	layers := make([][]byte, n)
	for i := range layers {
		l, err := onion.SealLayer(e.agg.PublicKey(), onion.Hop{Kind: onion.HopDeliver}, []byte(fmt.Sprintf("report %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if l, err = onion.SealLayer(e.b.PublicKey(), onion.Hop{Kind: onion.HopKafka, Key: []byte{byte(i)}}, l); err != nil {
			t.Fatal(err)
		}
		for d := 3; d <= depth; d++ {
			if d%2 == 1 { // a layer for relay a, forwarding to b
				l, err = onion.SealLayer(e.a.PublicKey(), onion.Hop{Kind: onion.HopRelay, Subject: protocol.RelaySubject("b")}, l)
			} else { // a layer for relay b, forwarding back to a
				l, err = onion.SealLayer(e.b.PublicKey(), onion.Hop{Kind: onion.HopRelay, Subject: protocol.RelaySubject("a")}, l)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		layers[i] = l
	}
	var stA, stB relays.Stats
	ra, rb := e.relayA(t, &stA), e.relayB(t, e.writer(t), &stB)
	ra.PoolSize, rb.PoolSize = 1, 1 // mixing is not under test: forward at once
	runs := []*running{start(ra), start(rb)}
	defer func() {
		for _, r := range runs {
			r.stop(t)
		}
	}()
	publishAll(t, &publish.Publisher{JS: e.connect(t), Subject: protocol.RelaySubject("a")}, layers, 4)
	// wait until the layers stop bouncing: inboxes drained and no peel for a while
	deadline := time.Now().Add(60 * time.Second)
	var last uint64
	for stable := 0; stable < 10; {
		if time.Now().After(deadline) {
			t.Fatal("relays kept peeling for 60 s")
		}
		time.Sleep(100 * time.Millisecond)
		in := stA.In.Load() + stB.In.Load()
		ok, err := relays.Drained(context.Background(), e.js, "a", "b")
		if err != nil {
			t.Fatal(err)
		}
		if ok && in == last && in >= n {
			stable++
		} else {
			stable = 0
		}
		last = in
	}
	a, b := stA.Snapshot(), stB.Snapshot()
	peels := a.In + b.In
	extra := int(peels) - 2*n
	msgs, err := readAll(context.Background(), e.broker.Addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ATTACK relay-amplification: %d extra layers peeled for %d alternating-hop onions of %d layers (route allows 2 peels per message; %d peels in all, %d wrong_hop drops, %d reached Kafka)\n",
		max(extra, 0), n, depth, peels, a.WrongHop+b.WrongHop, len(msgs))
	t.Logf("relay a %+v; relay b %+v", a, b)
	if extra > 0 {
		t.Fatalf("attack succeeds: %d peels for %d messages, %.1f per message (route: 2)", peels, n, float64(peels)/n)
	}
	if a.Forwarded != n || b.WrongHop != n || len(msgs) != 0 {
		t.Fatalf("relay a forwarded %d (want %d), relay b dropped %d as wrong_hop (want %d), %d reached Kafka (want 0)", a.Forwarded, n, b.WrongHop, n, len(msgs))
	}
}
