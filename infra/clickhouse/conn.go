package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Open opens a clickhouse-go connection pool with opt (chgo.Open) and
// wraps it with SafeBatches. It does not dial: the first query or Ping
// does. Errors are chgo.Open's (an invalid option), wrapped.
func Open(opt *chgo.Options) (driver.Conn, error) {
	conn, err := chgo.Open(opt)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: open a connection pool: %w", err)
	}
	return SafeBatches(conn), nil
}

// SafeBatches wraps a clickhouse-go connection pool so that a batch's
// context cannot close a connection the pool has already handed to the
// next query, and so that a read refused on such a connection is asked
// again once. conn is returned as it is when it is already wrapped.
//
// Why: clickhouse-go v2 (v2.50) batch.Send starts a goroutine that closes
// the batch's TCP connection when the batch's context ends, and stops it
// when Send returns. When that goroutine is first scheduled after Send has
// returned the connection to the pool and after the caller cancelled the
// context (the usual `ctx, cancel := context.WithTimeout(…); defer
// cancel()` around an insert, on a loaded machine), both of its select
// cases are ready and it closes, at random, a connection another query
// now reads from: that query fails with "failed to read first block packet
// … use of closed network connection". SafeBatches gives PrepareBatch a
// context with the caller's values and deadline that ends with the
// caller's context only while the batch is open (until Send, Abort or
// Close returns), never after, so the goroutine has nothing to close late.
// The deadline still bounds every socket read and write of the batch (the
// driver sets it on the connection).
//
// Query, QueryRow and Select that fail with net.ErrClosed (the pool handed
// out a connection closed under it) while ctx is still live are run once
// more on another connection, with a Warn log line; Exec and batches are
// never repeated (an INSERT or ALTER may have taken effect).
func SafeBatches(conn driver.Conn) driver.Conn {
	if _, ok := conn.(*safeConn); ok {
		return conn
	}
	return &safeConn{Conn: conn}
}

type safeConn struct {
	driver.Conn
}

// closedConn reports whether err is a read or write on a connection that
// this process had closed, with ctx still live (so not the driver's own
// close on cancellation).
func closedConn(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && errors.Is(err, net.ErrClosed)
}

func warnRetry(err error) {
	slog.Warn("clickhouse: a read failed on a connection closed under it; asking once more on another connection", "err", err)
}

func (c *safeConn) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	rows, err := c.Conn.Query(ctx, query, args...)
	if closedConn(ctx, err) {
		warnRetry(err)
		rows, err = c.Conn.Query(ctx, query, args...)
	}
	return rows, err
}

func (c *safeConn) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	row := c.Conn.QueryRow(ctx, query, args...)
	if err := row.Err(); closedConn(ctx, err) {
		warnRetry(err)
		row = c.Conn.QueryRow(ctx, query, args...)
	}
	return row
}

func (c *safeConn) Select(ctx context.Context, dest any, query string, args ...any) error {
	err := c.Conn.Select(ctx, dest, query, args...)
	if closedConn(ctx, err) {
		warnRetry(err)
		err = c.Conn.Select(ctx, dest, query, args...)
	}
	return err
}

func (c *safeConn) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: prepare batch %.60q: %w", query, context.Cause(ctx))
	}
	bctx, stop := batchContext(ctx)
	b, err := c.Conn.PrepareBatch(bctx, query, opts...)
	if err != nil {
		stop()
		return nil, err
	}
	return &safeBatch{Batch: b, stop: stop}, nil
}

// batchContext returns a context with parent's values and deadline that is
// cancelled when parent ends, until stop is called; after stop it never
// ends. stop may be called more than once.
func batchContext(parent context.Context) (context.Context, func()) {
	inner, cancel := context.WithCancel(context.WithoutCancel(parent))
	d, ok := parent.Deadline()
	bc := &detachedCtx{Context: inner, parent: parent, deadline: d, hasDeadline: ok}
	unhook := context.AfterFunc(parent, cancel)
	return bc, func() { unhook() }
}

type detachedCtx struct {
	context.Context // inner: parent's values; Done only when cancelled through the hook
	parent          context.Context
	deadline        time.Time
	hasDeadline     bool
}

func (c *detachedCtx) Deadline() (time.Time, bool) { return c.deadline, c.hasDeadline }

// Err is parent's error once the hook has cancelled the context
// (context.DeadlineExceeded when parent's deadline passed).
func (c *detachedCtx) Err() error {
	if c.Context.Err() == nil {
		return nil
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	return context.Canceled
}

type safeBatch struct {
	driver.Batch
	stop func()
}

func (b *safeBatch) Send() error {
	defer b.stop()
	return b.Batch.Send()
}

func (b *safeBatch) Abort() error {
	defer b.stop()
	return b.Batch.Abort()
}

func (b *safeBatch) Close() error {
	defer b.stop()
	return b.Batch.Close()
}
