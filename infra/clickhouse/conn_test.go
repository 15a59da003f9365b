package clickhouse_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// gatedCtx is a cancellable context whose Done, when called from
// clickhouse-go's batch watchdog goroutine (contextWatchdog), waits until
// gate is closed: it holds that goroutine back the way a loaded machine
// may, so the test decides when it runs (after Send returned, the context
// was cancelled and the next query took the connection).
type gatedCtx struct {
	context.Context
	gate    chan struct{}
	watched chan struct{} // closed when the watchdog first called Done
	once    sync.Once
}

func (g *gatedCtx) Done() <-chan struct{} {
	pc := make([]uintptr, 4)
	n := runtime.Callers(2, pc)
	f, _ := runtime.CallersFrames(pc[:n]).Next()
	if strings.Contains(f.Function, "contextWatchdog") {
		g.once.Do(func() { close(g.watched) })
		<-g.gate
	}
	return g.Context.Done()
}

// lateWatchdogRounds runs rounds of: a batch insert under a gated context,
// Send, cancel the context, start a query that streams rows on the pool's
// only connection, let the held-back watchdog run, read all rows. It
// returns how many rounds' queries failed with net.ErrClosed, and how many
// rounds the watchdog called the batch's own context.
func lateWatchdogRounds(t *testing.T, conn driver.Conn, rounds int) (closed, watched int) {
	t.Helper()
	bg, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	for i := 0; i < rounds; i++ {
		inner, cancel := context.WithTimeout(bg, 30*time.Second)
		g := &gatedCtx{Context: inner, gate: make(chan struct{}), watched: make(chan struct{})}
		b, err := conn.PrepareBatch(g, "INSERT INTO t (x)")
		if err != nil {
			t.Fatalf("round %d: PrepareBatch: %v", i, err)
		}
		if err := b.Append(uint64(i)); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(); err != nil {
			t.Fatalf("round %d: Send: %v", i, err)
		}
		cancel() // as `defer cancel()` does when the insert's function returns
		rows, err := conn.Query(bg, "SELECT number FROM system.numbers LIMIT 500000")
		if err != nil {
			close(g.gate)
			if errors.Is(err, net.ErrClosed) {
				closed++
				continue
			}
			t.Fatalf("round %d: query: %v", i, err)
		}
		close(g.gate)
		select {
		case <-g.watched:
			watched++
		default:
		}
		var n int
		for rows.Next() {
			n++
		}
		err = rows.Err()
		rows.Close()
		switch {
		case errors.Is(err, net.ErrClosed):
			closed++
		case err != nil:
			t.Fatalf("round %d: read rows: %v", i, err)
		case n != 500000:
			t.Fatalf("round %d: read %d rows, want 500000", i, n)
		}
	}
	return closed, watched
}

// TestSafeBatchesLateWatchdog reproduces, without timing, the failure
// "failed to read first block packet … use of closed network connection"
// of a query that follows a batch insert whose context was cancelled
// right after Send: clickhouse-go's Send watchdog, scheduled late, closes
// the connection the pool has given to the query. On the bare pool
// (control) some of 20 rounds fail (each round 1 in 2: the watchdog's
// select picks at random between "Send is over" and "context done");
// through SafeBatches none does.
func TestSafeBatchesLateWatchdog(t *testing.T) {
	s := startOrSkip(t)
	opts := func() *chgo.Options {
		return &chgo.Options{Addr: []string{s.TCPAddr}, Protocol: chgo.Native, DialTimeout: 30 * time.Second,
			MaxOpenConns: 1, MaxIdleConns: 1}
	}
	bare, err := chgo.Open(opts())
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bare.Exec(ctx, "CREATE TABLE t (x UInt64) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	const rounds = 20
	closedBare, watchedBare := lateWatchdogRounds(t, bare, rounds)
	safe, err := clickhouse.Open(opts())
	if err != nil {
		t.Fatal(err)
	}
	defer safe.Close()
	closedSafe, watchedSafe := lateWatchdogRounds(t, safe, rounds)
	t.Logf("queries failing on a connection closed by a late batch watchdog: bare pool %d of %d rounds (watchdog read the caller's context in %d); SafeBatches %d of %d (%d)",
		closedBare, rounds, watchedBare, closedSafe, rounds, watchedSafe)
	if closedSafe != 0 {
		t.Errorf("SafeBatches: %d of %d queries failed on a connection closed by a batch's watchdog, want 0", closedSafe, rounds)
	}
	if closedBare == 0 {
		t.Errorf("control: the bare pool lost no query in %d rounds (watchdog read the caller's context in %d): the reproduction no longer reaches clickhouse-go's batch watchdog (renamed? fixed upstream? then SafeBatches may go)", rounds, watchedBare)
	}
}
