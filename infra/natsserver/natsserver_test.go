package natsserver

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestStartPersistsStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	t0 := time.Now()
	s, err := Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("embedded nats-server with JetStream ready in %v at %s", time.Since(t0), s.URL)
	if s.Port == 0 {
		t.Fatalf("port not reported")
	}
	nc, err := nats.Connect(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := js.Publish(ctx, "t.x", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	s.Shutdown()
	s.Shutdown() // idempotent

	s2, err := Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown()
	nc2, err := nats.Connect(s2.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	st, err := js2.Stream(ctx, "T")
	if err != nil {
		t.Fatalf("stream not restored: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 10 {
		t.Fatalf("restored %d messages, want 10", info.State.Msgs)
	}
}

func TestStartNeedsDir(t *testing.T) {
	if _, err := Start(context.Background(), ""); err == nil {
		t.Fatal("empty dir accepted")
	}
}

// TestCluster starts a 3-node cluster, puts an R3 stream on it, stops the
// node a client is connected to, publishes through the others, restarts the
// node and checks every message is there (counted by the client, not
// hard-coded) and the stream is replicated on all three.
func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	c, err := StartCluster(ctx, t.TempDir(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	t.Logf("3-node JetStream cluster ready in %v: %s", time.Since(t0).Round(time.Millisecond), c.URL())
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.ConnectedClusterName() != ClusterName {
		t.Fatalf("cluster name %q, want %q", nc.ConnectedClusterName(), ClusterName)
	}
	js, _ := jetstream.New(nc)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	publish := func(n int) {
		for i := 0; i < n; i++ {
			pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
			for {
				tctx, tcancel := context.WithTimeout(pctx, 2*time.Second)
				// the message id makes a retry after a lost ack store once
				_, err := js.Publish(tctx, "t.x", []byte{byte(i)}, jetstream.WithMsgID(strconv.Itoa(sent)))
				tcancel()
				if err == nil {
					break
				}
				if pctx.Err() != nil {
					t.Fatalf("publish: %v", err)
				}
				t.Logf("publish %d: %v (%s)", i, err, nc.ConnectedUrl())
				time.Sleep(500 * time.Millisecond) // no stream leader or subject interest yet
			}
			pcancel()
			sent++
		}
	}
	publish(10)
	victim := -1
	for i, u := range c.URLs {
		if u == nc.ConnectedUrl() {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("connected to %s, not a node URL %v", nc.ConnectedUrl(), c.URLs)
	}
	c.Stop(victim)
	if c.Node(victim) != nil {
		t.Fatal("stopped node still listed")
	}
	publish(10)
	if err := c.Restart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx, victim); err == nil {
		t.Fatal("restart of a running node accepted")
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if int(info.State.Msgs) != sent {
		t.Fatalf("stream holds %d messages, %d were acknowledged", info.State.Msgs, sent)
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream cluster info %+v, want a leader and 2 replicas", info.Cluster)
	}
	t.Logf("node %d stopped and restarted; %d messages kept on an R3 stream", victim, sent)
}

func TestStartClusterNeedsThree(t *testing.T) {
	if _, err := StartCluster(context.Background(), t.TempDir(), 2, nil); err == nil {
		t.Fatal("2-node cluster accepted")
	}
}

// TestStartMaxPayload: an embedded server takes a message of 1.5 MiB (over
// nats-server's default max_payload of 1 MiB, under crowdlog's 2 MiB) and
// delivers it byte for byte, and refuses one over 2 MiB.
func TestStartMaxPayload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	nc, err := nats.Connect(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.MaxPayload() != 2<<20 {
		t.Fatalf("max payload %d, want %d", nc.MaxPayload(), 2<<20)
	}
	sub, err := nc.SubscribeSync("big")
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 3<<19)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	if err := nc.Publish("big", msg); err != nil {
		t.Fatalf("publish 1.5 MiB: %v", err)
	}
	got, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("waiting 10 s for the 1.5 MiB message: %v", err)
	}
	if string(got.Data) != string(msg) {
		t.Fatalf("got %d bytes, not the %d published", len(got.Data), len(msg))
	}
	if err := nc.Publish("big", make([]byte, 2<<20+1)); err == nil {
		t.Fatal("a message over 2 MiB was accepted")
	}
}
