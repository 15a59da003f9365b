//go:build chdb

// Package chdb runs crowdlog's ClickHouse code on chDB, the current
// ClickHouse engine as an in-process shared library (libchdb.so from the
// npm package @chdb/lib-linux-x64-gnu, loaded with purego through
// github.com/chdb-io/chdb-go, no cgo). It adapts one chDB session to
// clickhouse-go's driver.Conn, so the release code that talks to a server
// over the native protocol (release.OpenConn, the Writer, the analyst
// database) runs unchanged on ClickHouse 26.x: every statement it issues
// is parsed, planned and executed by the current engine.
//
// chDB has no server, no network protocol and no users: what this package
// proves is SQL (statements, views, recipes, results), never the native
// protocol, authentication, users.d or TLS, which the 18.16 server tests
// cover (docs/decisions.md).
//
// Every file carries the build constraint chdb: chdb-go's init panics when
// it cannot load the library. Fetch it with `bash scripts/chdb-lib.sh`
// (it prints the path) and run
//
//	CHDB_LIB_PATH=$(bash scripts/chdb-lib.sh | tail -1) go test -tags chdb ./...
//
// chDB allows one session per process: Open returns the same Engine on
// every call; tests share it and use one database each.
package chdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	chdbpurego "github.com/chdb-io/chdb-go/chdb-purego"
)

// Engine is the process's one chDB session, its data in a temporary
// directory of its own (crowdlog-chdb-<pid>-*), removed by Close or, when
// the process ended without Close (a test binary), by the next Open of
// any process. Its methods are safe for concurrent
// use: statements run one at a time, each after the current database and
// settings of the connection that issues it were put in place.
type Engine struct {
	mu      sync.Mutex
	sess    chdbpurego.ChdbConn
	dir     string // the session's data, removed by Close or a later process
	version string
	loc     *time.Location // the session's time zone (timezone())

	curDB    string            // current database of the session, "" unknown
	applied  map[string]string // settings changed by a Conn, by name
	defaults map[string]string // every setting's value at Open
}

var (
	openOnce sync.Once
	engine   *Engine
	openErr  error
)

// Open returns the process's chDB session, opened in a new temporary
// directory on the first call (later calls return the same Engine, or the same error). The
// library is the one chdb-go loaded at start from CHDB_LIB_PATH (a
// missing library panics there, before Open: run `bash
// scripts/chdb-lib.sh` and set CHDB_LIB_PATH to the path it prints).
// Errors say what failed and wrap chDB's.
func Open() (*Engine, error) {
	openOnce.Do(func() { engine, openErr = open() })
	return engine, openErr
}

// dirPrefix names the session directories: dirPrefix<pid>-<random>.
const dirPrefix = "crowdlog-chdb-"

func open() (*Engine, error) {
	reapStale(os.TempDir())
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("chdb: session directory: %w", err)
	}
	sess, err := chdbpurego.NewConnectionFromConnString(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("chdb: open a session of libchdb.so in %s (CHDB_LIB_PATH=%q; fetch the library with `bash scripts/chdb-lib.sh`): %w",
			dir, os.Getenv("CHDB_LIB_PATH"), err)
	}
	e := &Engine{sess: sess, dir: dir, applied: map[string]string{}, defaults: map[string]string{}}
	out, err := e.raw("SELECT version(), timezone()", "TabSeparated")
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("chdb: read the engine's version: %w", err)
	}
	f := strings.Split(strings.TrimSuffix(string(out), "\n"), "\t")
	if len(f) != 2 {
		sess.Close()
		return nil, fmt.Errorf("chdb: version() and timezone() answered %q", out)
	}
	e.version = f[0]
	// the defaults, read before any SET (a setting such as
	// max_execution_time or limit would change later reads)
	out, err = e.raw("SELECT name, value FROM system.settings", "TabSeparated")
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("chdb: read the engine's settings: %w", err)
	}
	for _, l := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		nv := strings.SplitN(l, "\t", 2)
		if len(nv) != 2 {
			continue
		}
		v, err := unescapeTSV(nv[1])
		if err != nil {
			sess.Close()
			return nil, err
		}
		e.defaults[nv[0]] = v
	}
	if e.loc, err = time.LoadLocation(f[1]); err != nil {
		sess.Close()
		return nil, fmt.Errorf("chdb: the engine's time zone %q is unknown to Go (install tzdata): %w", f[1], err)
	}
	return e, nil
}

// reapStale removes the session directories in tmp of processes that no
// longer run.
func reapStale(tmp string) {
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, d := range ents {
		rest, ok := strings.CutPrefix(d.Name(), dirPrefix)
		if !ok || !d.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(filepath.Join(tmp, d.Name()))
		}
	}
}

// Close ends the session and removes its directory; later calls of the
// Engine's methods fail (Open returns the same, closed Engine). For a
// program's end (TestMain).
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sess == nil {
		return nil
	}
	e.sess.Close()
	e.sess = nil
	return os.RemoveAll(e.dir)
}

// Version returns the engine's version() string, e.g. "26.7.2.1".
func (e *Engine) Version() string { return e.version }

// Location returns the engine's time zone (timezone()), in which it
// prints and parses DateTime values without a zone of their own.
func (e *Engine) Location() *time.Location { return e.loc }

// Conn returns a driver.Conn whose statements run with database as the
// current database (it must exist when the first statement runs; "" keeps
// the session's) and the engine's default settings. Close is a no-op: the
// session lives as long as the process.
func (e *Engine) Conn(database string) driver.Conn { return e.ConnWith(database, nil) }

// ConnWith is Conn with settings (name → value as SQL, e.g.
// "mutations_sync": "0") put in place before each of its statements with
// SET; settings another Conn changed are put back to their defaults
// first. Names must be identifiers.
func (e *Engine) ConnWith(database string, settings map[string]string) driver.Conn {
	s := make(map[string]string, len(settings))
	for k, v := range settings {
		s[k] = v
	}
	return &Conn{e: e, db: database, settings: s}
}

var settingRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// prepare makes db current and the session's changed settings equal to
// settings. e.mu is held.
func (e *Engine) prepare(db string, settings map[string]string) error {
	if db != "" && db != e.curDB {
		if _, err := e.raw("USE "+quoteIdent(db), "TabSeparated"); err != nil {
			e.curDB = ""
			return fmt.Errorf("chdb: use database %s: %w", db, err)
		}
		e.curDB = db
	}
	names := make([]string, 0, len(e.applied)+len(settings))
	for k := range e.applied {
		if _, ok := settings[k]; !ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names { // back to the default
		if _, err := e.raw("SET "+k+" = "+quoteString(e.defaults[k]), "TabSeparated"); err != nil {
			return fmt.Errorf("chdb: reset setting %s to %q: %w", k, e.defaults[k], err)
		}
		delete(e.applied, k)
	}
	names = names[:0]
	for k := range settings {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !settingRE.MatchString(k) {
			return fmt.Errorf("chdb: setting name %q is not an identifier", k)
		}
		if _, ok := e.defaults[k]; !ok {
			return fmt.Errorf("chdb: ClickHouse %s has no setting %s", e.version, k)
		}
	}
	for _, k := range names {
		v := settings[k]
		if cur, ok := e.applied[k]; ok && cur == v {
			continue
		}
		if _, err := e.raw("SET "+k+" = "+v, "TabSeparated"); err != nil {
			return fmt.Errorf("chdb: SET %s = %s: %w", k, v, err)
		}
		e.applied[k] = v
	}
	return nil
}

// run executes one statement for a connection and returns its output in
// format.
func (e *Engine) run(ctx context.Context, db string, settings map[string]string, query, format string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("chdb: %.80s: %w", query, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.prepare(db, settings); err != nil {
		return nil, err
	}
	return e.raw(query, format)
}

// raw runs query in the session and copies its output. e.mu is held (or
// the Engine is not shared yet).
func (e *Engine) raw(query, format string) ([]byte, error) {
	if e.sess == nil {
		return nil, errors.New("chdb: the session was closed")
	}
	res, err := e.sess.Query(query, format)
	if err != nil {
		return nil, exception(err)
	}
	if res == nil {
		return nil, nil
	}
	defer res.Free()
	if err := res.Error(); err != nil {
		return nil, exception(err)
	}
	return append([]byte(nil), res.Buf()...), nil
}

var codeRE = regexp.MustCompile(`^Code: (\d+)\. (?:([A-Za-z:]+Exception): )?`)
var codeNameRE = regexp.MustCompile(`\(([A-Z_]+)\)\s*$`)

// exception turns a chDB error text ("Code: 206. DB::Exception: … (NAME)")
// into the *clickhouse.Exception a server would have sent, so callers that
// look at the code (errors.As) behave as on a server.
func exception(err error) error {
	msg := strings.TrimSpace(err.Error())
	m := codeRE.FindStringSubmatch(msg)
	if m == nil {
		return fmt.Errorf("chdb: %w", err)
	}
	code, perr := strconv.ParseInt(m[1], 10, 32)
	if perr != nil {
		return fmt.Errorf("chdb: %w", err)
	}
	ex := &chgo.Exception{Code: int32(code), Name: m[2], Message: strings.TrimSpace(msg[len(m[0]):])}
	if n := codeNameRE.FindStringSubmatch(msg); n != nil {
		ex.CodeName = n[1]
	}
	return ex
}

// QueryTSV runs sql, one statement or several separated by ";" (as
// clickhouse-client --multiquery does), with database as the current
// database, and returns the TabSeparated output of all of them
// concatenated. SET or USE statements in sql stay in effect for later
// QueryTSV calls (not for Conns, which put their own in place).
func (e *Engine) QueryTSV(database, sql string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.prepare(database, nil); err != nil {
		return "", err
	}
	out, err := e.raw(sql, "TabSeparated")
	e.curDB = "" // sql may have changed it
	if err != nil {
		return "", fmt.Errorf("chdb: in %s: %w", database, err)
	}
	return string(out), nil
}

// Conn is a driver.Conn on the Engine's session (Engine.Conn, ConnWith).
// It implements Exec, Query, QueryRow, PrepareBatch, Ping, Close and
// ServerVersion; the other methods of driver.Conn panic (nil embedded
// interface). Positional "?" arguments are bound client-side as
// ClickHouse literals (Bind).
type Conn struct {
	driver.Conn // nil: methods not implemented here

	e        *Engine
	db       string
	settings map[string]string
}

var _ driver.Conn = (*Conn)(nil)

// Exec runs query (with args bound) and discards its output.
func (c *Conn) Exec(ctx context.Context, query string, args ...any) error {
	q, err := Bind(query, args...)
	if err != nil {
		return err
	}
	if _, err := c.e.run(ctx, c.db, c.settings, q, "TabSeparated"); err != nil {
		return err
	}
	return nil
}

// Query runs query (with args bound) and returns its rows, read whole
// (TabSeparatedWithNamesAndTypes).
func (c *Conn) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	q, err := Bind(query, args...)
	if err != nil {
		return nil, err
	}
	out, err := c.e.run(ctx, c.db, c.settings, q, "TabSeparatedWithNamesAndTypes")
	if err != nil {
		return nil, err
	}
	return parseRows(out, c.e.loc)
}

// QueryRow is Query for one row: Scan returns sql.ErrNoRows when there is
// none.
func (c *Conn) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	rows, err := c.Query(ctx, query, args...)
	if err != nil {
		return &row{err: err}
	}
	return &row{rows: rows.(*Rows)}
}

// Ping runs SELECT 1.
func (c *Conn) Ping(ctx context.Context) error {
	_, err := c.e.run(ctx, c.db, c.settings, "SELECT 1", "TabSeparated")
	return err
}

// Close does nothing: the session is the process's.
func (c *Conn) Close() error { return nil }

// ServerVersion describes the engine as a server handshake would: name
// "chDB", its version and time zone.
func (c *Conn) ServerVersion() (*driver.ServerVersion, error) {
	return &driver.ServerVersion{Name: "chDB", DisplayName: "chDB", Version: proto.ParseVersion(c.e.version), Timezone: c.e.loc}, nil
}

// Stats reports one open connection.
func (c *Conn) Stats() driver.Stats { return driver.Stats{MaxOpenConns: 1, Open: 1} }

// ErrNotImplemented is returned by the parts of driver.Rows and
// driver.Batch this adapter does not provide (struct scans, totals).
var ErrNotImplemented = errors.New("chdb: not implemented by the chDB adapter")
