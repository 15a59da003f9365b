package relays_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/relays"
)

// TestRelayPoolTimeoutBoundsWait: a message arriving alone at a relay with
// P = 64 is held (not forwarded at once) and forwarded after T: the pool
// never holds a message forever, and it acks only after forwarding.
func TestRelayPoolTimeoutBoundsWait(t *testing.T) {
	const tmo = 700 * time.Millisecond
	e := newEnv(t, 0)
	rs := randomReports(3)
	rec := &batchRecorder{w: e.writer(t)}
	var st relays.Stats
	rb := e.relayB(t, rec, &st)
	rb.PoolSize, rb.PoolTimeout = 64, tmo
	run := start(rb)
	defer run.stop(t)
	ctx := context.Background()
	for _, r := range rs {
		t0 := time.Now()
		if _, err := e.js.Publish(ctx, protocol.RelaySubject("b"), e.layerForB(t, r)); err != nil {
			t.Fatal(err)
		}
		before := rec.count()
		for rec.count() == before {
			if time.Since(t0) > tmo+5*time.Second {
				t.Fatal("a lone message was never forwarded")
			}
			time.Sleep(5 * time.Millisecond)
		}
		waited := time.Since(t0)
		t.Logf("lone message forwarded after %v (T = %v)", waited, tmo)
		if waited < tmo-100*time.Millisecond {
			t.Fatalf("lone message forwarded after %v, before T = %v: the pool did not hold it", waited, tmo)
		}
	}
	e.waitDrained(t) // acked after forwarding: nothing left pending
	if s := st.Snapshot(); s.Forwarded != 3 || s.Batches != 3 || s.TimeoutFlushes != 3 {
		t.Fatalf("stats %+v, want 3 forwarded in 3 timeout flushes", s)
	}
}

// TestRunRejectsShortAckWait: a pool timeout longer than half the ack wait
// would let JetStream redeliver held messages; Run refuses it.
func TestRunRejectsShortAckWait(t *testing.T) {
	k, _ := onion.GenerateKeyPair(1)
	e := newEnv(t, 0)
	r := &relays.Relay{Name: "a", Keys: []*onion.KeyPair{k}, JS: e.connect(t), Logger: quiet,
		PoolTimeout: 20 * time.Second, AckWait: 30 * time.Second}
	err := r.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "pool timeout") {
		t.Fatalf("Run = %v, want a pool timeout / ack wait error", err)
	}
}
