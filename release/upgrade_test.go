package release

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/crowdlog/crowdlog/infra/clickhouse/chtest"
)

// oldViews is views.sql as an earlier crowdlog shipped it (ANY INNER JOIN,
// unaliased joined subqueries, reformulation_proportions taking one
// variant's impressions), the views a database created then still holds.
//
//go:embed testdata/views-old.sql
var oldViews string

// oldAnalystStatements are AnalystDatabaseStatements as the same crowdlog
// issued them: its publish_* materialized views joined an unaliased
// subquery.
func oldAnalystStatements(t *testing.T, db string) []string {
	t.Helper()
	stmts, err := AnalystDatabaseStatements(db)
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i, s := range stmts {
		if o := strings.Replace(s, ") AS raw_rows USING ", ") USING ", 1); o != s {
			stmts[i] = o
			changed++
		}
	}
	if changed != 3 {
		t.Fatalf("%d publish_* statements with a raw_rows alias, want 3 (released_items, undecrypted_summary, pdd_keyword_counts)", changed)
	}
	return stmts
}

// recordingConn records the statements run through Exec.
type recordingConn struct {
	driver.Conn
	mu    *sync.Mutex
	execs *[]string
}

func newRecording(c driver.Conn) recordingConn {
	return recordingConn{Conn: c, mu: &sync.Mutex{}, execs: &[]string{}}
}

func (r recordingConn) Exec(ctx context.Context, query string, args ...any) error {
	r.mu.Lock()
	*r.execs = append(*r.execs, query)
	r.mu.Unlock()
	return r.Conn.Exec(ctx, query, args...)
}

// drops returns the DROP statements recorded.
func (r recordingConn) drops() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range *r.execs {
		if strings.HasPrefix(strings.TrimSpace(s), "DROP") {
			out = append(out, s)
		}
	}
	return out
}

// upgradeEnv are the connections of an upgrade test on one engine.
type upgradeEnv struct {
	engine string
	db     string
	// conn (current database db), views (its analyst database) and admin
	// (any database) run with the engine's default settings.
	conn, views, admin driver.Conn
	// oldConn, oldViews and oldAdmin are the same with the settings an
	// earlier crowdlog's texts need to be created and written through on
	// this engine (none on 18.16).
	oldConn, oldViews, oldAdmin driver.Conn
	// oldMVsFail: on this engine, with its default settings, an insert
	// that triggers an earlier crowdlog's publish_* view fails (current
	// ClickHouse: Code 206) after the raw rows were written.
	oldMVsFail bool
}

// upgradeRelease is a release of the upgrade tests.
type upgradeRelease struct {
	key   Key
	items []Item
}

func upgradeData(epoch string) []upgradeRelease {
	q := Key{"query", epoch, "ft-u", 2}
	r := Key{"reformulation", epoch, "ft-u", 2}
	return []upgradeRelease{
		{q, []Item{
			{Item: "dog", Variant: "Dog", Impressions: 10, Users: 6},
			{Item: "dog", Variant: "DOG", Impressions: 3, Users: 2},
			{Item: "cat", Variant: "", Impressions: 4, Users: 3},
			{Item: "owl", Variant: "Owl", Impressions: 5, Users: 4},
		}},
		{r, []Item{
			{Item: "dog → puppy", Impressions: 5, Users: 3},
			{Item: "dog → dog food", Impressions: 2, Users: 2},
			{Item: "cat → kitten", Impressions: 1, Users: 1},
		}},
	}
}

// withKey returns r's items with r's key set.
func withKey(r upgradeRelease) []Item {
	items := append([]Item(nil), r.items...)
	for i := range items {
		items[i].App, items[i].Epoch, items[i].Policy, items[i].K = r.key.App, r.key.Epoch, r.key.Policy, r.key.K
	}
	return items
}

func writeUpgradeData(t *testing.T, ctx context.Context, w *Writer, rels []upgradeRelease) {
	t.Helper()
	for _, r := range rels {
		if err := w.WriteKeyedRelease(ctx, r.key, withKey(r), nil, time.Time{}); err != nil {
			t.Fatalf("write %v: %v", r.key, err)
		}
	}
}

// Queries of the upgrade tests, one String per row.
const (
	upgradeQueriesSQL = "SELECT concat(epoch, '|', policy, '|', toString(k), '|', query, '|', variant, '|', toString(impressions), '|', ifNull(toString(users), 'NULL')) AS r FROM released_queries ORDER BY r"
	upgradePropsSQL   = "SELECT concat(epoch, '|', policy, '|', toString(k), '|', source, '|', target, '|', toString(is_remainder), '|', toString(impressions), '|', toString(source_released), '|', toString(source_impressions)) AS r FROM reformulation_proportions ORDER BY r"
)

// wantQueries are released_queries' rows for rels, computed from the
// items: one per query item, users as written (ft-u measures them).
func wantQueries(rels []upgradeRelease) []string {
	var out []string
	for _, r := range rels {
		if r.key.App != "query" {
			continue
		}
		for _, it := range r.items {
			out = append(out, fmt.Sprintf("%s|%s|%d|%s|%s|%d|%d", r.key.Epoch, r.key.Policy, r.key.K, it.Item, it.Variant, it.Impressions, it.Users))
		}
	}
	sort.Strings(out)
	return out
}

// wantProportions are reformulation_proportions' rows for rels, computed
// from the items: per pair its impressions, the source's released
// reformulations' sum and the source's query impressions summed over its
// variants; per source with a query release a remainder row.
func wantProportions(rels []upgradeRelease) []string {
	type sk struct {
		key    Key
		source string
	}
	queries := map[sk]uint64{}
	for _, r := range rels {
		if r.key.App == "query" {
			for _, it := range r.items {
				queries[sk{Key{"", r.key.Epoch, r.key.Policy, r.key.K}, it.Item}] += it.Impressions
			}
		}
	}
	var out []string
	for _, r := range rels {
		if r.key.App != "reformulation" {
			continue
		}
		released := map[string]uint64{}
		for _, it := range r.items {
			released[strings.Split(it.Item, " → ")[0]] += it.Impressions
		}
		k := Key{"", r.key.Epoch, r.key.Policy, r.key.K}
		for _, it := range r.items {
			f := strings.Split(it.Item, " → ")
			out = append(out, fmt.Sprintf("%s|%s|%d|%s|%s|0|%d|%d|%d", k.Epoch, k.Policy, k.K, f[0], f[1], it.Impressions, released[f[0]], queries[sk{k, f[0]}]))
		}
		for src, rel := range released {
			q, ok := queries[sk{k, src}]
			if !ok {
				continue
			}
			rem := uint64(0)
			if q > rel {
				rem = q - rel
			}
			out = append(out, fmt.Sprintf("%s|%s|%d|%s|?|1|%d|%d|%d", k.Epoch, k.Policy, k.K, src, rem, rel, q))
		}
	}
	sort.Strings(out)
	return out
}

// queryLines returns q's single String column, in order.
func queryLines(ctx context.Context, conn driver.Conn, q string) ([]string, error) {
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// checkUpgradeViews compares released_queries and reformulation_proportions
// on conn with the rows computed from rels; it returns what differs.
func checkUpgradeViews(ctx context.Context, conn driver.Conn, rels []upgradeRelease) []string {
	var diffs []string
	for _, c := range []struct {
		sql  string
		want []string
	}{{upgradeQueriesSQL, wantQueries(rels)}, {upgradePropsSQL, wantProportions(rels)}} {
		got, err := queryLines(ctx, conn, c.sql)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("%.60s…: %v", c.sql, firstLine(err)))
			continue
		}
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			diffs = append(diffs, fmt.Sprintf("%.60s…:\n got %q\nwant %q", c.sql, got, c.want))
		}
	}
	return diffs
}

// countRows returns count() of a qualified table.
func countRows(t *testing.T, ctx context.Context, conn driver.Conn, table string) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// runUpgrade creates env.db and its analyst database as an earlier
// crowdlog did (oldViews, oldAnalystStatements), writes releases through
// them, then runs OpenConn and OpenAnalystDatabaseConn and checks that
// every crowdlog view was dropped and created again, that the views of
// both databases return the rows computed from the written items, that a
// second run drops nothing and records nothing, and that releases written
// afterwards reach the analyst database through the new publish_* views.
func runUpgrade(t *testing.T, ctx context.Context, env upgradeEnv) {
	db, adb := env.db, AnalystDatabase(env.db)
	s, err := probe(ctx, env.oldConn)
	if err != nil {
		t.Fatal(err)
	}
	old := splitStatements(oldViews)
	for _, st := range append(SchemaStatementsFor(s), old...) {
		if err := env.oldConn.Exec(ctx, st); err != nil {
			t.Fatalf("%s, earlier crowdlog's statement %.60q: %v", env.engine, st, err)
		}
	}
	for _, st := range oldAnalystStatements(t, db) {
		if err := env.oldAdmin.Exec(ctx, st); err != nil {
			t.Fatalf("%s, earlier crowdlog's statement %.60q: %v", env.engine, st, err)
		}
	}
	for _, st := range old {
		if err := env.oldViews.Exec(ctx, st); err != nil {
			t.Fatalf("%s, earlier crowdlog's view %.60q: %v", env.engine, st, err)
		}
	}
	before := upgradeData("2006-03")
	w0 := &Writer{BatchSize: DefaultBatchSize, Logger: slog.Default(), conn: env.oldConn, database: db, server: s}
	writeUpgradeData(t, ctx, w0, before)

	// the earlier views fail or give other rows on this engine: the test
	// starts from a database that needs the upgrade
	for _, c := range []driver.Conn{env.conn, env.views} {
		if d := checkUpgradeViews(ctx, c, before); len(d) == 0 {
			t.Fatalf("%s: the earlier crowdlog's views already return the expected rows; the test checks nothing", env.engine)
		} else {
			t.Logf("%s before the upgrade: %d of 2 views differ: %s", env.engine, len(d), strings.Join(d, "; "))
		}
	}

	// Releases written with the engine's default settings while the
	// earlier views are in place: on current ClickHouse the completion
	// row is written, then its publish_* views fail, so the analyst
	// database lacks the items until the backfill after the upgrade.
	mid := upgradeData("2006-05")
	w1 := &Writer{BatchSize: DefaultBatchSize, Logger: slog.Default(), conn: env.conn, database: db, server: s}
	for _, r := range mid {
		err := w1.WriteKeyedRelease(ctx, r.key, withKey(r), nil, time.Time{})
		switch {
		case env.oldMVsFail && (err == nil || !strings.Contains(err.Error(), "206")):
			t.Fatalf("%s: a release written through the earlier publish_* views: %v, want Code 206", env.engine, err)
		case !env.oldMVsFail && err != nil:
			t.Fatalf("%s: a release written through the earlier publish_* views: %v", env.engine, err)
		}
	}
	if env.oldMVsFail {
		if n := countRows(t, ctx, env.admin, quote(adb)+".released_items"); n != uint64(len(before[0].items)+len(before[1].items)) {
			t.Fatalf("%s: %s.released_items holds %d rows before the upgrade, want only the %d of the releases written with the earlier settings", env.engine, adb, n, len(before[0].items)+len(before[1].items))
		}
		t.Logf("%s: releases written through the earlier publish_* views failed (Code 206); their items are not in %s", env.engine, adb)
	}
	before = append(before, mid...)

	conn, admin, views := newRecording(env.conn), newRecording(env.admin), newRecording(env.views)
	w, err := OpenConn(ctx, conn, db)
	if err != nil {
		t.Fatalf("%s: OpenConn on the earlier database: %v", env.engine, err)
	}
	if _, err := OpenAnalystDatabaseConn(ctx, admin, views, db); err != nil {
		t.Fatalf("%s: OpenAnalystDatabaseConn on the earlier database: %v", env.engine, err)
	}
	// every view of the earlier text was dropped: 15 in each database, and
	// the 6 publish_* materialized views
	wantDrops := 2*len(old) + len(PublishedTables())
	drops := append(conn.drops(), admin.drops()...)
	if len(drops) != wantDrops || len(views.drops()) != 0 {
		t.Errorf("%s: first Open dropped %d views (%d through the views connection), want %d: %v", env.engine, len(drops), len(views.drops()), wantDrops, drops)
	}
	for _, c := range []struct {
		name string
		conn driver.Conn
	}{{db, env.conn}, {adb, env.views}} {
		if d := checkUpgradeViews(ctx, c.conn, before); len(d) > 0 {
			t.Errorf("%s: views of %s after the upgrade: %s", env.engine, c.name, strings.Join(d, "; "))
		}
	}
	for _, p := range PublishedTables() {
		var ddl string
		if err := env.admin.QueryRow(ctx, "SHOW CREATE TABLE "+quote(adb)+"."+quote(publishView(p))).Scan(&ddl); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(ddl, " JOIN ") && !strings.Contains(ddl, "raw_rows") {
			t.Errorf("%s: %s.%s is still the earlier text: %s", env.engine, adb, publishView(p), ddl)
		}
	}
	versions := quote(db) + "." + quote(ViewVersionsTable)
	recorded := countRows(t, ctx, env.admin, versions)
	if want := uint64(wantDrops); recorded != want {
		t.Errorf("%s: %s holds %d rows after the upgrade, want %d (one per view)", env.engine, versions, recorded, want)
	}

	// a second Open changes nothing
	conn2, admin2, views2 := newRecording(env.conn), newRecording(env.admin), newRecording(env.views)
	w2, err := OpenConn(ctx, conn2, db)
	if err != nil {
		t.Fatal(err)
	}
	_ = w2
	if _, err := OpenAnalystDatabaseConn(ctx, admin2, views2, db); err != nil {
		t.Fatal(err)
	}
	if d := append(append(conn2.drops(), admin2.drops()...), views2.drops()...); len(d) > 0 {
		t.Errorf("%s: second Open dropped %v", env.engine, d)
	}
	if n := countRows(t, ctx, env.admin, versions); n != recorded {
		t.Errorf("%s: second Open recorded %d view rows", env.engine, n-recorded)
	}

	// A newer record for completed_releases (a crowdlog version whose text
	// differs ran since): it is replaced, and with it the seven views that
	// read it (views.sql); nothing else is dropped.
	if err := env.admin.Exec(ctx, "INSERT INTO "+versions+" (database, view, sha256, created_ns) SELECT '"+db+"', 'completed_releases', 'other', max(created_ns) + 1 FROM "+versions); err != nil {
		t.Fatal(err)
	}
	conn3 := newRecording(env.conn)
	if _, err := OpenConn(ctx, conn3, db); err != nil {
		t.Fatal(err)
	}
	wantDeps := []string{"completed_releases", "released_queries", "released_reformulations", "released_clicks",
		"released_urls", "released_ltr_features", "released_keywords", "released_undecrypted"}
	var dropped []string
	for _, d := range conn3.drops() {
		dropped = append(dropped, strings.Trim(d[strings.LastIndex(d, ".")+1:], "`"))
	}
	sort.Strings(dropped)
	sort.Strings(wantDeps)
	if strings.Join(dropped, " ") != strings.Join(wantDeps, " ") {
		t.Errorf("%s: a changed completed_releases dropped %v, want %v", env.engine, dropped, wantDeps)
	}
	if d := checkUpgradeViews(ctx, env.conn, before); len(d) > 0 {
		t.Errorf("%s: views of %s after completed_releases was replaced: %s", env.engine, db, strings.Join(d, "; "))
	}
	recorded = countRows(t, ctx, env.admin, versions)

	// releases written after the upgrade reach the analyst database
	after := upgradeData("2006-04")
	writeUpgradeData(t, ctx, w, after)
	all := append(append([]upgradeRelease(nil), before...), after...)
	for _, c := range []struct {
		name string
		conn driver.Conn
	}{{db, env.conn}, {adb, env.views}} {
		if d := checkUpgradeViews(ctx, c.conn, all); len(d) > 0 {
			t.Errorf("%s: views of %s with releases written after the upgrade: %s", env.engine, c.name, strings.Join(d, "; "))
		}
	}
	items := 0
	for _, r := range all {
		items += len(r.items)
	}
	if n := countRows(t, ctx, env.admin, quote(adb)+".released_items"); n != uint64(items) {
		t.Errorf("%s: %s.released_items holds %d rows, want %d (every written item once)", env.engine, adb, n, items)
	}
	t.Logf("%s: upgrade dropped and created %d views; views equal the %d + %d rows computed from %d releases; second Open dropped 0; a changed completed_releases replaced %d views",
		env.engine, len(drops), len(wantQueries(all)), len(wantProportions(all)), len(all), len(dropped))
}

func TestViewName(t *testing.T) {
	for stmt, want := range map[string]string{
		"CREATE VIEW IF NOT EXISTS released_queries AS SELECT 1":                                       "released_queries",
		"create view if not exists\n  `a b` AS SELECT 1":                                               "a b",
		"CREATE MATERIALIZED VIEW IF NOT EXISTS `db_analyst`.`publish_releases` TO `db`.`x` AS SELECT": "publish_releases",
		"CREATE MATERIALIZED VIEW IF NOT EXISTS db.v TO t AS SELECT 1":                                 "v",
		"CREATE VIEW v AS SELECT 1":                                                                    "",
		"CREATE TABLE IF NOT EXISTS t (a UInt8) ENGINE = Memory":                                       "",
		"INSERT INTO v SELECT 1":                                                                       "",
	} {
		if got := viewName(stmt); got != want {
			t.Errorf("viewName(%q) = %q, want %q", stmt, got, want)
		}
	}
	for _, s := range append(ViewStatements(), oldAnalystStatements(t, "db")...) {
		isView := strings.Contains(s, " VIEW ")
		if (viewName(s) != "") != isView {
			t.Errorf("viewName(%.60q) = %q", s, viewName(s))
		}
	}
}

// TestUpgradeViews runs the upgrade of an earlier crowdlog's database on
// the ClickHouse 18.16 server.
func TestUpgradeViews(t *testing.T) {
	s := chtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := fmt.Sprintf("upg_%d", time.Now().UnixNano())
	admin, err := dial(ctx, s.TCPAddr, "default")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// the analyst database too, as the earlier crowdlog's statements
	// would, so that its connection can be made now
	for _, d := range []string{db, AnalystDatabase(db)} {
		if err := admin.Exec(ctx, "CREATE DATABASE "+d); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a, err := dial(c, s.TCPAddr, "default")
		if err != nil {
			return
		}
		defer a.Close()
		_ = a.Exec(c, "DROP DATABASE IF EXISTS "+AnalystDatabase(db))
		_ = a.Exec(c, "DROP DATABASE IF EXISTS "+db)
	})
	conn, err := dial(ctx, s.TCPAddr, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	views, err := dial(ctx, s.TCPAddr, AnalystDatabase(db))
	if err != nil {
		t.Fatal(err)
	}
	defer views.Close()
	runUpgrade(t, ctx, upgradeEnv{engine: "ClickHouse 18.16", db: db,
		conn: conn, views: views, admin: admin, oldConn: conn, oldViews: views, oldAdmin: admin})
}
