package spent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsserver"
)

func id(i int) [32]byte      { return sha256.Sum256(fmt.Appendf(nil, "token %d", i)) }
func binding(i int) [32]byte { return sha256.Sum256(fmt.Appendf(nil, "element %d", i)) }

func connect(t *testing.T, ctx context.Context, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestSpend: a batch is recorded; a second spend of an id with another
// binding is double, with the same binding (a retried request) it is not;
// a second replica (another connection and Store) and a restarted server
// see the same spends; the double flags of a mixed batch are exactly the
// ids spent before.
func TestSpend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // bounds the whole test: server start, publishes, acks
	defer cancel()
	dir := t.TempDir()
	srv, err := natsserver.Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Open(ctx, connect(t, ctx, srv.URL), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var first []Spend
	for i := range 100 {
		first = append(first, Spend{ID: id(i), Binding: binding(i)})
	}
	double, err := a.Spend(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(double, true) {
		t.Fatalf("fresh tokens reported double: %v", double)
	}
	// retry of the same request: not double
	if double, err = a.Spend(ctx, first[:10]); err != nil || slices.Contains(double, true) {
		t.Fatalf("retry with the same bindings: %v, %v", double, err)
	}
	// a second replica: ids 95..104 with other bindings for 95..99
	b, err := Open(ctx, connect(t, ctx, srv.URL), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mixed []Spend
	var want []bool
	for i := 95; i < 105; i++ {
		mixed = append(mixed, Spend{ID: id(i), Binding: binding(1000 + i)})
		want = append(want, i < 100)
	}
	if double, err = b.Spend(ctx, mixed); err != nil || !slices.Equal(double, want) {
		t.Fatalf("mixed batch at a second replica: double %v, %v; want %v", double, err, want)
	}
	// the same id twice in one batch with different bindings: the second is double
	dup := []Spend{{ID: id(500), Binding: binding(1)}, {ID: id(500), Binding: binding(2)}}
	if double, err = b.Spend(ctx, dup); err != nil || !slices.Equal(double, []bool{false, true}) {
		t.Fatalf("one id twice in a batch: %v, %v", double, err)
	}
	srv.Shutdown()

	srv2, err := natsserver.Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Shutdown()
	c, err := Open(ctx, connect(t, ctx, srv2.URL), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if double, err = c.Spend(ctx, []Spend{{ID: id(3), Binding: binding(77)}, {ID: id(200), Binding: binding(200)}}); err != nil || !slices.Equal(double, []bool{true, false}) {
		t.Fatalf("after a restart: %v, %v; want [true false]", double, err)
	}
	if bnd, ok, err := c.Spent(ctx, id(3)); err != nil || !ok || bnd != binding(3) {
		t.Fatalf("Spent(id 3) = %x, %v, %v; want the first binding", bnd, ok, err)
	}
	if _, ok, err := c.Spent(ctx, id(9999)); err != nil || ok {
		t.Fatalf("Spent of an unspent id = %v, %v", ok, err)
	}
}

// BenchmarkSpend100 is one request's spends of 100 tokens (one async
// batch) on an embedded single server.
func BenchmarkSpend100(b *testing.B) {
	ctx := context.Background()
	srv, err := natsserver.Start(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	s, err := Open(ctx, nc, Options{})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for b.Loop() {
		batch := make([]Spend, 100)
		for i := range batch {
			batch[i] = Spend{ID: id(n), Binding: binding(n)}
			n++
		}
		if _, err := s.Spend(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(n), "µs/token")
}

// TestOpenRefusesShortTTL: a service that needs spends kept for need
// refuses a bucket whose TTL is shorter (or finite where it needs
// forever): on such a bucket a token's spend is forgotten while the token
// still verifies, and the same token is then accepted with another
// binding (the control below, on the real server: a double spend after
// the bucket's TTL).
func TestOpenRefusesShortTTL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second
	short, err := Open(ctx, connect(t, ctx, srv.URL), Options{TTL: ttl}) // creates the bucket with TTL 1 s
	if err != nil {
		t.Fatal(err)
	}
	for _, need := range []time.Duration{0, 2 * ttl, time.Hour} {
		if _, err := Open(ctx, connect(t, ctx, srv.URL), Options{TTL: need}); !errors.Is(err, ErrTTLTooShort) {
			t.Errorf("bucket TTL %v, need %v: Open = %v, want ErrTTLTooShort", ttl, need, err)
		}
	}
	if _, err := Open(ctx, connect(t, ctx, srv.URL), Options{TTL: ttl / 2}); err != nil {
		t.Errorf("bucket TTL %v, need %v: %v", ttl, ttl/2, err)
	}
	// the control: what a service that needs longer would have risked
	if double, err := short.Spend(ctx, []Spend{{ID: id(1), Binding: binding(1)}}); err != nil || double[0] {
		t.Fatalf("first spend: %v, %v", double, err)
	}
	time.Sleep(ttl + 500*time.Millisecond)
	double, err := short.Spend(ctx, []Spend{{ID: id(1), Binding: binding(2)}})
	if err != nil {
		t.Fatal(err)
	}
	if double[0] {
		t.Fatalf("after the bucket's TTL the spend was still remembered: the control shows nothing")
	}
	t.Logf("control: after the bucket's TTL (%v) the same token was accepted again with another binding", ttl)
}
