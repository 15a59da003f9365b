package relays_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/relays"
)

// TestEnsureStreamReplicas: on one server the relay stream has 1 replica;
// on a 3-node cluster EnsureStream makes it 3 whether the client was given
// one seed URL or all three, and a client that knows fewer servers does not
// scale an existing stream down. The expected counts come from the servers'
// own view (the stream's cluster info), not from Replicas.
func TestEnsureStreamReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	replicasOf := func(js jetstream.JetStream) int {
		t.Helper()
		st, err := js.Stream(ctx, relays.Stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Cluster == nil {
			return 1
		}
		return 1 + len(info.Cluster.Replicas) // the leader and its followers
	}
	connect := func(url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
		t.Helper()
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js
	}

	one, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer one.Shutdown()
	nc, js := connect(one.URL)
	if got := natsconn.Replicas(nc); got != 1 {
		t.Fatalf("single server: Replicas = %d, want 1", got)
	}
	if err := relays.EnsureStream(ctx, js, 0); err != nil {
		t.Fatal(err)
	}
	if got := replicasOf(js); got != 1 {
		t.Fatalf("single server: stream has %d replicas, want 1", got)
	}

	c, err := natsserver.StartCluster(ctx, t.TempDir(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	for _, url := range []string{c.URLs[1], c.URL()} {
		nc, _ := connect(url)
		if got := natsconn.Replicas(nc); got != len(c.URLs) {
			t.Fatalf("cluster via %q: Replicas = %d, want %d (servers known: %v)", url, got, len(c.URLs), nc.Servers())
		}
	}
	_, js = connect(c.URL())
	if err := relays.EnsureStream(ctx, js, 0); err != nil {
		t.Fatal(err)
	}
	if got := replicasOf(js); got != len(c.URLs) {
		t.Fatalf("cluster: stream has %d replicas, want %d", got, len(c.URLs))
	}
	// A client that knows one server only (Replicas 1) updates the limit
	// and keeps the replicas.
	nc1, js1 := connect(c.URLs[0], nats.IgnoreDiscoveredServers())
	if got := natsconn.Replicas(nc1); got != 1 {
		t.Fatalf("one known server: Replicas = %d, want 1", got)
	}
	if err := relays.EnsureStream(ctx, js1, 10); err != nil {
		t.Fatal(err)
	}
	st, _ := js.Stream(ctx, relays.Stream)
	if cfg := st.CachedInfo().Config; cfg.Replicas != len(c.URLs) || cfg.MaxMsgsPerSubject != 10 {
		t.Fatalf("after update: replicas %d, per-subject limit %d; want %d, 10", cfg.Replicas, cfg.MaxMsgsPerSubject, len(c.URLs))
	}
}
