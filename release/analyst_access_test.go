package release

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// readAll runs q on conn and reads every row: nil when the server answered
// it, its error otherwise.
func readAll(ctx context.Context, conn driver.Conn, q string) error {
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

// strings1 returns the single String column of q's rows, in order.
func strings1(t *testing.T, ctx context.Context, conn driver.Conn, q string, args ...any) []string {
	t.Helper()
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}

// accessDenied reports whether err is the server refusing a database or
// table to the user (18.16: code 291 "Access denied to database"; current
// releases: ACCESS_DENIED, "Not enough privileges").
func accessDenied(err error) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "access denied") || strings.Contains(msg, "not enough privileges") ||
		strings.Contains(msg, "access_denied")
}

// TestAttackAnalystRawTables logs in as the analyst made by Init and
// checks what the analyst can read, on the real server (ClickHouse 18.16
// here):
//
//   - every view of the analyst database answers, with the completed
//     releases, ledger rows and PDD days written before Init (backfilled)
//     and after it (published by the materialized views; one of them the
//     redo of an interrupted DP release), and nothing of an interrupted
//     release;
//   - every raw table of the release database — listed from its
//     system.tables, so tables added later (release_draws, and an extra
//     one this test plants) are covered without naming them — is refused
//     with "access denied", also through an IN subquery;
//   - the analyst database holds only views, the publishing materialized
//     views and the copies of PublishedTables, and no copy holds a row of
//     an interrupted release or PDD day;
//   - table functions (merge, remote, cluster), SETTINGS readonly = 0 and
//     CREATE VIEW are refused.
//
// The control is an analyst with the same profile on the release database
// (the layout before the analyst database: allow_databases, or GRANT
// SELECT, on the release database), which reads every raw table and the
// interrupted rows. What the server lets through anyway (system.processes,
// system.query_log, schema tables, KILL QUERY) is measured and logged with
// t.Log lines "ANALYST-ACCESS …", not failed: docs/threat-model.md
// records it. Prints ATTACK analyst-raw-tables.
func TestAttackAnalystRawTables(t *testing.T) {
	w := openTestWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := w.Database()
	at := time.Date(2006, 5, 1, 0, 0, 0, 0, time.UTC)
	item := func(key Key, name string, imp, users uint64) Item {
		return Item{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K, Item: name, Impressions: imp, Users: users}
	}
	insertRaw := func(q string, row ...any) {
		t.Helper()
		b, err := w.conn.PrepareBatch(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Append(row...); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
	}
	interrupt := func(key Key, name string) {
		t.Helper()
		if err := w.insertItems(ctx, key, []Item{item(key, name, 99, 99)}, at); err != nil {
			t.Fatal(err)
		}
	}
	march := Key{"query", "2006-03", "ft-u", 2}
	if err := w.WriteKeyedRelease(ctx, march, []Item{item(march, "dog", 10, 6), item(march, "cat", 4, 3)},
		[]Undecrypted{{App: "query", Epoch: "2006-03", Policy: "ft-u", K: 2, Reports: 1, Users: 1, Tags: 5}}, at); err != nil {
		t.Fatal(err)
	}
	dp := Key{"query", "2006-03", "dp-u", 2}
	if err := w.WriteSpendingRelease(ctx, dp, []Item{item(dp, "dog", 9, 8)}, nil, at,
		Spend{Dataset: "default", Epoch: "2006-03", App: "query", Policy: "dp-u", K: 2, Epsilon: 1, Delta: 1e-3, Params: "d=1"}, Budget{}); err != nil {
		t.Fatal(err)
	}
	day := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	if err := w.WritePDDRound(ctx, PDDRound{Campaign: "flu", Day: day, Active: 4, Grouped: 4, Decrypted: 4, Groups: 1, Complete: 1,
		Confidence: 1, Counts: []KeywordCount{{Keyword: "fever", Count: 3}}}, at); err != nil {
		t.Fatal(err)
	}
	// Interrupted before Init: a query release and a PDD day without their
	// completion rows; and a raw table crowdlog does not know of (as
	// release_draws was once), with a secret row.
	interrupt(Key{"query", "2006-04", "dp-u", 2}, "interrupted before init, redone after")
	interrupt(Key{"query", "2006-06", "ft-u", 2}, "interrupted before init, never redone")
	insertRaw("INSERT INTO pdd_keyword_counts (campaign, day, keyword, count, released_at)", "flu", day.AddDate(0, 0, 1), "interrupted-keyword", int64(5), at)
	if err := w.conn.Exec(ctx, "CREATE TABLE extra_raw (secret String) ENGINE = MergeTree ORDER BY secret"); err != nil {
		t.Fatal(err)
	}
	insertRaw("INSERT INTO extra_raw (secret)", "extra secret")

	a := Analyst{Name: "crowdlog_access_analyst", Password: "access-test-password"}
	res, err := Init(ctx, InitOptions{Addr: srv.TCPAddr, AllowPasswordlessDefault: true, Database: db, Analyst: a, UsersDir: clickhouse.UsersDir(srv.Dir), AnalystWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	adb := res.AnalystDatabase
	// After Init: the redo of the interrupted DP release and one more
	// completed release (the materialized views publish both, the redo
	// without the interrupted attempt's rows) and one more interrupted one.
	redo := Key{"query", "2006-04", "dp-u", 2}
	if err := w.WriteSpendingRelease(ctx, redo, []Item{item(redo, "dog", 5, 4)}, nil, at,
		Spend{Dataset: "default", Epoch: "2006-04", App: "query", Policy: "dp-u", K: 2, Epsilon: 1, Delta: 1e-3, Params: "d=2"}, Budget{}); err != nil {
		t.Fatal(err)
	}
	april := Key{"query", "2006-04", "ft-u", 2}
	if err := w.WriteKeyedRelease(ctx, april, []Item{item(april, "fish", 6, 4)}, nil, at); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePDDRound(ctx, PDDRound{Campaign: "flu", Day: day.AddDate(0, 0, 2), Active: 4, Grouped: 4, Decrypted: 4, Groups: 1, Complete: 1,
		Confidence: 1, Counts: []KeywordCount{{Keyword: "cough", Count: 2}}}, at); err != nil {
		t.Fatal(err)
	}
	interrupt(Key{"query", "2006-05", "ft-u", 2}, "interrupted after init")

	an, err := DialAs(ctx, srv.TCPAddr, adb, a.Name, a.Password)
	if err != nil {
		t.Fatal(err)
	}
	defer an.Close()
	t.Logf("ANALYST-ACCESS ClickHouse %s, release database %s, analyst database %s", res.Server.Version, db, adb)

	// 1. Views: every one answers; the released queries are exactly the
	// completed ones.
	var views []string
	for _, s := range ViewStatements() {
		name, _, _ := strings.Cut(strings.TrimPrefix(s, "CREATE VIEW IF NOT EXISTS "), " ")
		views = append(views, name)
	}
	for _, v := range views {
		if err := readAll(ctx, an, "SELECT * FROM "+adb+"."+v); err != nil {
			t.Errorf("analyst cannot read view %s.%s: %v", adb, v, err)
		}
	}
	got := strings1(t, ctx, an, "SELECT concat(epoch, '/', policy, '/', query) FROM released_queries ORDER BY epoch, policy, query")
	want := []string{"2006-03/dp-u/dog", "2006-03/ft-u/cat", "2006-03/ft-u/dog", "2006-04/dp-u/dog", "2006-04/ft-u/fish"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("released_queries as the analyst: %v, want %v", got, want)
	}
	if got := strings1(t, ctx, an, "SELECT keyword FROM keyword_daily ORDER BY day"); strings.Join(got, " ") != "fever cough" {
		t.Errorf("keyword_daily as the analyst: %v, want [fever cough] (days before and after Init)", got)
	}
	if got := strings1(t, ctx, an, "SELECT params FROM privacy_ledger ORDER BY params"); strings.Join(got, " ") != "d=1 d=2" {
		t.Errorf("privacy_ledger as the analyst: %v, want [d=1 d=2] (before and after Init)", got)
	}

	// 2. Every raw table of the release database is refused.
	raw := strings1(t, ctx, w.conn, "SELECT name FROM system.tables WHERE database = ? ORDER BY name", db)
	for _, need := range []string{"released_items", "releases", "privacy_ledger", "extra_raw"} {
		found := false
		for _, r := range raw {
			found = found || r == need
		}
		if !found {
			t.Fatalf("system.tables of %s lacks %s: %v", db, need, raw)
		}
	}
	readable := 0
	for _, r := range raw {
		err := readAll(ctx, an, "SELECT * FROM "+db+"."+r)
		if !accessDenied(err) {
			readable++
			t.Errorf("analyst reads raw table %s.%s (want access denied): %v", db, r, err)
		}
	}
	if readable == 0 {
		t.Logf("ANALYST-ACCESS refused: SELECT * FROM %s.<t> for all %d raw tables %v", db, len(raw), raw)
	}
	inSub := "SELECT count() FROM " + adb + ".released_queries WHERE query IN (SELECT item FROM " + db + ".released_items)"
	if err := readAll(ctx, an, inSub); !accessDenied(err) {
		t.Errorf("analyst reads a raw table through an IN subquery (want access denied): %s: %v", inSub, err)
	}

	// 3. The analyst database: views, publishing views and published
	// copies only, and no row of an interrupted release or day.
	isPublished := map[string]bool{}
	for _, p := range PublishedTables() {
		isPublished[p] = true
	}
	rows, err := w.conn.Query(ctx, "SELECT name, engine FROM system.tables WHERE database = ? ORDER BY name", adb)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, engine string
		if err := rows.Scan(&name, &engine); err != nil {
			t.Fatal(err)
		}
		switch {
		case engine == "View":
		case engine == "MaterializedView" && strings.HasPrefix(name, "publish_") && isPublished[strings.TrimPrefix(name, "publish_")]:
		case isPublished[name]:
		default:
			t.Errorf("analyst database %s holds %s (engine %s), which is neither a view nor a published copy", adb, name, engine)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	for _, q := range []string{
		"SELECT item FROM released_items WHERE item LIKE 'interrupted%'",
		"SELECT epoch FROM released_items WHERE (app, epoch, policy, k) NOT IN (SELECT app, epoch, policy, k FROM releases)",
		"SELECT keyword FROM pdd_keyword_counts WHERE keyword LIKE 'interrupted%'",
	} {
		if got := strings1(t, ctx, an, q); len(got) > 0 {
			t.Errorf("the analyst database shows rows of an interrupted release: %s: %v", q, got)
		}
	}
	var published, completed uint64
	if err := an.QueryRow(ctx, "SELECT count() FROM released_items FINAL").Scan(&published); err != nil {
		t.Fatal(err)
	}
	if err := w.conn.QueryRow(ctx, "SELECT count() FROM released_items FINAL WHERE (app, epoch, policy, k) IN (SELECT app, epoch, policy, k FROM releases)").Scan(&completed); err != nil {
		t.Fatal(err)
	}
	if published != completed || published != 5 {
		t.Errorf("%s.released_items has %d rows, the release database %d completed ones; want 5 both", adb, published, completed)
	}

	// 4. Ways around the rights, each refused (for any reason).
	port, err := port(srv.TCPAddr)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"SELECT count() FROM merge('" + db + "', '.*')",
		"SELECT count() FROM remote('127.0.0.1:" + port + "', " + db + ".released_items)",
		"SELECT count() FROM remote('127.0.0.1:" + port + "', " + db + ".released_items, 'default', '')",
		"SELECT count() FROM cluster('test_shard_localhost', " + db + ".released_items)",
		"SELECT count() FROM " + db + ".released_items SETTINGS readonly = 0",
		"SELECT count() FROM " + db + ".released_items SETTINGS readonly = 2",
		"CREATE VIEW " + adb + ".analyst_made AS SELECT * FROM " + db + ".released_items",
	} {
		err := readAll(ctx, an, q)
		if err == nil {
			t.Errorf("analyst ran %s", q)
			continue
		}
		t.Logf("ANALYST-ACCESS refused: %s: %s", q, firstLine(err))
	}

	// 5. What the server lets through: measured and logged.
	probe := fmt.Sprintf("crowdlog-probe-%d", time.Now().UnixNano())
	done := make(chan error, 1)
	go func() {
		done <- readAll(ctx, w.conn, "SELECT sleep(2), '"+probe+"'")
	}()
	seen := ""
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline) && seen == ""; time.Sleep(50 * time.Millisecond) {
		rows, err := an.Query(ctx, "SELECT user, query FROM system.processes WHERE query LIKE '%"+probe+"%' AND user != '"+a.Name+"'")
		if err != nil {
			seen = "refused: " + firstLine(err)
			break
		}
		for rows.Next() {
			var user, q string
			if err := rows.Scan(&user, &q); err == nil {
				seen = fmt.Sprintf("shows user %s's running query text %q", user, q)
			}
		}
		rows.Close()
	}
	if seen == "" {
		seen = "showed no other user's query in 1.5 s"
	}
	t.Logf("ANALYST-ACCESS system.processes: %s", seen)
	kill := readAll(ctx, an, "KILL QUERY WHERE query LIKE '%"+probe+"%' AND user = 'default' ASYNC")
	if kill == nil {
		t.Logf("ANALYST-ACCESS KILL QUERY of user default's query: accepted")
	} else {
		t.Logf("ANALYST-ACCESS KILL QUERY of user default's query: refused: %s", firstLine(kill))
	}
	if err := <-done; err != nil {
		t.Logf("ANALYST-ACCESS the probe query of user default ended with %s", firstLine(err))
	}
	if err := readAll(ctx, an, "SELECT user, query FROM system.query_log LIMIT 1"); err != nil {
		t.Logf("ANALYST-ACCESS system.query_log: %s (the server logs no queries, or refuses them)", firstLine(err))
	} else {
		t.Logf("ANALYST-ACCESS system.query_log: readable, with every user's query text")
	}
	count := func(q string) string {
		var n uint64
		if err := an.QueryRow(ctx, q, db).Scan(&n); err != nil {
			return "refused: " + firstLine(err)
		}
		return fmt.Sprint(n) + " rows"
	}
	var schema []string
	for _, tbl := range []string{"tables", "columns", "parts", "mutations"} {
		schema = append(schema, fmt.Sprintf("system.%s of %s: %s", tbl, db, count("SELECT count() FROM system."+tbl+" WHERE database = ?")))
	}
	sort.Strings(schema)
	t.Logf("ANALYST-ACCESS schema the analyst sees: %s", strings.Join(schema, "; "))

	// The control: the same rights on the release database.
	ctl := controlAnalyst(t, ctx, db)
	defer ctl.Close()
	ctlReadable := 0
	for _, r := range raw {
		if readAll(ctx, ctl, "SELECT * FROM "+db+"."+r) == nil {
			ctlReadable++
		}
	}
	ctlRows := strings1(t, ctx, ctl, "SELECT item FROM "+db+".released_items WHERE item LIKE 'interrupted%'")
	if ctlReadable != len(raw) || len(ctlRows) != 2 {
		t.Errorf("control analyst on the release database read %d of %d raw tables and %d interrupted rows; want all and 2", ctlReadable, len(raw), len(ctlRows))
	}
	draws := ""
	for _, r := range raw {
		if r == "release_draws" {
			draws = ", release_draws among them"
		}
	}
	fmt.Printf("ATTACK analyst-raw-tables: the analyst read %d of %d raw tables of the release database (all of its system.tables%s) and 0 interrupted rows; "+
		"IN subquery, merge(), remote(), cluster(), SETTINGS refused; control (the same analyst on the release database, the layout before): %d of %d raw tables, %d interrupted rows\n",
		readable, len(raw), draws, ctlReadable, len(raw), len(ctlRows))
}

// controlAnalyst makes a read-only analyst whose one database is the
// release database db itself (as Init did before the analyst database)
// and returns its connection, for controls. On 18.16 it writes its own
// users.d file (removed at cleanup), elsewhere CREATE USER (dropped).
func controlAnalyst(t *testing.T, ctx context.Context, db string) driver.Conn {
	t.Helper()
	a := Analyst{Name: "crowdlog_control_analyst", Password: "control-test-password", Database: db}
	s, err := Probe(ctx, srv.TCPAddr)
	if err != nil {
		t.Fatal(err)
	}
	if s.SQLUsers {
		if err := CreateAnalyst(ctx, srv.TCPAddr, a); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if conn, err := dial(context.Background(), srv.TCPAddr, "default"); err == nil {
				conn.Exec(context.Background(), "DROP USER IF EXISTS "+a.Name)
				conn.Close()
			}
		})
	} else {
		text, err := clickhouse.AnalystUsersXML(clickhouse.AnalystUser{Name: a.Name, Password: a.Password, Database: db})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(clickhouse.UsersDir(srv.Dir), "crowdlog-control-analyst.xml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(path) })
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := CheckAnalyst(ctx, srv.TCPAddr, a)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("control analyst cannot log in: %v", err)
		}
	}
	conn, err := DialAs(ctx, srv.TCPAddr, db, a.Name, a.Password)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// firstLine is the first line of err's text.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// TestAnalystDatabaseStatements checks the publishing statements as text
// and against the schema: every copied column list is exactly the raw
// table's columns (a column added to schema.sql must be published or not
// on purpose), and every marker table exists.
func TestAnalystDatabaseStatements(t *testing.T) {
	if _, err := AnalystDatabaseStatements("a;b"); err == nil {
		t.Error("AnalystDatabaseStatements accepted a database name that is no identifier")
	}
	stmts, err := AnalystDatabaseStatements("crowdlog")
	if err != nil {
		t.Fatal(err)
	}
	if stmts[0] != "CREATE DATABASE IF NOT EXISTS `crowdlog_analyst`" {
		t.Errorf("first statement %q", stmts[0])
	}
	if n := 1 + 3*len(published); len(stmts) != n {
		t.Errorf("%d statements, want %d", len(stmts), n)
	}
	for _, s := range stmts {
		if strings.Contains(s, "release_draws") {
			t.Errorf("a publishing statement names release_draws: %s", s)
		}
	}
	w := openTestWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tables := map[string]bool{}
	for _, name := range strings1(t, ctx, w.conn, "SELECT name FROM system.tables WHERE database = ?", w.Database()) {
		tables[name] = true
	}
	for _, p := range published {
		cols := strings1(t, ctx, w.conn, "SELECT name FROM system.columns WHERE database = ? AND table = ?", w.Database(), p.name) // in table order (18.16 has no position column)
		if strings.Join(cols, ",") != strings.Join(p.columns, ",") {
			t.Errorf("published %s copies columns %v; schema.sql has %v", p.name, p.columns, cols)
		}
		if p.marker != "" && !tables[p.marker] {
			t.Errorf("published %s: marker table %s is not in the schema", p.name, p.marker)
		}
	}
}
