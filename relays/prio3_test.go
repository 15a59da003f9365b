package relays_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	ikafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/relays"
)

// readTopic returns every record of topic, over all partitions, reading
// at most 64 MiB per partition fetch (a record is up to about 1 MiB).
func readTopic(ctx context.Context, addr, topic string) ([]kafka.Message, error) {
	n, err := ikafka.Partitions(ctx, addr, topic)
	if err != nil {
		return nil, err
	}
	var all []kafka.Message
	for p := 0; p < n; p++ {
		conn, err := ikafka.Dialer(ctx).DialLeader(ctx, "tcp", addr, topic, p) // authenticated as ikafka.AuthFrom(ctx)
		if err != nil {
			return nil, err
		}
		last, err := conn.ReadLastOffset()
		if err != nil {
			conn.Close()
			return nil, err
		}
		for next := int64(0); next < last; {
			if _, err := conn.Seek(next, kafka.SeekAbsolute); err != nil {
				conn.Close()
				return nil, err
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			batch := conn.ReadBatch(1, 64<<20)
			got := 0
			for next < last {
				m, err := batch.ReadMessage()
				if err != nil {
					break
				}
				all = append(all, m)
				next = m.Offset + 1
				got++
			}
			batch.Close()
			if got == 0 {
				conn.Close()
				return nil, fmt.Errorf("partition %d: no record at offset %d of %d", p, next, last)
			}
		}
		conn.Close()
	}
	return all, nil
}

// TestRelayCarriesPrio3Upload: three Prio3 uploads of the largest
// measurement the size classes were made for (SumVec, L = 10,000 keywords,
// b = 4 bits; 655,204 bytes each with both tokens) travel client → relay a → relay b
// (relays.New, its own Prio3 writer) over the embedded NATS server's relay
// stream to kfake's topic prio3-uploads, created as `crowdlog topics`
// does (max.message.bytes 2 MiB). The relay b layer is the 786432-byte
// class and relay a's one step more; each record is exactly one upload's
// bytes, keyed by the campaign, without headers, and opens at the leader
// with the report id Shard returned. The largest payload the classes hold
// (1,048,513 bytes beside this campaign name: layers of 1048576 and 1049088
// bytes, over nats-server's default max_payload of 1 MiB) arrives byte for
// byte too. A HopKafkaPrio3 layer sent straight to relay a is dropped there
// as wrong_hop.
func TestRelayCarriesPrio3Upload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newEnv(t, 0)
	addr := e.broker.Addr
	if err := ikafka.EnsureTopics(ctx, addr, 4, protocol.Prio3UploadsTopic); err != nil {
		t.Fatal(err)
	}
	if err := ikafka.EnsureMaxMessageBytes(ctx, addr, ikafka.TopicMaxMessageBytes, protocol.Prio3UploadsTopic); err != nil {
		t.Fatal(err)
	}
	// relay b from its key file, as `crowdlog relay` builds it
	bPath := filepath.Join(t.TempDir(), "relay-b.key")
	if err := onion.SaveKeyPair(bPath, "relay-b", e.b); err != nil {
		t.Fatal(err)
	}
	bKey, err := onion.LoadKeyPair(bPath)
	if err != nil {
		t.Fatal(err)
	}
	var stA relays.Stats
	rb, closeW, err := relays.New(ctx, e.connect(t), relays.Config{Name: "b", KeyPaths: []string{bPath}, Kafka: []string{addr}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer closeW()
	ra := e.relayA(t, &stA)
	runs := []*running{start(ra), start(rb)}
	defer func() {
		for _, r := range runs {
			r.stop(t)
		}
	}()

	const campaign = "kw-10k"
	vdaf, err := p3.New(campaign, p3.Config{Kind: p3.KindSumVec, Length: 10000, Bits: 4})
	if err != nil {
		t.Fatal(err)
	}
	leader, _ := onion.GenerateKeyPair(7)
	helper, _ := onion.GenerateKeyPair(8)
	rng := rand.New(rand.NewPCG(5, 6))
	want := map[string]p3.ReportID{} // upload bytes → report id
	var layers [][]byte
	for i := 0; i < 3; i++ {
		counts := make([]uint64, 10000)
		for j := range counts {
			counts[j] = uint64(rng.IntN(20)) // some over 2^4 − 1: clipped
		}
		upload, id, _, err := vdaf.Shard(campaign, p3.DayOf(time.Now()), counts, leader.PublicKey(), helper.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			t.Logf("upload for L = 10,000, b = 4: %d bytes", len(upload))
		}
		want[string(upload)] = id
		forB, err := onion.SealLayer(bKey.PublicKey(), onion.Hop{Kind: onion.HopKafkaPrio3, Key: []byte(campaign)}, upload)
		if err != nil {
			t.Fatal(err)
		}
		forA, err := onion.SealLayer(e.a.PublicKey(), onion.Hop{Kind: onion.HopRelay, Subject: protocol.RelaySubject("b")}, forB)
		if err != nil {
			t.Fatal(err)
		}
		if len(forB) != 786432 || len(forA) != 786944 {
			t.Fatalf("upload of %d bytes: layers %d (relay b) and %d (relay a), want 786432 and 786944", len(upload), len(forB), len(forA))
		}
		layers = append(layers, forA)
	}
	// the largest payload of the largest class (not a real upload: the leader
	// would refuse it; the transport must carry it)
	largest := make([]byte, 1048576-(2+32+16+1+1+1+4)-len(campaign))
	for i := range largest {
		largest[i] = byte(rng.Uint32())
	}
	forB, err := onion.SealLayer(bKey.PublicKey(), onion.Hop{Kind: onion.HopKafkaPrio3, Key: []byte(campaign)}, largest)
	if err != nil {
		t.Fatal(err)
	}
	forA, err := onion.SealLayer(e.a.PublicKey(), onion.Hop{Kind: onion.HopRelay, Subject: protocol.RelaySubject("b")}, forB)
	if err != nil || len(forB) != 1048576 || len(forA) != 1049088 {
		t.Fatalf("largest payload: layers %d and %d, want 1048576 and 1049088 (%v)", len(forB), len(forA), err)
	}
	layers = append(layers, forA)
	// off the route: a Prio3 layer for relay a, which is not the last hop
	stray, err := onion.SealLayer(e.a.PublicKey(), onion.Hop{Kind: onion.HopKafkaPrio3, Key: []byte(campaign)}, []byte("upload"))
	if err != nil {
		t.Fatal(err)
	}
	layers = append(layers, stray)

	pub := &publish.Publisher{JS: e.connect(t), Subject: protocol.RelaySubject("a"), Logger: quiet}
	publishAll(t, pub, layers, 2)

	var msgs []kafka.Message
	for {
		msgs, err = readTopic(ctx, addr, protocol.Prio3UploadsTopic)
		if err == nil && len(msgs) >= len(want)+1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s has %d records after 2 min, want %d (err %v; relay a %+v, relay b %+v)",
				protocol.Prio3UploadsTopic, len(msgs), len(want)+1, err, stA.Snapshot(), rb.Stats.Snapshot())
		case <-time.After(100 * time.Millisecond):
		}
	}
	e.waitDrained(t)
	got := map[string]bool{}
	for _, m := range msgs {
		if string(m.Value) == string(largest) && string(m.Key) == campaign {
			got["largest"] = true
			continue
		}
		id, ok := want[string(m.Value)]
		if !ok {
			t.Fatalf("record of %d bytes is no upload the client sent", len(m.Value))
		}
		if string(m.Key) != campaign || len(m.Headers) != 0 {
			t.Fatalf("record keyed %q with %d headers, want key %q and none", m.Key, len(m.Headers), campaign)
		}
		r, err := p3.OpenReport([]*onion.KeyPair{leader}, m.Value)
		if err != nil || r.ID != id || r.Campaign != campaign {
			t.Fatalf("record does not open at the leader as the report sent: %v", err)
		}
		got[string(m.Value)] = true
	}
	a, b := stA.Snapshot(), rb.Stats.Snapshot()
	t.Logf("relay a %+v, relay b %+v", a, b)
	if len(msgs) != len(want)+1 || len(got) != len(want)+1 {
		t.Fatalf("%d records, %d distinct payloads; want %d each", len(msgs), len(got), len(want)+1)
	}
	if a.Forwarded != 4 || b.Forwarded != 4 || a.WrongHop != 1 || a.Dropped() != 1 || b.Dropped() != 0 {
		t.Fatalf("relay a forwarded %d, dropped %d (wrong hop %d); relay b forwarded %d, dropped %d; want 4, 1 (1), 4, 0",
			a.Forwarded, a.Dropped(), a.WrongHop, b.Forwarded, b.Dropped())
	}
}

// TestRelayFetchMaxBytes: a relay's fetch stops at FetchMaxBytes whatever
// BatchSize, so a backlog of Prio3 uploads is not held in memory all at
// once. Ten layers of the 786,944-byte class wait in relay a's inbox;
// relay a with FetchMaxBytes 2 MiB (room for two) and PoolSize 1 (every
// fetch forwarded as its own batch) forwards all ten to relay b's inbox in
// at least five batches (without the bound it took two).
// A FetchMaxBytes below MinFetchMaxBytes, which would leave the largest
// layer unfetchable, is refused.
func TestRelayFetchMaxBytes(t *testing.T) {
	e := newEnv(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inner := make([]byte, 786432)
	var layers [][]byte
	for i := 0; i < 10; i++ {
		inner[0] = byte(i) // distinct layers (the stream deduplicates by content)
		l, err := onion.SealLayer(e.a.PublicKey(), onion.Hop{Kind: onion.HopRelay, Subject: protocol.RelaySubject("b")}, inner)
		if err != nil || len(l) != 786944 {
			t.Fatalf("layer of %d bytes: %v", len(l), err)
		}
		layers = append(layers, l)
	}
	publishAll(t, &publish.Publisher{JS: e.connect(t), Subject: protocol.RelaySubject("a"), Logger: quiet}, layers, 1)

	bad := e.relayA(t, &relays.Stats{})
	bad.FetchMaxBytes = relays.MinFetchMaxBytes - 1
	if err := bad.Run(ctx); err == nil {
		t.Fatalf("Run with FetchMaxBytes %d: no error", bad.FetchMaxBytes)
	}

	var st relays.Stats
	ra := e.relayA(t, &st)
	ra.FetchMaxBytes, ra.PoolSize = relays.MinFetchMaxBytes, 1
	run := start(ra)
	defer run.stop(t)
	for st.Forwarded.Load() < 10 {
		select {
		case <-ctx.Done():
			t.Fatalf("relay a forwarded %d of 10 layers in 1 min (%+v)", st.Forwarded.Load(), st.Snapshot())
		case <-time.After(20 * time.Millisecond):
		}
	}
	s := st.Snapshot()
	t.Logf("relay a with FetchMaxBytes 2 MiB: %+v", s)
	if s.Batches < 5 || s.Dropped() != 0 {
		t.Fatalf("ten 786,944-byte layers forwarded in %d batches (%d dropped); want at least 5, none dropped", s.Batches, s.Dropped())
	}
}
