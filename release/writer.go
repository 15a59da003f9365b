package release

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"sort"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// Schema is the DDL of the release tables (released_items,
// undecrypted_summary, releases, privacy_ledger) as run by Open: CREATE TABLE IF NOT EXISTS
// statements separated by ";", valid on ClickHouse 18.16 and current
// releases. Tables are unqualified; Open runs them in its database.
// Exported so docs and operators can show or apply it
// (`clickhouse-client --database crowdlog --multiquery < schema.sql`).
//
//go:embed schema.sql
var Schema string

// DefaultDatabase is the database name used by `crowdlog run` unless told
// otherwise.
const DefaultDatabase = "crowdlog"

// DefaultBatchSize is the number of rows per native batch insert (measured
// ~1.3–1.7 M rows/s at 100k-row batches on 18.16; docs/benchmarks.md).
const DefaultBatchSize = 50000

// DefaultTimeout bounds a Writer call whose ctx has no deadline: ClickHouse
// 18.16 can hang a statement until the deadline (docs/decisions.md), so no call
// runs without one.
const DefaultTimeout = 5 * time.Minute

// Writer writes releases into ClickHouse over the native protocol
// (clickhouse-go/v2). It is safe for concurrent use on different release
// keys; two writers on the same key are not coordinated (see schema.sql).
type Writer struct {
	// BatchSize is the number of rows per batch insert; DefaultBatchSize
	// after Open. Change it before writing, not concurrently.
	BatchSize int
	// Logger receives one Info line per written release (key and counts,
	// never artifacts); slog.Default() after Open.
	Logger *slog.Logger

	conn     driver.Conn
	database string
	server   Server

	// Hook, when set, is called after each write step of a release and
	// its error aborts the write there: fault-injection tests crash the
	// writer (or kill its process) between two writes with it; leave it
	// nil. Steps: "draw" (a DP release's draw stored), "ledger" (its
	// privacy_ledger row), "cleared" (rows of an interrupted attempt
	// deleted, or none found), "items-batch" (after every released_items
	// batch), "undecrypted" (the summary lines), "before-releases-row",
	// "releases-row" (the release is complete); PDD days:
	// "before-pdd-rounds-row".
	Hook func(step string) error
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// Open connects to the ClickHouse native-protocol address addr
// ("host:port") with the Login of ctx (infra/clickhouse.WithLogin; none:
// user default without password), creates database (an identifier:
// letters, digits, underscore) and the Schema tables in it if they do not
// exist, then the Views (replacing views of another crowdlog version, as
// OpenConn does), and returns a Writer. As user default it creates
// the database; any other user (the release stages' writer, Init's
// Writer) may use only its own databases, which must exist already
// (`crowdlog clickhouse init` as the administrator creates them). Tables get
// LowCardinality(String) columns where the server supports them without an
// experimental setting (SchemaStatementsFor; not on 18.16). Before it
// creates anything it refuses a server older than MinVersion and a
// session whose ResultSettings change what the views return
// (ErrUnsupportedServer, naming the version or the setting). It is
// idempotent. ctx bounds the whole call (DefaultTimeout when it has no
// deadline).
func Open(ctx context.Context, addr, database string) (*Writer, error) {
	if !identRE.MatchString(database) {
		return nil, fmt.Errorf("release: database name %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)", database)
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()

	login := clickhouse.LoginFrom(ctx)
	if login.Username() == clickhouse.DefaultUser {
		boot, err := dial(ctx, addr, "default")
		if err != nil {
			return nil, err
		}
		// refuse an unsupported server before creating anything
		if _, err := probe(ctx, boot); err != nil {
			boot.Close()
			return nil, err
		}
		err = boot.Exec(ctx, "CREATE DATABASE IF NOT EXISTS `"+database+"`")
		boot.Close()
		if err != nil {
			return nil, fmt.Errorf("release: create database %s on %s: %w", database, addr, err)
		}
	}
	conn, err := dial(ctx, addr, database)
	if err != nil {
		if login.Username() != clickhouse.DefaultUser {
			return nil, fmt.Errorf("%w (does database %s exist? run `crowdlog clickhouse init --writer %s` as the administrator first)", err, database, login.Username())
		}
		return nil, err
	}
	w, err := OpenConn(ctx, conn, database)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return w, nil
}

// OpenConn is Open on a connection already made: conn's current database
// is database (an identifier that must exist). It probes the server
// (Server), creates the Schema tables (SchemaStatementsFor) and the Views
// if they do not exist, replaces every view whose statement is not the
// current one in Views (a view of another crowdlog version: dropped and
// created again, recorded in ViewVersionsTable, logged at Info; it fails
// for a user who may not drop it), and returns a Writer that writes through conn;
// Writer.Close closes conn. On error conn is left open for the caller to
// close. Errors name the database, the server's version and the first
// failing statement. ctx bounds the call (DefaultTimeout when it has no
// deadline).
func OpenConn(ctx context.Context, conn driver.Conn, database string) (*Writer, error) {
	if !identRE.MatchString(database) {
		return nil, fmt.Errorf("release: database name %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)", database)
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	conn = clickhouse.SafeBatches(conn) // a batch's context must not close a pooled connection later
	server, err := probe(ctx, conn)
	if err != nil {
		return nil, err
	}
	for _, stmt := range SchemaStatementsFor(server) {
		if err := conn.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("release: apply schema in %s on ClickHouse %s (%.60s…): %w", database, server.Version, stmt, err)
		}
	}
	// views of another crowdlog version are replaced (upgrade.go)
	vs := viewSet{release: database, database: database, stmts: ViewStatements(),
		create: func(ctx context.Context, s string) error { return conn.Exec(ctx, s) }}
	if _, err := applyViews(ctx, conn, vs, slog.Default()); err != nil {
		return nil, fmt.Errorf("%w (ClickHouse %s)", err, server.Version)
	}
	return &Writer{BatchSize: DefaultBatchSize, Logger: slog.Default(), conn: conn, database: database, server: server}, nil
}

// Server returns what Open learnt of the server (version, LowCardinality,
// SQL users).
func (w *Writer) Server() Server { return w.server }

// dial opens a native-protocol connection to addr in database with the
// Login of ctx (user default without password when none) and pings it.
func dial(ctx context.Context, addr, database string) (driver.Conn, error) {
	l := clickhouse.LoginFrom(ctx)
	conn, err := clickhouse.Open(&chgo.Options{
		Addr:        []string{addr},
		Protocol:    chgo.Native, // HTTP fails on 18.16 (docs/decisions.md)
		Auth:        chgo.Auth{Database: database, Username: l.Username(), Password: l.Password},
		TLS:         l.TLS,
		DialTimeout: 10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("release: open ClickHouse %s: %w", addr, err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("release: ClickHouse at %s (native protocol, the TCP port; TLS %v) as %s in database %s does not answer (a wrong user or password, or a database it may not use): %w",
			addr, l.TLS != nil, l.Username(), database, err)
	}
	return conn, nil
}

// SchemaStatements splits Schema into single statements (comment lines
// removed), in order.
func SchemaStatements() []string { return splitStatements(Schema) }

// Database returns the database the Writer writes to.
func (w *Writer) Database() string { return w.database }

// Close closes the connection.
func (w *Writer) Close() error { return w.conn.Close() }

// WriteRelease writes items and undec, grouped by release Key (in Key
// order), each group as by WriteKeyedRelease. With no items and no undec
// it writes nothing: to record an empty release use WriteKeyedRelease.
func (w *Writer) WriteRelease(ctx context.Context, items []Item, undec []Undecrypted, releasedAt time.Time) error {
	type group struct {
		items []Item
		undec []Undecrypted
	}
	groups := map[Key]*group{}
	get := func(k Key) *group {
		g := groups[k]
		if g == nil {
			g = &group{}
			groups[k] = g
		}
		return g
	}
	for _, it := range items {
		g := get(it.Key())
		g.items = append(g.items, it)
	}
	for _, u := range undec {
		g := get(u.Key())
		g.undec = append(g.undec, u)
	}
	keys := make([]Key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
	for _, k := range keys {
		if err := w.WriteKeyedRelease(ctx, k, groups[k].items, groups[k].undec, releasedAt); err != nil {
			return err
		}
	}
	return nil
}

func keyLess(a, b Key) bool {
	if a.App != b.App {
		return a.App < b.App
	}
	if a.Epoch != b.Epoch {
		return a.Epoch < b.Epoch
	}
	if a.Policy != b.Policy {
		return a.Policy < b.Policy
	}
	return a.K < b.K
}

// WriteKeyedRelease writes one release: items into released_items, undec
// into undecrypted_summary (lines with equal Reports and Users are merged by
// summing Tags), and LAST one row into releases (items = len(items),
// impressions = their sum) at releasedAt truncated to the second, in UTC
// (time.Now() when zero). Every item and line must carry key, and
// (Item, Variant) must be unique within items.
//
// Idempotent: if releases already has a row for key it does nothing and
// returns nil. Otherwise rows of an interrupted earlier attempt are deleted
// first (ALTER TABLE ... DELETE, waited for), so a redo leaves exactly one
// copy. ctx bounds the call (DefaultTimeout when it has no deadline).
func (w *Writer) WriteKeyedRelease(ctx context.Context, key Key, items []Item, undec []Undecrypted, releasedAt time.Time) error {
	return w.writeKeyed(ctx, key, items, undec, releasedAt, nil)
}

// checkItems validates items of key as WriteKeyedRelease documents and
// returns the sum of their impressions.
func checkItems(key Key, items []Item) (uint64, error) {
	if key.K < 0 || key.K > math.MaxUint32 {
		return 0, fmt.Errorf("release %s: k out of range 0..%d", key, uint32(math.MaxUint32))
	}
	seen := make(map[[2]string]struct{}, len(items))
	var impressions uint64
	for i, it := range items {
		if it.Key() != key {
			return 0, fmt.Errorf("release %s: item %d belongs to %s; write each key separately or use WriteRelease", key, i, it.Key())
		}
		iv := [2]string{it.Item, it.Variant}
		if _, dup := seen[iv]; dup {
			return 0, fmt.Errorf("release %s: item %d repeats an earlier (item, variant); merge duplicates before releasing", key, i)
		}
		seen[iv] = struct{}{}
		impressions += it.Impressions
	}
	return impressions, nil
}

// writeKeyed is WriteKeyedRelease; beforeRow, when set, runs just before
// the releases row and aborts the write with its error.
func (w *Writer) writeKeyed(ctx context.Context, key Key, items []Item, undec []Undecrypted, releasedAt time.Time, beforeRow func(context.Context) error) error {
	impressions, err := checkItems(key, items)
	if err != nil {
		return err
	}
	merged, err := mergeUndecrypted(key, undec)
	if err != nil {
		return err
	}
	if releasedAt.IsZero() {
		releasedAt = time.Now()
	}
	releasedAt = releasedAt.UTC().Truncate(time.Second)

	ctx, cancel := withDeadline(ctx)
	defer cancel()

	done, err := w.IsReleased(ctx, key)
	if err != nil {
		return err
	}
	if done {
		w.Logger.Info("release already written; skipping", "key", key.String())
		return nil
	}
	// Rows without a releases row come from an attempt that died midway.
	for _, table := range []string{"released_items", "undecrypted_summary"} {
		if err := w.clearPartial(ctx, table, key); err != nil {
			return err
		}
	}
	if err := w.runHook("cleared"); err != nil {
		return err
	}
	if err := w.insertItems(ctx, key, items, releasedAt); err != nil {
		return err
	}
	if err := w.insertUndecrypted(ctx, key, merged, releasedAt); err != nil {
		return err
	}
	if err := w.runHook("before-releases-row"); err != nil {
		return err
	}
	if beforeRow != nil {
		if err := beforeRow(ctx); err != nil {
			return err
		}
	}
	b, err := w.conn.PrepareBatch(ctx, "INSERT INTO releases (app, epoch, policy, k, items, impressions, released_at)")
	if err != nil {
		return fmt.Errorf("release %s: prepare releases insert: %w", key, err)
	}
	if err := b.Append(key.App, key.Epoch, key.Policy, uint32(key.K), uint64(len(items)), impressions, releasedAt); err != nil {
		b.Abort()
		return fmt.Errorf("release %s: append releases row: %w", key, err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("release %s: insert releases row (the release will be redone on the next call): %w", key, err)
	}
	if err := w.runHook("releases-row"); err != nil {
		return err
	}
	w.Logger.Info("release written", "key", key.String(), "items", len(items), "impressions", impressions,
		"undecrypted_lines", len(merged))
	return nil
}

func mergeUndecrypted(key Key, undec []Undecrypted) ([]Undecrypted, error) {
	idx := map[[2]uint64]int{}
	var out []Undecrypted
	for i, u := range undec {
		if u.Key() != key {
			return nil, fmt.Errorf("release %s: undecrypted line %d belongs to %s; write each key separately or use WriteRelease", key, i, u.Key())
		}
		ru := [2]uint64{u.Reports, u.Users}
		if j, ok := idx[ru]; ok {
			out[j].Tags += u.Tags
			continue
		}
		idx[ru] = len(out)
		out = append(out, u)
	}
	return out, nil
}

func (w *Writer) runHook(stage string) error {
	if w.Hook == nil {
		return nil
	}
	return w.Hook(stage)
}

const keyWhere = " WHERE app = ? AND epoch = ? AND policy = ? AND k = ?"

func keyArgs(k Key) []any { return []any{k.App, k.Epoch, k.Policy, uint32(k.K)} }

// IsReleased reports whether releases holds a row for key, i.e. whether a
// WriteKeyedRelease for key has completed.
func (w *Writer) IsReleased(ctx context.Context, key Key) (bool, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	var n uint64
	if err := w.conn.QueryRow(ctx, "SELECT count() FROM releases"+keyWhere, keyArgs(key)...).Scan(&n); err != nil {
		return false, fmt.Errorf("release %s: read releases log: %w", key, err)
	}
	return n > 0, nil
}

// clearPartial deletes the rows of key from table if there are any and waits
// until the mutation has finished.
//
// Why a mutation and not only ReplacingMergeTree + FINAL: FINAL would hide
// the duplicates of a redo, but analysts' plain SELECTs (and sum()s) would
// count them until a background merge happens, which may be never for
// small tables. ALTER TABLE ... DELETE exists on 18.16 (mutations, since
// 1.1.54388) but 18.16 has no mutations_sync setting, so we poll
// system.mutations. A mutation only touches parts that existed when it was
// created, so the re-inserted rows are safe even before it finishes.
func (w *Writer) clearPartial(ctx context.Context, table string, key Key) error {
	return w.deletePartial(ctx, table, "release "+key.String(), keyWhere, keyArgs(key)...)
}

// deletePartial deletes the rows matching where/args from table if there
// are any and waits until the mutation has finished (see clearPartial for
// why a mutation and how 18.16 is waited for). what names the release in
// errors and logs.
func (w *Writer) deletePartial(ctx context.Context, table, what, where string, args ...any) error {
	var n uint64
	if err := w.conn.QueryRow(ctx, "SELECT count() FROM "+table+where, args...).Scan(&n); err != nil {
		return fmt.Errorf("%s: count partial rows in %s: %w", what, table, err)
	}
	if n == 0 {
		return nil
	}
	w.Logger.Warn("redoing an interrupted release; deleting its partial rows", "key", what, "table", table, "rows", n)
	if err := w.conn.Exec(ctx, "ALTER TABLE "+table+" DELETE"+where, args...); err != nil {
		return fmt.Errorf("%s: delete partial rows from %s: %w", what, table, err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var pending uint64
		err := w.conn.QueryRow(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND table = ? AND is_done = 0",
			w.database, table).Scan(&pending)
		if err != nil {
			return fmt.Errorf("%s: watch mutation on %s: %w", what, table, err)
		}
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: mutation deleting partial rows of %s did not finish (see system.mutations): %w", what, table, ctx.Err())
		case <-tick.C:
		}
	}
}

func (w *Writer) insertItems(ctx context.Context, key Key, items []Item, at time.Time) error {
	size := w.BatchSize
	if size <= 0 {
		size = DefaultBatchSize
	}
	for start := 0; start < len(items); start += size {
		end := min(start+size, len(items))
		b, err := w.conn.PrepareBatch(ctx, "INSERT INTO released_items (app, epoch, policy, k, item, variant, impressions, users, released_at)")
		if err != nil {
			return fmt.Errorf("release %s: prepare released_items insert: %w", key, err)
		}
		for _, it := range items[start:end] {
			if err := b.Append(it.App, it.Epoch, it.Policy, uint32(it.K), it.Item, it.Variant, it.Impressions, it.Users, at); err != nil {
				b.Abort()
				return fmt.Errorf("release %s: append released item: %w", key, err)
			}
		}
		if err := b.Send(); err != nil {
			return fmt.Errorf("release %s: insert released_items rows %d..%d: %w", key, start, end, err)
		}
		if err := w.runHook("items-batch"); err != nil {
			return err
		}
	}
	return nil
}

func (w *Writer) insertUndecrypted(ctx context.Context, key Key, undec []Undecrypted, at time.Time) error {
	if len(undec) == 0 {
		return nil
	}
	b, err := w.conn.PrepareBatch(ctx, "INSERT INTO undecrypted_summary (app, epoch, policy, k, reports, users, tags, released_at)")
	if err != nil {
		return fmt.Errorf("release %s: prepare undecrypted_summary insert: %w", key, err)
	}
	for _, u := range undec {
		if err := b.Append(u.App, u.Epoch, u.Policy, uint32(u.K), u.Reports, u.Users, u.Tags, at); err != nil {
			b.Abort()
			return fmt.Errorf("release %s: append undecrypted line: %w", key, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("release %s: insert undecrypted_summary: %w", key, err)
	}
	return w.runHook("undecrypted")
}

// ReleasedItems reads back the released_items of one release key, with
// FINAL (duplicates of racing writers collapsed), in SortItems order. It
// returns an empty slice when nothing was released; use IsReleased to tell
// "released nothing" from "not released yet".
func (w *Writer) ReleasedItems(ctx context.Context, app, epoch, policy string, k int) ([]Item, error) {
	key := Key{app, epoch, policy, k}
	if k < 0 || k > math.MaxUint32 {
		return nil, fmt.Errorf("release %s: k out of range", key)
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	rows, err := w.conn.Query(ctx, "SELECT item, variant, impressions, users FROM released_items FINAL"+keyWhere+
		" ORDER BY impressions DESC, item ASC, variant ASC", keyArgs(key)...)
	if err != nil {
		return nil, fmt.Errorf("release %s: read released_items: %w", key, err)
	}
	defer rows.Close()
	out := []Item{}
	for rows.Next() {
		it := Item{App: app, Epoch: epoch, Policy: policy, K: k}
		if err := rows.Scan(&it.Item, &it.Variant, &it.Impressions, &it.Users); err != nil {
			return nil, fmt.Errorf("release %s: scan released_items: %w", key, err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("release %s: read released_items: %w", key, err)
	}
	return out, nil
}

// UndecryptedSummary reads back the undecrypted_summary lines of one release
// key, with FINAL, ordered by reports then users, descending.
func (w *Writer) UndecryptedSummary(ctx context.Context, app, epoch, policy string, k int) ([]Undecrypted, error) {
	key := Key{app, epoch, policy, k}
	if k < 0 || k > math.MaxUint32 {
		return nil, fmt.Errorf("release %s: k out of range", key)
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	rows, err := w.conn.Query(ctx, "SELECT reports, users, tags FROM undecrypted_summary FINAL"+keyWhere+
		" ORDER BY reports DESC, users DESC", keyArgs(key)...)
	if err != nil {
		return nil, fmt.Errorf("release %s: read undecrypted_summary: %w", key, err)
	}
	defer rows.Close()
	out := []Undecrypted{}
	for rows.Next() {
		u := Undecrypted{App: app, Epoch: epoch, Policy: policy, K: k}
		if err := rows.Scan(&u.Reports, &u.Users, &u.Tags); err != nil {
			return nil, fmt.Errorf("release %s: scan undecrypted_summary: %w", key, err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("release %s: read undecrypted_summary: %w", key, err)
	}
	return out, nil
}
