package clickhouse_test

import (
	"context"
	"testing"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"
)

// TestRestartSamePorts stops a server and restarts it on the same directory
// and ports: a client opened before the outage fails during it and works
// again afterwards, and the rows written before the outage are still there.
func TestRestartSamePorts(t *testing.T) {
	s := startOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := chgo.Open(&chgo.Options{Addr: []string{s.TCPAddr}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Exec(ctx, "CREATE TABLE t (x UInt32) ENGINE = MergeTree ORDER BY x"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "INSERT INTO t SELECT number FROM system.numbers LIMIT 1000"); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("ping answered while the server was stopped")
	}
	n, err := s.Restart(ctx)
	if err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	if n.TCPAddr != s.TCPAddr || n.HTTPAddr != s.HTTPAddr || n.Dir != s.Dir {
		t.Fatalf("restarted on %s/%s in %s, want %s/%s in %s", n.TCPAddr, n.HTTPAddr, n.Dir, s.TCPAddr, s.HTTPAddr, s.Dir)
	}
	// the same client reconnects by itself (the pool drops dead connections)
	var count, sum uint64
	var last error
	for i := 0; i < 20; i++ {
		if last = conn.QueryRow(ctx, "SELECT count(), sum(x) FROM t").Scan(&count, &sum); last == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("query after restart: %v", last)
	}
	if want := uint64(1000 * 999 / 2); count != 1000 || sum != want {
		t.Fatalf("after restart: count %d sum %d, want 1000 and %d", count, sum, want)
	}
}
