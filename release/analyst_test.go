package release

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// TestAppViews writes made-up releases under several epochs and policies
// and reads them back through the per-application views: only completed
// releases, the epoch's time range derived from its name (hand-computed
// below), and users NULL under dp-a.
func TestAppViews(t *testing.T) {
	w := openTestWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	write := func(app, epoch, pol string, undec []Undecrypted, items ...Item) {
		t.Helper()
		for i := range items {
			items[i].App, items[i].Epoch, items[i].Policy, items[i].K = app, epoch, pol, 2
		}
		if err := w.WriteKeyedRelease(ctx, Key{app, epoch, pol, 2}, items, undec, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	write("query", "2006-03", "ft-u", []Undecrypted{{App: "query", Epoch: "2006-03", Policy: "ft-u", K: 2, Reports: 1, Users: 1, Tags: 5}},
		Item{Item: "dog", Variant: "Dog", Impressions: 10, Users: 6}, Item{Item: "cat", Impressions: 4, Users: 3})
	write("query", "2006-03", "dp-a", nil, Item{Item: "dog", Impressions: 7, Users: 0})
	write("query", "20060301T120000Z-90m", "ft-a", nil, Item{Item: "dog", Impressions: 3, Users: 2})
	write("query", "all", "ft-u", nil, Item{Item: "dog", Impressions: 1, Users: 1})
	write("query", "2006-03-02", "dp-u", nil, Item{Item: "dog", Impressions: 5, Users: 5})
	write("query", "2006-13", "ft-u", nil, Item{Item: "dog", Impressions: 2, Users: 2})
	write("reformulation", "2006", "ft-u", nil, Item{Item: `a\u2192b\u005cc → dog`, Impressions: 4, Users: 3})
	write("click", "2006", "ft-u", nil, Item{Item: "dog → www.example.com", Impressions: 7, Users: 5})
	write("url", "2006", "ft-u", nil, Item{Item: "www.example.com", Impressions: 9, Users: 6})
	write("ltr", "2006", "ft-u", nil, Item{Item: "dog → www.example.com → dwell → 1m-5m", Impressions: 3, Users: 2})
	write("keyword", "2006", "dp-a", nil, Item{Item: "dog", Impressions: 12})
	// an unfinished release (no releases row) must not show
	if err := w.insertItems(ctx, Key{"query", "2006-04", "ft-u", 2},
		[]Item{{App: "query", Epoch: "2006-04", Policy: "ft-u", K: 2, Item: "x", Impressions: 9, Users: 9}}, time.Now()); err != nil {
		t.Fatal(err)
	}

	rows, err := w.conn.Query(ctx, `SELECT epoch, policy, query, variant, impressions, users,
		ifNull(toString(epoch_start), 'NULL'), ifNull(toString(epoch_end), 'NULL')
		FROM released_queries ORDER BY epoch, policy, query`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var epoch, pol, q, v, start, end string
		var imp uint64
		var users *uint64
		if err := rows.Scan(&epoch, &pol, &q, &v, &imp, &users, &start, &end); err != nil {
			t.Fatal(err)
		}
		u := "NULL"
		if users != nil {
			u = fmt.Sprint(*users)
		}
		got = append(got, strings.Join([]string{epoch, pol, q, v, fmt.Sprint(imp), u, start, end}, "|"))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"2006-03|dp-a|dog||7|NULL|2006-03-01 00:00:00|2006-04-01 00:00:00",
		"2006-03|ft-u|cat||4|3|2006-03-01 00:00:00|2006-04-01 00:00:00",
		"2006-03|ft-u|dog|Dog|10|6|2006-03-01 00:00:00|2006-04-01 00:00:00",
		"2006-03-02|dp-u|dog||5|5|2006-03-02 00:00:00|2006-03-03 00:00:00",
		"2006-13|ft-u|dog||2|2|NULL|NULL",
		"20060301T120000Z-90m|ft-a|dog||3|2|2006-03-01 12:00:00|2006-03-01 13:30:00",
		"all|ft-u|dog||1|1|NULL|NULL",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("released_queries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	one := func(q string, dest ...any) {
		t.Helper()
		if err := w.conn.QueryRow(ctx, q).Scan(dest...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var a, b, c, d, start, end string
	var imp uint64
	var users *uint64
	one("SELECT source, target, impressions, users, toString(epoch_start), toString(epoch_end) FROM released_reformulations", &a, &b, &imp, &users, &start, &end)
	if a != `a→b\c` || b != "dog" || imp != 4 || users == nil || *users != 3 || start != "2006-01-01 00:00:00" || end != "2007-01-01 00:00:00" {
		t.Errorf("released_reformulations: %q %q %d %v %s %s", a, b, imp, users, start, end)
	}
	one("SELECT query, url, impressions FROM released_clicks", &a, &b, &imp)
	if a != "dog" || b != "www.example.com" || imp != 7 {
		t.Errorf("released_clicks: %q %q %d", a, b, imp)
	}
	one("SELECT url, impressions, users FROM released_urls", &a, &imp, &users)
	if a != "www.example.com" || imp != 9 || users == nil || *users != 6 {
		t.Errorf("released_urls: %q %d %v", a, imp, users)
	}
	one("SELECT query, url, feature, bucket, impressions FROM released_ltr_features", &a, &b, &c, &d, &imp)
	if a != "dog" || b != "www.example.com" || c != "dwell" || d != "1m-5m" || imp != 3 {
		t.Errorf("released_ltr_features: %q %q %q %q %d", a, b, c, d, imp)
	}
	one("SELECT keyword, impressions, users FROM released_keywords", &a, &imp, &users)
	if a != "dog" || imp != 12 || users != nil {
		t.Errorf("released_keywords: %q %d users %v, want dog 12 NULL (dp-a does not measure users)", a, imp, users)
	}
	var reports, tags uint64
	one("SELECT app, epoch, reports, tags, toString(epoch_start) FROM released_undecrypted", &a, &b, &reports, &tags, &start)
	if a != "query" || b != "2006-03" || reports != 1 || tags != 5 || start != "2006-03-01 00:00:00" {
		t.Errorf("released_undecrypted: %q %q %d %d %s", a, b, reports, tags, start)
	}
	// every application has its view, and each shows exactly its app's rows
	wantRows := map[string]uint64{"query": 7, "reformulation": 1, "click": 1, "url": 1, "ltr": 1, "keyword": 1}
	for app, view := range AppViews {
		var n uint64
		one("SELECT count() FROM "+w.Database()+"."+view, &n)
		if n != wantRows[app] {
			t.Errorf("%s (app %s): %d rows, want %d", view, app, n, wantRows[app])
		}
	}
	for _, pol := range []string{"ft-a", "ft-u", "dp-a", "dp-u", "zealous"} {
		var m uint8
		one("SELECT toUInt8(policy != 'dp-a') FROM (SELECT '"+pol+"' AS policy)", &m)
		// views.sql's rule and UsersMeasured agree
		if (m == 1) != UsersMeasured(pol) {
			t.Errorf("policy %s: views say users_measured=%d, UsersMeasured=%v", pol, m, UsersMeasured(pol))
		}
	}
	var measured uint8
	one("SELECT users_measured FROM completed_releases WHERE policy = 'dp-a' AND app = 'query'", &measured)
	if measured != 0 {
		t.Errorf("completed_releases: dp-a users_measured = %d, want 0", measured)
	}
}

// TestSchemaLowCardinality checks the LowCardinality variant of the
// schema: exactly the app, epoch, policy, dataset and campaign columns
// change (20, counted by hand from schema.sql), and, on 18.16 with its
// experimental setting on (current releases need none), the tables it
// creates take a release through the Writer and the views read it back.
func TestSchemaLowCardinality(t *testing.T) {
	plain := strings.Join(SchemaStatementsFor(Server{}), ";\n")
	lc := strings.Join(SchemaStatementsFor(Server{LowCardinality: true}), ";\n")
	if strings.Contains(plain, "LowCardinality") {
		t.Errorf("schema without LowCardinality mentions it")
	}
	if n := strings.Count(lc, "LowCardinality(String)"); n != 20 {
		t.Errorf("LowCardinality schema has %d LowCardinality(String) columns, want 20 (3+3+3+4+3+1+1+1+1)", n)
	}
	for _, col := range []string{"item String,", "variant String,", "params String,", "keyword String,"} {
		if !strings.Contains(lc, col) {
			t.Errorf("LowCardinality schema lost %q", col)
		}
	}

	w0 := openTestWriter(t) // starts the server
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := w0.Database() + "_lc"
	if err := w0.conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	conn, err := dial(ctx, srv.TCPAddr, db)
	if err != nil {
		t.Fatal(err)
	}
	w := &Writer{BatchSize: DefaultBatchSize, Logger: w0.Logger, conn: conn, database: db}
	defer w.Close()
	sctx := ctx
	if !w0.Server().LowCardinality {
		sctx = chgo.Context(ctx, chgo.WithSettings(chgo.Settings{"allow_experimental_low_cardinality_type": 1}))
	}
	for _, s := range append(SchemaStatementsFor(Server{LowCardinality: true}), ViewStatements()...) {
		if err := conn.Exec(sctx, s); err != nil {
			t.Fatalf("%.60s: %v", s, err)
		}
	}
	var typ string
	if err := conn.QueryRow(ctx, "SELECT type FROM system.columns WHERE database = ? AND table = 'released_items' AND name = 'epoch'", db).Scan(&typ); err != nil || typ != "LowCardinality(String)" {
		t.Fatalf("released_items.epoch is %q (%v), want LowCardinality(String)", typ, err)
	}
	items := []Item{{App: "query", Epoch: "2006-03", Policy: "dp-a", K: 2, Item: "dog", Impressions: 7}}
	if err := w.WriteKeyedRelease(ctx, items[0].Key(), items, nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	back, err := w.ReleasedItems(ctx, "query", "2006-03", "dp-a", 2)
	if err != nil || len(back) != 1 || back[0] != items[0] {
		t.Fatalf("ReleasedItems = %+v, %v; want %+v", back, err, items)
	}
	var q, end string
	var users *uint64
	if err := conn.QueryRow(ctx, "SELECT query, users, toString(epoch_end) FROM released_queries").Scan(&q, &users, &end); err != nil ||
		q != "dog" || users != nil || end != "2006-04-01 00:00:00" {
		t.Errorf("released_queries on LowCardinality tables: %q %v %q, %v", q, users, end, err)
	}
}

// TestInitAnalyst runs Init with an analyst on the test server: on 18.16
// through a users.d file (the server reloads it), on current releases
// through CREATE USER. The analyst reads the views of the analyst database
// and is refused INSERT, DROP, CREATE and other databases; the data is
// unchanged afterwards. TestAttackAnalystRawTables checks the raw tables.
func TestInitAnalyst(t *testing.T) {
	w := openTestWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	items := []Item{{App: "query", Epoch: "2006-03", Policy: "ft-u", K: 2, Item: "dog", Impressions: 10, Users: 6}}
	if err := w.WriteKeyedRelease(ctx, items[0].Key(), items, nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	a := Analyst{Name: "crowdlog_test_analyst", Password: "not-a-real-password"}
	res, err := Init(ctx, InitOptions{Addr: srv.TCPAddr, AllowPasswordlessDefault: true, Database: w.Database(), Analyst: a,
		UsersDir: clickhouse.UsersDir(srv.Dir), AnalystWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Server.SQLUsers == (res.AnalystFile != "") {
		t.Errorf("Init on %+v wrote analyst file %q", res.Server, res.AnalystFile)
	}
	if res.AnalystDatabase != AnalystDatabase(w.Database()) {
		t.Errorf("Init made analyst database %q, want %q", res.AnalystDatabase, AnalystDatabase(w.Database()))
	}
	t.Logf("ClickHouse %s: analyst via %q (SQL users: %v)", res.Server.Version, res.AnalystFile, res.Server.SQLUsers)
	a.Database = res.AnalystDatabase
	if _, err := DialAs(ctx, srv.TCPAddr, a.Database, a.Name, "wrong-password"); err == nil {
		t.Errorf("analyst logged in with a wrong password")
	}
	an, err := DialAs(ctx, srv.TCPAddr, a.Database, a.Name, a.Password)
	if err != nil {
		t.Fatal(err)
	}
	defer an.Close()
	var users *uint64
	var q string
	if err := an.QueryRow(ctx, "SELECT query, users FROM released_queries").Scan(&q, &users); err != nil || q != "dog" || users == nil || *users != 6 {
		t.Errorf("analyst reads released_queries: %q %v, %v", q, users, err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("analyst could %s", what)
			return
		}
		// 18.16: "Cannot … in readonly mode"; current: also ACCESS_DENIED / "Not enough privileges"
		msg := strings.ToLower(err.Error())
		if !strings.Contains(msg, "readonly") && !strings.Contains(msg, "privileges") && !strings.Contains(msg, "access denied") {
			t.Errorf("analyst %s: refused for another reason: %v", what, err)
		}
	}
	b, err := an.PrepareBatch(ctx, "INSERT INTO released_items (app, epoch, policy, k, item, variant, impressions, users, released_at)")
	if err == nil {
		if err = b.Append("query", "2006-03", "ft-u", uint32(2), "cat", "", uint64(1), uint64(1), time.Now()); err == nil {
			err = b.Send()
		}
	}
	refused("INSERT", err)
	refused("DROP TABLE", an.Exec(ctx, "DROP TABLE releases"))
	refused("CREATE TABLE", an.Exec(ctx, "CREATE TABLE analyst_table (a UInt8) ENGINE = Memory"))
	refused("ALTER TABLE DELETE", an.Exec(ctx, "ALTER TABLE released_items DELETE WHERE 1"))
	var n uint64
	if err := an.QueryRow(ctx, "SELECT count() FROM default.one_table_that_does_not_matter").Scan(&n); err == nil {
		t.Errorf("analyst reads database default")
	}
	got, err := w.ReleasedItems(ctx, "query", "2006-03", "ft-u", 2)
	if err != nil || len(got) != 1 || got[0] != items[0] {
		t.Errorf("after the analyst's attempts released_items = %+v, %v; want %+v", got, err, items)
	}
	if err := w.conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = 'releases'", w.Database()).Scan(&n); err != nil || n != 1 {
		t.Errorf("releases table after the analyst's DROP: %d, %v", n, err)
	}
}

// TestAnalystStatements checks the SQL of current ClickHouse's analyst
// (not runnable on 18.16, which has no CREATE USER): no default role,
// every global grant revoked, SELECT on the analyst database; quoting and
// refusals (user default among them). TestChdbAccessStatements parses
// them on the 26.7 engine.
func TestAnalystStatements(t *testing.T) {
	got, err := AnalystStatements(Analyst{Name: "analyst", Password: `it's\x`, Database: AnalystDatabase("crowdlog")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"CREATE USER OR REPLACE `analyst` IDENTIFIED WITH sha256_password BY 'it\\'s\\\\x' DEFAULT ROLE NONE SETTINGS readonly = 1",
		"REVOKE ALL ON *.* FROM `analyst`",
		"GRANT SELECT ON `crowdlog_analyst`.* TO `analyst`",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("AnalystStatements:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range []Analyst{{Name: "a b", Password: "p", Database: "d"}, {Name: "a", Password: "p", Database: "d;"}, {Name: "a", Database: "d"}, {Name: "default", Password: "p", Database: "d"}} {
		if _, err := AnalystStatements(bad); err == nil {
			t.Errorf("AnalystStatements(%+v) accepted", bad)
		}
	}
}
