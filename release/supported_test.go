package release

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// badValue is, per ResultSettings entry, a value that changes what the
// views return (with the limit that makes an overflow mode act, for the
// engine tests), as measured on the 26.7 engine.
var badValue = map[string]struct{ value, limit, limitValue string }{
	"join_use_nulls":                     {"1", "", ""},
	"aggregate_functions_null_for_empty": {"1", "", ""},
	"limit":                              {"1", "", ""},
	"offset":                             {"1", "", ""},
	"result_overflow_mode":               {"'break'", "max_result_rows", "1"},
	"set_overflow_mode":                  {"'break'", "max_rows_in_set", "1"},
	"group_by_overflow_mode":             {"'any'", "max_rows_to_group_by", "100"},
	"sort_overflow_mode":                 {"'break'", "max_rows_to_sort", "100"},
	"timeout_overflow_mode":              {"'break'", "max_execution_time", "0.000001"},
}

// TestBadValueCoversResultSettings keeps badValue and ResultSettings in
// step: every refused setting is exercised by the tests below.
func TestBadValueCoversResultSettings(t *testing.T) {
	for _, s := range ResultSettings {
		if _, ok := badValue[s.Name]; !ok {
			t.Errorf("no bad value for %s", s.Name)
		}
	}
	if len(badValue) != len(ResultSettings) {
		t.Errorf("%d bad values for %d settings", len(badValue), len(ResultSettings))
	}
}

// TestCheckVersion: 18.16 and newer pass, older ones and the 1.1.54xxx
// numbering before 18.x are refused with a message naming the version.
func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"18.16.1": true, "18.16.1.1": true, "19.17.4.11": true, "20.4.2.9": true, "24.8.14.39": true, "26.7.2.1": true, "100.1": true,
		"18.14.19": false, "18.1.0": false, "1.1.54394": false, "17.99": false, "": false, "x.y": false, "26": false,
	} {
		err := checkVersion(v)
		if (err == nil) != ok {
			t.Errorf("checkVersion(%q) = %v, want ok %v", v, err, ok)
		}
		if err != nil && (!errors.Is(err, ErrUnsupportedServer) || !strings.Contains(err.Error(), fmt.Sprintf("%q", v)) && !strings.Contains(err.Error(), v)) {
			t.Errorf("checkVersion(%q): %v does not wrap ErrUnsupportedServer or name the version", v, err)
		}
	}
}

// TestBadSettings: defaults (as 18.16 and 26.7 print them) and absent
// names pass; every other value is named with its fix.
func TestBadSettings(t *testing.T) {
	ok := map[string]string{"join_use_nulls": "0", "aggregate_functions_null_for_empty": "false", "limit": "0",
		"result_overflow_mode": "throw", "group_by_overflow_mode": "throw"}
	if bad, _ := badSettings(ok); len(bad) != 0 {
		t.Errorf("defaults refused: %q", bad)
	}
	bad, fix := badSettings(map[string]string{"join_use_nulls": "1", "limit": "10", "set_overflow_mode": "break", "group_by_overflow_mode": "any"})
	want := []string{"join_use_nulls = 1", "limit = 10", "set_overflow_mode = break", "group_by_overflow_mode = any"}
	if len(bad) != len(want) {
		t.Fatalf("bad = %q, want %d entries", bad, len(want))
	}
	for _, w := range want {
		found := false
		for _, b := range bad {
			found = found || strings.HasPrefix(b, w+" (default ")
		}
		if !found {
			t.Errorf("%q not named in %q", w, bad)
		}
	}
	if got := strings.Join(fix, ", "); got != "join_use_nulls = 0, limit = 0, set_overflow_mode = 'throw', group_by_overflow_mode = 'throw'" {
		t.Errorf("fix = %q", got)
	}
}

// users26 are SHOW GRANTS FOR outputs of the 26.7 engine (chDB, users
// from a users.xml, the storage users.d files load into): ana a users.d
// analyst as 18.16's crowdlog wrote it (readonly profile,
// allow_databases, no <grants>), ana2 a user with <grants> GRANT SELECT
// ON crowdlog_analyst.*, wr one with the writer's two grants.
var users26 = map[string][]string{
	"ana": {
		"GRANT CREATE ARBITRARY TEMPORARY TABLE, CREATE TEMPORARY VIEW, CREATE FUNCTION, CREATE WORKLOAD, CREATE RESOURCE, DROP FUNCTION, DROP WORKLOAD, DROP RESOURCE, KILL QUERY, KILL TRANSACTION, MOVE PARTITION BETWEEN SHARDS, SYSTEM SHUTDOWN, SYSTEM SYNC FILESYSTEM CACHE, SYSTEM DROP CACHE, SYSTEM RECONNECT ZOOKEEPER, SYSTEM RELOAD, SYSTEM RESTART DISK, SYSTEM WAIT BLOBS CLEANUP, SYSTEM REPLICA READINESS, SYSTEM SYNC TRANSACTION LOG, SYSTEM SYNC FILE CACHE, SYSTEM FLUSH LOGS, SYSTEM FLUSH ASYNC INSERT QUEUE, SYSTEM THREAD FUZZER, SYSTEM UNFREEZE, SYSTEM UNLOCK SNAPSHOT, SYSTEM FAILPOINT, SYSTEM MEMORY, SYSTEM LISTEN, SYSTEM JEMALLOC, SYSTEM INSTRUMENT ADD, SYSTEM INSTRUMENT REMOVE, SYSTEM RESET DDL WORKER, displaySecretsInShowAndSelect, INTROSPECTION, CLUSTER, FILE, URL, REMOTE, MONGO, REDIS, MYSQL, POSTGRES, SQLITE, ODBC, JDBC, HDFS, S3, HIVE, AZURE, KAFKA, NATS, RABBITMQ, YTSAURUS, ARROW FLIGHT, SOURCES ON *.* TO ana",
		"GRANT TABLE ENGINE ON * TO ana",
		"GRANT SHOW DICTIONARIES, CREATE DICTIONARY, DROP DICTIONARY, dictGet ON `<no_database>`.* TO ana",
		"GRANT READ, WRITE ON crowdlog_analyst TO ana",
		"GRANT CHECK, SHOW, SELECT, INSERT, ALTER, CREATE DATABASE, CREATE TABLE, CREATE VIEW, CREATE DICTIONARY, DROP DATABASE, DROP TABLE, DROP VIEW, DROP DICTIONARY, UNDROP TABLE, TRUNCATE, OPTIMIZE, BACKUP, SYSTEM MERGES, SYSTEM TTL MERGES, SYSTEM FETCHES, SYSTEM MOVES, SYSTEM PULLING REPLICATION LOG, SYSTEM CLEANUP, SYSTEM BACKGROUND, SYSTEM SENDS, SYSTEM REPLICATION QUEUES, SYSTEM VIRTUAL PARTS UPDATE, SYSTEM REDUCE BLOCKING PARTS, SYSTEM DROP REPLICA, SYSTEM SYNC REPLICA, SYSTEM RESTART REPLICA, SYSTEM RESTORE REPLICA, SYSTEM RESTORE DATABASE REPLICA, SYSTEM WAIT LOADING PARTS, SYSTEM WAIT QUERY RUNNER, SYSTEM SYNC DATABASE REPLICA, SYSTEM FLUSH DISTRIBUTED, SYSTEM FLUSH OBJECT STORAGE QUEUE, SYSTEM LOAD PRIMARY KEY, SYSTEM UNLOAD PRIMARY KEY, dictGet ON crowdlog_analyst.* TO ana",
		"GRANT SET DEFINER ON crowdlog_analyst TO ana",
	},
	"ana2": {"GRANT SELECT ON crowdlog_analyst.* TO ana2"},
	"wr": {
		"GRANT SELECT, INSERT, ALTER, CREATE TABLE, CREATE VIEW ON crowdlog.* TO wr",
		"GRANT SELECT, INSERT, ALTER, CREATE TABLE, CREATE VIEW ON crowdlog_analyst.* TO wr",
	},
}

// TestCheckGrants runs the grant check on SHOW GRANTS texts: the 26.7
// engine's (users26) and hand-made ones in the forms 24.x–26.x print
// (backquoted names, a role, a grant option, a column list, a partial
// revoke of a global grant). Exactly crowdlog's grants pass; a users.d
// user with global grants, any extra privilege, target, role or option,
// and a missing grant are refused, naming them.
func TestCheckGrants(t *testing.T) {
	an, wr := analystGrants("crowdlog_analyst"), writerGrants("crowdlog")
	cases := []struct {
		name  string
		lines []string
		want  grantSet
		ok    bool
		names []string // what the error must name
	}{
		{"26.7 users.d analyst", users26["ana"], an, false, []string{"FILE", "URL", "S3", "REMOTE", "KILL QUERY", "SYSTEM SHUTDOWN", "ON *.*", "INSERT", "DROP TABLE"}},
		{"26.7 analyst", users26["ana2"], an, true, nil},
		{"26.7 writer", users26["wr"], wr, true, nil},
		{"26.7 writer as analyst", users26["wr"], an, false, []string{"SELECT, INSERT, ALTER, CREATE TABLE, CREATE VIEW ON crowdlog.*", "INSERT, ALTER, CREATE TABLE, CREATE VIEW ON crowdlog_analyst.*"}},
		{"26.7 analyst as writer", users26["ana2"], wr, false, []string{"lacks SELECT ON crowdlog.*", "INSERT ON crowdlog_analyst.*"}},
		{"backquoted", []string{"GRANT SELECT ON `crowdlog_analyst`.* TO `analyst`"}, an, true, nil},
		{"writer in statement order", []string{
			"GRANT SELECT, INSERT, CREATE TABLE, CREATE VIEW, ALTER ON crowdlog_analyst.* TO crowdlog_writer",
			"GRANT SELECT, INSERT, CREATE TABLE, CREATE VIEW, ALTER ON crowdlog.* TO crowdlog_writer"}, wr, true, nil},
		{"writer with DROP", []string{
			"GRANT SELECT, INSERT, ALTER, CREATE TABLE, CREATE VIEW, DROP TABLE ON crowdlog.* TO crowdlog_writer",
			"GRANT SELECT, INSERT, ALTER, CREATE TABLE, CREATE VIEW ON crowdlog_analyst.* TO crowdlog_writer"}, wr, false, []string{"DROP TABLE ON crowdlog.*"}},
		{"role", []string{"GRANT SELECT ON crowdlog_analyst.* TO analyst", "GRANT admins TO analyst"}, an, false, []string{"GRANT admins TO analyst (a role)"}},
		{"grant option", []string{"GRANT SELECT ON crowdlog_analyst.* TO analyst WITH GRANT OPTION"}, an, false, []string{"WITH GRANT OPTION", "lacks SELECT"}},
		{"release database", []string{"GRANT SELECT ON crowdlog_analyst.* TO analyst", "GRANT SELECT ON crowdlog.* TO analyst"}, an, false, []string{"SELECT ON crowdlog.*"}},
		{"columns", []string{"GRANT SELECT ON crowdlog_analyst.* TO analyst", "GRANT SELECT(app, epoch), INSERT(app) ON crowdlog.release_draws TO analyst"}, an, false, []string{"SELECT(app, epoch), INSERT(app) ON crowdlog.release_draws"}},
		{"global with a partial revoke", []string{"GRANT SELECT ON *.* TO analyst", "REVOKE SELECT ON crowdlog.* FROM analyst"}, an, false, []string{"SELECT ON *.*", "lacks SELECT ON crowdlog_analyst.*"}},
		{"sources", []string{"GRANT SELECT ON crowdlog_analyst.* TO analyst", "GRANT FILE, URL, S3, REMOTE ON *.* TO analyst"}, an, false, []string{"FILE, URL, S3, REMOTE ON *.*"}},
		{"nothing", nil, an, false, []string{"lacks SELECT ON crowdlog_analyst.*"}},
	}
	for _, c := range cases {
		err := checkGrants("u", c.lines, c.want)
		if (err == nil) != c.ok {
			t.Errorf("%s: checkGrants = %v, want ok %v", c.name, err, c.ok)
			continue
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrExtraGrants) {
			t.Errorf("%s: %v does not wrap ErrExtraGrants", c.name, err)
		}
		for _, n := range c.names {
			if !strings.Contains(err.Error(), n) {
				t.Errorf("%s: error does not name %q: %v", c.name, n, err)
			}
		}
	}
}

// dialSettings opens a native connection to the test server as default
// with session settings (what a profile or a client sends).
func dialSettings(t *testing.T, ctx context.Context, settings chgo.Settings) chgo.Conn {
	t.Helper()
	conn, err := chgo.Open(&chgo.Options{Addr: []string{srv.TCPAddr}, Protocol: chgo.Native, Settings: settings, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestProbeRefusesResultSettings (test server, 18.16): a session with a
// ResultSettings value other than the default is refused by probe, which
// names the setting and its value; the same server with default settings
// passes (control). Only numeric settings travel as client settings to
// 18.16 (join_use_nulls; limit, offset and
// aggregate_functions_null_for_empty do not exist there): the overflow
// modes are set in a profile by TestOpenRefusesWriterProfile.
func TestProbeRefusesResultSettings(t *testing.T) {
	openTestWriter(t)
	ctx := ctx30(t)
	s, err := probe(ctx, dialSettings(t, ctx, nil))
	if err != nil {
		t.Fatalf("control, default settings: %v", err)
	}
	var text string
	if err := dialSettings(t, ctx, nil).QueryRow(ctx, settingsQuery()).Scan(&text); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	values, _ := parseSettings(text)
	for n := range values {
		have[n] = true
	}
	refused := 0
	for _, rs := range ResultSettings {
		if !have[rs.Name] {
			continue
		}
		v := badValue[rs.Name].value
		n, err := strconv.Atoi(v)
		if err != nil {
			continue // 18.16's protocol carries only numbers as client settings: TestOpenRefusesWriterProfile sets the others
		}
		_, err = probe(ctx, dialSettings(t, ctx, chgo.Settings{rs.Name: n}))
		if !errors.Is(err, ErrUnsupportedServer) || !strings.Contains(err.Error(), rs.Name+" = "+v) || !strings.Contains(err.Error(), s.Version) {
			t.Errorf("probe with %s = %s: %v; want ErrUnsupportedServer naming the setting and ClickHouse %s", rs.Name, v, err, s.Version)
			continue
		}
		refused++
	}
	if !have["join_use_nulls"] || refused == 0 {
		t.Fatalf("ClickHouse %s: %d of %d settings refused (join_use_nulls present: %v)", s.Version, refused, len(ResultSettings), have["join_use_nulls"])
	}
	t.Logf("ClickHouse %s: %d of %d ResultSettings refused as client settings", s.Version, refused, len(ResultSettings))
}

// TestOpenRefusesWriterProfile (test server, 18.16): a writer whose
// users.d profile sets join_use_nulls = 1 and the five overflow modes to
// break (any) is refused by Open with a message naming each setting, its
// value and the writer, and Open creates no table;
// the same writer without the setting opens (control) and gets the
// tables.
func TestOpenRefusesWriterProfile(t *testing.T) {
	w := openTestWriter(t)
	ctx := ctx30(t)
	db := fmt.Sprintf("t_prof_%d", time.Now().UnixNano())
	if err := w.conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	const name, pw, profile = "crowdlog_test_profile_writer", "profile-test-password", "crowdlog_test_profile"
	text, err := clickhouse.WriterUsersXML(clickhouse.WriterUser{Name: name, Password: pw, Databases: []string{db}})
	if err != nil {
		t.Fatal(err)
	}
	text = strings.ReplaceAll(text, clickhouse.WriterProfile, profile)
	path := filepath.Join(clickhouse.UsersDir(srv.Dir), "crowdlog-test-profile.xml")
	t.Cleanup(func() { os.Remove(path) })
	install := func(text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tables := func() uint64 {
		var n uint64
		if err := w.conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ?", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	open := func() (*Writer, error) {
		return Open(clickhouse.WithLogin(ctx, clickhouse.Login{User: name, Password: pw}), srv.TCPAddr, db)
	}
	// wait for the reload: until the user logs in
	waitFor := func(ok func(error) bool) error {
		var err error
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			var ww *Writer
			ww, err = open()
			if ww != nil {
				ww.Close()
			}
			if ok(err) {
				return err
			}
		}
		return err
	}
	set := map[string]string{"join_use_nulls": "1", "result_overflow_mode": "break", "set_overflow_mode": "break",
		"group_by_overflow_mode": "any", "sort_overflow_mode": "break", "timeout_overflow_mode": "break"}
	var xml strings.Builder
	for k, v := range set {
		fmt.Fprintf(&xml, "\n            <%s>%s</%s>", k, v, k)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	install(strings.Replace(text, "<readonly>0</readonly>", "<readonly>0</readonly>"+xml.String(), 1))
	err = waitFor(func(err error) bool { return errors.Is(err, ErrUnsupportedServer) })
	if !errors.Is(err, ErrUnsupportedServer) || !strings.Contains(err.Error(), name) {
		t.Fatalf("Open as a writer with %v in its profile: %v", set, err)
	}
	for k, v := range set {
		if !strings.Contains(err.Error(), k+" = "+v+" (default ") {
			t.Errorf("refusal does not name %s = %s: %v", k, v, err)
		}
	}
	if n := tables(); n != 0 {
		t.Errorf("refused Open created %d tables in %s", n, db)
	}
	t.Logf("refused: %v", err)
	// control: the same user without the settings, in a new file (the
	// server notices a changed users.d by file names and modification
	// times in whole seconds; a rewrite within the second can go unseen)
	os.Remove(path)
	path = filepath.Join(clickhouse.UsersDir(srv.Dir), "crowdlog-test-profile-control.xml")
	install(text)
	if err := waitFor(func(err error) bool { return err == nil }); err != nil {
		t.Fatalf("control, the writer without the setting: %v", err)
	}
	if n := tables(); n < uint64(len(SchemaStatements())) {
		t.Errorf("control Open created %d tables in %s", n, db)
	}
}

// TestInitRefusesBeforeCreating (test server, 18.16): what Init can
// refuse it refuses before it creates the database: users to make without
// a users.d directory, an analyst name or network a users.d file cannot
// carry, a writer named default, an analyst and a writer of the same
// name. Control: the same Init without users
// creates the database.
func TestInitRefusesBeforeCreating(t *testing.T) {
	w := openTestWriter(t)
	ctx := ctx30(t)
	exists := func(db string) bool {
		var n uint64
		if err := w.conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	ud := clickhouse.UsersDir(srv.Dir)
	for i, c := range []struct {
		o   InitOptions
		why string // in the refusal
	}{
		{InitOptions{Analyst: Analyst{Name: "crowdlog_refused", Password: "p"}}, "users.d directory"},
		{InitOptions{Writer: WriterAccount{Name: "crowdlog_refused", Password: "p"}}, "users.d directory"},
		{InitOptions{Analyst: Analyst{Name: "a b", Password: "p"}, UsersDir: ud}, "not a plain identifier"},
		{InitOptions{Analyst: Analyst{Name: "crowdlog_refused", Password: "p"}, Networks: []string{"every host"}, UsersDir: ud}, "not an IP address"},
		{InitOptions{Writer: WriterAccount{Name: "default", Password: "p"}, UsersDir: ud}, "may not be user default"},
		{InitOptions{Analyst: Analyst{Name: "crowdlog_same", Password: "p"}, Writer: WriterAccount{Name: "crowdlog_same", Password: "p"}, UsersDir: ud}, "different names"},
	} {
		o := c.o
		o.Addr, o.AllowPasswordlessDefault, o.AnalystWait = srv.TCPAddr, true, time.Second
		o.Database = fmt.Sprintf("t_refused_%d_%d", i, time.Now().UnixNano())
		_, err := Init(ctx, o)
		switch {
		case err == nil:
			t.Errorf("case %d: Init accepted %+v", i, o)
		case !strings.Contains(err.Error(), c.why):
			t.Errorf("case %d: refused for another reason than %q: %v", i, c.why, err)
		case exists(o.Database) || exists(AnalystDatabase(o.Database)):
			t.Errorf("case %d: refused Init (%v) created database %s", i, err, o.Database)
		}
	}
	db := fmt.Sprintf("t_refused_control_%d", time.Now().UnixNano())
	if _, err := Init(ctx, InitOptions{Addr: srv.TCPAddr, AllowPasswordlessDefault: true, Database: db}); err != nil || !exists(db) || !exists(AnalystDatabase(db)) {
		t.Errorf("control Init without users: %v (database made: %v)", err, exists(db))
	}
}

// TestInitResumes (test server, 18.16): Init interrupted after each of
// its steps in turn (initHook), then rerun, gives the complete result:
// the analyst reads exactly the released items written before (computed
// here, not read back through the pipeline), the analyst copy holds each
// item once, and the writer logs in and reads releases.
func TestInitResumes(t *testing.T) {
	w := openTestWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	key := Key{App: "query", Epoch: "2006-03", Policy: "ft-u", K: 2}
	want := map[string]uint64{}
	var items []Item
	for i, q := range []string{"dog", "cat", "emu"} {
		items = append(items, Item{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K, Item: q, Impressions: uint64(10 + i), Users: uint64(5 + i)})
		want[q] = uint64(10 + i)
	}
	if err := w.WriteKeyedRelease(ctx, key, items, nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	o := InitOptions{Addr: srv.TCPAddr, AllowPasswordlessDefault: true, Database: w.Database(),
		Analyst:  Analyst{Name: "crowdlog_resume_analyst", Password: "resume-analyst-password"},
		Writer:   WriterAccount{Name: "crowdlog_resume_writer", Password: "resume-writer-password"},
		UsersDir: clickhouse.UsersDir(srv.Dir), AnalystWait: 30 * time.Second}
	defer func() { initHook = nil }()
	injected := errors.New("injected failure")
	steps := []string{"release-database", "analyst-database", "writer", "analyst"}
	for _, step := range steps {
		initHook = func(s string) error {
			if s == step {
				return injected
			}
			return nil
		}
		if _, err := Init(ctx, o); !errors.Is(err, injected) {
			t.Fatalf("Init interrupted after %s: %v", step, err)
		}
	}
	initHook = nil
	res, err := Init(ctx, o)
	if err != nil {
		t.Fatalf("rerun: %v", err)
	}
	an, err := DialAs(ctx, srv.TCPAddr, res.AnalystDatabase, o.Analyst.Name, o.Analyst.Password)
	if err != nil {
		t.Fatal(err)
	}
	defer an.Close()
	rows, err := an.Query(ctx, "SELECT query, impressions FROM released_queries")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for rows.Next() {
		var q string
		var n uint64
		if err := rows.Scan(&q, &n); err != nil {
			t.Fatal(err)
		}
		got[q] += n
	}
	rows.Close()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("analyst reads %v, want %v", got, want)
	}
	var copies uint64
	if err := an.QueryRow(ctx, "SELECT count() FROM released_items").Scan(&copies); err != nil || copies != uint64(len(items)) {
		t.Errorf("analyst copy holds %d rows (%v), want %d", copies, err, len(items))
	}
	if err := checkWriter(ctx, srv.TCPAddr, w.Database(), o.Writer); err != nil {
		t.Errorf("writer after the rerun: %v", err)
	}
	t.Logf("Init interrupted after %s, then rerun: %d released items, analyst and writer in place", strings.Join(steps, ", "), len(got))
}
