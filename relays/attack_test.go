package relays_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
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
		tmo   = 2 * time.Second
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
	if tailWait > tmo+time.Second {
		t.Fatalf("the last partial pool waited %v, more than T = %v", tailWait, tmo)
	}
}
