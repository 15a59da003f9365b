//go:build chdb

package chdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if engine != nil {
		if err := engine.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "chdb: close:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestReapStale removes the session directory of a process that ended and
// keeps this process's.
func TestReapStale(t *testing.T) {
	tmp := t.TempDir()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(tmp, fmt.Sprintf("%s%d-x", dirPrefix, cmd.Process.Pid))
	mine := filepath.Join(tmp, fmt.Sprintf("%s%d-y", dirPrefix, os.Getpid()))
	other := filepath.Join(tmp, "unrelated")
	for _, d := range []string{dead, mine, other} {
		if err := os.MkdirAll(filepath.Join(d, "store"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	reapStale(tmp)
	for d, want := range map[string]bool{dead: false, mine: true, other: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
	e, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(e.dir), fmt.Sprintf("%s%d-", dirPrefix, os.Getpid())) {
		t.Errorf("session directory %s", e.dir)
	}
}

// testDB creates a fresh database on the shared engine and returns a Conn
// in it.
func testDB(t *testing.T, settings map[string]string) (*Engine, driver.Conn, string) {
	t.Helper()
	e, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	db := fmt.Sprintf("t_%d", time.Now().UnixNano())
	if _, err := e.QueryTSV("", "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.QueryTSV("", "DROP DATABASE IF EXISTS "+db) })
	return e, e.ConnWith(db, settings), db
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestOpenVersion(t *testing.T) {
	e, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	e2, _ := Open()
	if e2 != e {
		t.Fatal("second Open returned another Engine")
	}
	if !strings.HasPrefix(e.Version(), "26.") {
		t.Fatalf("version %q, want the 26.x engine scripts/chdb-lib.sh fetches", e.Version())
	}
	sv, err := e.Conn("").ServerVersion()
	if err != nil || sv.Version.Major != 26 {
		t.Fatalf("ServerVersion %+v, %v", sv, err)
	}
	t.Logf("chDB %s, time zone %s", e.Version(), e.Location())
}

func TestBind(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("x", 3600))
	for _, c := range []struct {
		q    string
		args []any
		want string
	}{
		{"SELECT ?", []any{"it's \\ a\x00\n"}, `SELECT 'it\'s \\ a\x00\x0A'`},
		{"SELECT '?', `?`, \"?\", ? -- ?\n, ? /* ? */", []any{1, -2}, "SELECT '?', `?`, \"?\", 1 -- ?\n, -2 /* ? */"},
		{"SELECT 'a''?', ?", []any{uint64(math.MaxUint64)}, "SELECT 'a''?', 18446744073709551615"},
		{"SELECT 'a\\'?', ?", []any{true}, `SELECT 'a\'?', 1`},
		{"SELECT ?, ?, ?", []any{1.5, math.Inf(-1), float32(0.1)}, "SELECT 1.5, -inf, 0.1"},
		{"SELECT ?", []any{at}, "SELECT toDateTime('2026-03-04 04:06:07', 'UTC')"},
		{"SELECT ?", []any{[]string{"a", "b'"}}, `SELECT ['a', 'b\'']`},
		{"SELECT ?", []any{[]byte{0xff, 'x'}}, "SELECT '\xffx'"},
		{"SELECT 1-?", []any{-1}, "SELECT 1- -1"},
		{"SELECT ?", []any{nil}, "SELECT NULL"},
	} {
		got, err := Bind(c.q, c.args...)
		if err != nil || got != c.want {
			t.Errorf("Bind(%q, %v) = %q, %v; want %q", c.q, c.args, got, err, c.want)
		}
	}
	if _, err := Bind("SELECT ?, ?", 1); err == nil {
		t.Error("Bind with too few arguments: no error")
	}
	if _, err := Bind("SELECT ?", 1, 2); err == nil {
		t.Error("Bind with too many arguments: no error")
	}
	if _, err := Bind("SELECT ?", struct{}{}); err == nil {
		t.Error("Bind of a struct: no error")
	}
}

// TestBinaryRoundTrip writes every byte value (and invalid UTF-8) through
// a bound argument and a batch, and reads it back through Query.
func TestBinaryRoundTrip(t *testing.T) {
	_, conn, _ := testDB(t, nil)
	ctx := ctx10(t)
	var all []byte
	for i := 0; i < 256; i++ {
		all = append(all, byte(i))
	}
	vals := []string{string(all), "", `\N`, "\\", "a\tb\nc", "'\"`", "\xff\xfe", "x\x00y"}
	if err := conn.Exec(ctx, "CREATE TABLE b (i UInt32, s String, n Nullable(String)) ENGINE = MergeTree ORDER BY i"); err != nil {
		t.Fatal(err)
	}
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO b (i, s, n)")
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if err := batch.Append(uint32(i), v, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Append(uint32(len(vals)), "null", nil); err != nil {
		t.Fatal(err)
	}
	if batch.Rows() != len(vals)+1 {
		t.Fatalf("Rows() = %d", batch.Rows())
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
	if !batch.IsSent() || batch.Append(uint32(0), "", "") == nil {
		t.Fatal("a sent batch takes more rows")
	}
	for i, v := range vals {
		var s string
		var b []byte
		var n *string
		if err := conn.QueryRow(ctx, "SELECT s, s, n FROM b WHERE i = ? AND s = ?", i, v).Scan(&s, &b, &n); err != nil {
			t.Fatalf("value %d (%q): %v", i, v, err)
		}
		if s != v || string(b) != v || n == nil || *n != v {
			t.Errorf("value %d: got %q, %q, %v; want %q", i, s, b, n, v)
		}
		var l uint64
		if err := conn.QueryRow(ctx, "SELECT length(s) FROM b WHERE i = ?", i).Scan(&l); err != nil || l != uint64(len(v)) {
			t.Errorf("value %d: length %d, %v; want %d (stored bytes differ)", i, l, err, len(v))
		}
	}
	var n *string = new(string)
	var ns sql.NullString
	if err := conn.QueryRow(ctx, "SELECT n, n FROM b WHERE s = 'null'").Scan(&n, &ns); err != nil || n != nil || ns.Valid {
		t.Fatalf("NULL: %v, %+v, %v", n, ns, err)
	}
	var none string
	if err := conn.QueryRow(ctx, "SELECT s FROM b WHERE i = 999").Scan(&none); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("no row: %v, want sql.ErrNoRows", err)
	}
}

// TestScanTypes reads every scan type from a query of known literals.
func TestScanTypes(t *testing.T) {
	_, conn, _ := testDB(t, nil)
	ctx := ctx10(t)
	var (
		i8  int8
		i16 int16
		i32 int32
		i64 int64
		in  int
		u8  uint8
		u16 uint16
		u32 uint32
		u64 uint64
		un  uint
		f32 float32
		f64 float64
		b   bool
		d   time.Time
		dt  time.Time
		lc  string
		fn  *float64
		fv  *float64
		nan float64
		a   any
	)
	err := conn.QueryRow(ctx, `SELECT toInt8(-128), toInt16(-32768), toInt32(-2147483648), toInt64(-9223372036854775808), -5,
		toUInt8(255), toUInt16(65535), toUInt32(4294967295), toUInt64(18446744073709551615), 7,
		toFloat32(0.25), 1/3, true, toDate('2149-06-06'), toDateTime('2026-01-02 03:04:05', 'UTC'),
		toLowCardinality('ft-u'), CAST(NULL AS Nullable(Float64)), CAST(0.5 AS Nullable(Float64)), nan, 42`).
		Scan(&i8, &i16, &i32, &i64, &in, &u8, &u16, &u32, &u64, &un, &f32, &f64, &b, &d, &dt, &lc, &fn, &fv, &nan, &a)
	if err != nil {
		t.Fatal(err)
	}
	if i8 != math.MinInt8 || i16 != math.MinInt16 || i32 != math.MinInt32 || i64 != math.MinInt64 || in != -5 ||
		u8 != math.MaxUint8 || u16 != math.MaxUint16 || u32 != math.MaxUint32 || u64 != math.MaxUint64 || un != 7 {
		t.Errorf("integers: %d %d %d %d %d %d %d %d %d %d", i8, i16, i32, i64, in, u8, u16, u32, u64, un)
	}
	if f32 != 0.25 || f64 != 1.0/3 || !b || !math.IsNaN(nan) {
		t.Errorf("floats, bool: %v %v %v %v", f32, f64, b, nan)
	}
	if !d.Equal(time.Date(2149, 6, 6, 0, 0, 0, 0, time.UTC)) || !dt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) || dt.Location() != time.UTC {
		t.Errorf("times: %v %v", d, dt)
	}
	if lc != "ft-u" || fn != nil || fv == nil || *fv != 0.5 || a != uint64(42) {
		t.Errorf("lc %q, nullables %v %v, any %#v", lc, fn, fv, a)
	}
	var small uint8
	if err := conn.QueryRow(ctx, "SELECT 256").Scan(&small); err == nil {
		t.Error("256 into *uint8: no error")
	}
	if err := conn.QueryRow(ctx, "SELECT 1, 2").Scan(&small); err == nil {
		t.Error("two columns into one destination: no error")
	}
}

// TestBatch inserts rows of every column kind the release tables use in
// batches (one flushed midway; the rest, 59,000 rows, over the writer's
// DefaultBatchSize, in one INSERT) and compares them with the rows given.
func TestBatch(t *testing.T) {
	_, conn, db := testDB(t, nil)
	ctx := ctx10(t)
	if err := conn.Exec(ctx, `CREATE TABLE r (app LowCardinality(String), k UInt32, n Int64, f Float64, day Date,
		at DateTime, tags Array(String)) ENGINE = MergeTree ORDER BY (app, k)`); err != nil {
		t.Fatal(err)
	}
	type rec struct {
		app  string
		k    uint32
		n    int64
		f    float64
		day  time.Time
		at   time.Time
		tags []string
	}
	base := time.Date(2026, 11, 28, 23, 59, 58, 0, time.UTC)
	var want []rec
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".r (app, k, n, f, day, at, tags)")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 60000; i++ {
		r := rec{app: fmt.Sprintf("app%d", i%3), k: uint32(i), n: int64(i*i) - 1000000, f: float64(i) / 7,
			day: base.AddDate(0, 0, i%3000).Truncate(24 * time.Hour), at: base.Add(time.Duration(i) * time.Second),
			tags: []string{fmt.Sprint(i), "x'y"}}
		want = append(want, r)
		if err := b.Append(r.app, r.k, r.n, r.f, r.day, r.at, r.tags); err != nil {
			t.Fatal(err)
		}
		if i == 1000 {
			if err := b.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Append("a", 1, 2, 3.0, base, base); err == nil {
		t.Error("a row of 6 values for 7 columns: no error")
	}
	if err := b.Append("a", int64(-1), 2, 3.0, base, base, []string{}); err == nil {
		t.Error("-1 for a UInt32: no error")
	}
	if err := b.Append(5, uint32(1), 2, 3.0, base, base, []string{}); err == nil {
		t.Error("an int for a String: no error")
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	aborted, err := conn.PrepareBatch(ctx, "INSERT INTO r")
	if err != nil {
		t.Fatal(err)
	}
	if err := aborted.Append("z", uint32(9999), int64(0), 0.0, base, base, []string{}); err != nil {
		t.Fatal(err)
	}
	if err := aborted.Abort(); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "SELECT app, k, n, f, day, at, arrayStringConcat(tags, '|') FROM r ORDER BY k")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var g rec
		var tags string
		if err := rows.Scan(&g.app, &g.k, &g.n, &g.f, &g.day, &g.at, &tags); err != nil {
			t.Fatal(err)
		}
		if i >= len(want) {
			t.Fatalf("more than %d rows", len(want))
		}
		w := want[i]
		if g.app != w.app || g.k != w.k || g.n != w.n || g.f != w.f || !g.day.Equal(w.day) || !g.at.Equal(w.at) || tags != strings.Join(w.tags, "|") {
			t.Fatalf("row %d: got %+v %q, want %+v", i, g, tags, w)
		}
		i++
	}
	if i != len(want) {
		t.Fatalf("%d rows, want %d", i, len(want))
	}
	if cols := rows.Columns(); len(cols) != 7 || cols[0] != "app" {
		t.Errorf("Columns() = %v", cols)
	}
}

// TestConnSettingsAndDatabase checks that each Conn's database and
// settings are in place for its statements and nowhere else.
func TestConnSettingsAndDatabase(t *testing.T) {
	e, async, db := testDB(t, map[string]string{"mutations_sync": "0"})
	ctx := ctx10(t)
	plain := e.Conn(db)
	other := e.Conn("system")
	read := func(c driver.Conn) (string, string) {
		var s, d string
		if err := c.QueryRow(ctx, "SELECT getSetting('mutations_sync'), currentDatabase()").Scan(&s, &d); err != nil {
			t.Fatal(err)
		}
		return s, d
	}
	def, _ := read(plain)
	for i := 0; i < 2; i++ {
		if s, d := read(async); s != "0" || d != db {
			t.Fatalf("ConnWith(mutations_sync=0): %s in %s", s, d)
		}
		if s, d := read(other); s != def || d != "system" {
			t.Fatalf("Conn(system) after it: mutations_sync %s (default %s) in %s", s, def, d)
		}
	}
	// settings that change every later read: put back for the next Conn
	limited := e.ConnWith(db, map[string]string{"limit": "1", "offset": "1", "max_execution_time": "1000"})
	for i, c := range []driver.Conn{limited, plain, limited, plain} {
		rows, err := c.Query(ctx, "SELECT number FROM numbers(5)")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if want := map[bool]int{true: 1, false: 5}[c == limited]; n != want {
			t.Errorf("query %d: %d rows, want %d", i, n, want)
		}
	}
	if err := e.ConnWith(db, map[string]string{"no_such_setting": "1"}).Ping(ctx); err == nil {
		t.Error("an unknown setting: no error")
	}
	out, err := e.QueryTSV(db, "SELECT 1; SELECT currentDatabase(); SELECT 'a\\tb'")
	if err != nil || out != "1\n"+db+"\na\\tb\n" {
		t.Fatalf("QueryTSV = %q, %v", out, err)
	}
	err = plain.Exec(ctx, "SELECT * FROM no_such_table")
	var ex *chgo.Exception
	if !errors.As(err, &ex) || ex.Code != 60 || ex.CodeName != "UNKNOWN_TABLE" {
		t.Fatalf("unknown table: %v (%#v), want Exception code 60", err, ex)
	}
	if err := plain.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAsyncMutation runs ALTER … DELETE with mutations_sync = 0 and polls
// system.mutations as the release writer does.
func TestAsyncMutation(t *testing.T) {
	_, conn, db := testDB(t, map[string]string{"mutations_sync": "0"})
	ctx := ctx10(t)
	if err := conn.Exec(ctx, "CREATE TABLE m (k UInt32) ENGINE = MergeTree ORDER BY k"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "INSERT INTO m SELECT number FROM numbers(1000)"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "ALTER TABLE m DELETE WHERE k >= ?", 10); err != nil {
		t.Fatal(err)
	}
	polls := 0
	for ; ; polls++ {
		var pending uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND table = ? AND is_done = 0", db, "m").Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			break
		}
		if polls > 200 {
			t.Fatal("mutation not done after 200 polls")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM m").Scan(&n); err != nil || n != 10 {
		t.Fatalf("%d rows after the delete, %v; want 10", n, err)
	}
	t.Logf("mutation done after %d polls", polls)
}
