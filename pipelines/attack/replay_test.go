package attack

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/relays"
)

// collectWriter is relay b's Kafka: it keeps what was written.
type collectWriter struct {
	mu   sync.Mutex
	msgs []kafka.Message
}

func (c *collectWriter) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, msgs...)
	return nil
}

func (c *collectWriter) values() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]byte
	for _, m := range c.msgs {
		out = append(out, m.Value)
	}
	return out
}

// TestAttackReplay: one report's onion replayed 1,000 times into relay a
// (real NATS JetStream, no Nats-Msg-Id so the stream does not dedup) is
// forwarded once (999 "replay" drops), and its aggregator layer replayed
// 1,000 more times straight into the aggregator (a relay-b operator
// bypassing the relays) is counted once: 1 report, 1 impression.
func TestAttackReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
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
	js, _ := jetstream.New(nc)
	if err := relays.EnsureStream(ctx, js, 0); err != nil {
		t.Fatal(err)
	}
	ka, _ := onion.GenerateKeyPair(1)
	kb, _ := onion.GenerateKeyPair(2)
	kagg, _ := onion.GenerateKeyPair(3)
	w := &collectWriter{}
	var stA, stB relays.Stats
	rctx, rcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, r := range []*relays.Relay{
		{Name: "a", Keys: []*onion.KeyPair{ka}, JS: js, Stats: &stA, Logger: quiet()},
		{Name: "b", Keys: []*onion.KeyPair{kb}, JS: js, Kafka: w, Stats: &stB, Logger: quiet()},
	} {
		wg.Add(1)
		go func(r *relays.Relay) { defer wg.Done(); r.Run(rctx) }(r)
	}
	defer func() { rcancel(); wg.Wait() }()

	s, _ := star.DeriveSealing(star.LocalOmega(fxApp, fxEpoch, "replayed"), fxApp, fxEpoch, star.FTu, 1)
	u, _ := star.NewUserSecret()
	rep, _ := s.Seal(&u, "replayed", "replayed")
	rb, _ := rep.MarshalBinary()
	l3, _ := onion.SealLayer(kagg.PublicKey(), onion.Hop{Kind: onion.HopDeliver}, rb)
	l2, _ := onion.SealLayer(kb.PublicKey(), onion.Hop{Kind: onion.HopKafka, Key: onion.TagBucket(rep.Tag)}, l3)
	l1, _ := onion.SealLayer(ka.PublicKey(), onion.Hop{Kind: onion.HopRelay, Subject: protocol.RelaySubject("b")}, l2)
	const n = 1000
	for i := 0; i < n; i++ {
		if _, err := js.Publish(ctx, protocol.RelaySubject("a"), l1); err != nil {
			t.Fatal(err)
		}
	}
	for {
		ok, err := relays.Drained(ctx, js, "a", "b")
		if err != nil {
			t.Fatal(err)
		}
		if ok && stA.In.Load() >= n {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := w.values()
	a := stA.Snapshot()
	t.Logf("relays: relay a got %d, forwarded %d, dropped %d as replay; Kafka got %d", a.In, a.Forwarded, a.Replay, len(got))
	if len(got) != 1 || a.Replay != n-1 {
		t.Fatalf("relays forwarded %d copies (replay drops %d); want 1 copy, %d drops", len(got), a.Replay, n-1)
	}
	p := aggregator.NewPartition(0, 1, []*onion.KeyPair{kagg})
	impressions := len(p.Apply(aggregator.Message{Value: got[0]}))
	for i := 0; i < n; i++ {
		impressions += len(p.Apply(aggregator.Message{Value: l3}))
	}
	t.Logf("aggregator: %d replays of the aggregator layer: %d report, %d impression, %d dropped as duplicate",
		n, p.Stats.Reports, impressions, p.Stats.Dropped["duplicate"])
	fmt.Printf("ATTACK replay: %d copies of one onion into relay a reached Kafka %d time(s) (%d replay drops); %d aggregator-layer replays counted %d report(s), %d impression(s)\n",
		n, len(got), a.Replay, n, p.Stats.Reports, impressions)
	if p.Stats.Reports != 1 || impressions != 1 || p.Stats.Dropped["duplicate"] != n {
		t.Fatalf("replayed report counted %d times (%d impressions), want once", p.Stats.Reports, impressions)
	}
}
