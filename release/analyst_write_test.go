package release

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// TestAttackAnalystWrite mounts docs/threat-model.md's analyst-write
// attack on a real ClickHouse server set up by Init with the analyst and
// the writer users: the analyst (users.d: readonly = 1, its analyst
// database only) tries, on every table of the release database and of the
// analyst database, INSERT … SELECT (a forged or duplicated release row),
// ALTER … DELETE, TRUNCATE and DROP TABLE; all must be refused and every
// table keep its row count. The writer (the release stages' user) writes a
// release through Open with its Login but is refused on a database that is
// not crowdlog's. The control is user default, the administrator the
// release stage used before the writer, which does the same INSERT and
// DROP on the same tables and succeeds. Prints ATTACK analyst-write.
func TestAttackAnalystWrite(t *testing.T) {
	w := openTestWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := w.Database()
	at := time.Date(2006, 5, 1, 0, 0, 0, 0, time.UTC)
	march := Key{"query", "2006-03", "ft-u", 2}
	if err := w.WriteKeyedRelease(ctx, march, []Item{{App: "query", Epoch: "2006-03", Policy: "ft-u", K: 2, Item: "dog", Impressions: 10, Users: 6}},
		[]Undecrypted{{App: "query", Epoch: "2006-03", Policy: "ft-u", K: 2, Reports: 1, Users: 1, Tags: 5}}, at); err != nil {
		t.Fatal(err)
	}
	a := Analyst{Name: "crowdlog_write_analyst", Password: "analyst-write-pw"}
	wr := WriterAccount{Name: "crowdlog_test_writer", Password: "writer-pw-41"}
	res, err := Init(ctx, InitOptions{Addr: srv.TCPAddr, AllowPasswordlessDefault: true, Database: db, Analyst: a, Writer: wr,
		UsersDir: clickhouse.UsersDir(srv.Dir), AnalystWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	adb := res.AnalystDatabase
	if res.WriterFile == "" && !res.Server.SQLUsers {
		t.Fatal("Init wrote no users.d file for the writer")
	}

	// the tables (not views) of both databases, and their row counts
	tables := func() map[string]uint64 {
		t.Helper()
		out := map[string]uint64{}
		for _, name := range strings1(t, ctx, w.conn, "SELECT concat('`', database, '`.`', name, '`') FROM system.tables WHERE database IN (?, ?) AND engine NOT IN ('View', 'MaterializedView') ORDER BY database, name", db, adb) {
			var n uint64
			if err := w.conn.QueryRow(ctx, "SELECT count() FROM "+name).Scan(&n); err != nil {
				t.Fatalf("count %s: %v", name, err)
			}
			out[name] = n
		}
		return out
	}
	before := tables()
	if len(before) < 8 {
		t.Fatalf("only %d tables in %s and %s: %v", len(before), db, adb, before)
	}
	attempts := func(conn driver.Conn, table string) map[string]error {
		return map[string]error{
			"insert":   conn.Exec(ctx, "INSERT INTO "+table+" SELECT * FROM "+table+" LIMIT 1"),
			"delete":   conn.Exec(ctx, "ALTER TABLE "+table+" DELETE WHERE 1 = 1"),
			"truncate": conn.Exec(ctx, "TRUNCATE TABLE "+table),
			"drop":     conn.Exec(ctx, "DROP TABLE "+table),
		}
	}

	an, err := DialAs(ctx, srv.TCPAddr, adb, a.Name, a.Password)
	if err != nil {
		t.Fatal(err)
	}
	defer an.Close()
	tried, refused := 0, 0
	for table := range before {
		for op, err := range attempts(an, table) {
			tried++
			if err == nil {
				t.Errorf("the analyst's %s on %s succeeded", op, table)
				continue
			}
			refused++
		}
	}
	after := tables()
	changed := 0
	for table, n := range before {
		if after[table] != n {
			changed++
			t.Errorf("%s: %d rows after the analyst's attempts, %d before", table, after[table], n)
		}
	}

	// the writer writes a release through Open with its Login ...
	wctx := clickhouse.WithLogin(ctx, clickhouse.Login{User: wr.Name, Password: wr.Password})
	ww, err := Open(wctx, srv.TCPAddr, db)
	if err != nil {
		t.Fatalf("Open as the writer: %v", err)
	}
	defer ww.Close()
	april := Key{"query", "2006-04", "ft-u", 2}
	if err := ww.WriteKeyedRelease(wctx, april, []Item{{App: "query", Epoch: "2006-04", Policy: "ft-u", K: 2, Item: "cat", Impressions: 4, Users: 3}}, nil, at); err != nil {
		t.Fatalf("the writer's release: %v", err)
	}
	if got := strings1(t, ctx, an, "SELECT query FROM released_queries WHERE epoch = '2006-04'"); len(got) != 1 || got[0] != "cat" {
		t.Errorf("the writer's release as the analyst sees it: %v, want [cat]", got)
	}
	// ... but may not use another database
	other := db + "_other"
	if err := w.conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS `"+other+"`"); err != nil {
		t.Fatal(err)
	}
	if err := w.conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS `"+other+"`.secret (s String) ENGINE = MergeTree ORDER BY s"); err != nil {
		t.Fatal(err)
	}
	defer w.conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+other+"`")
	writerOther := 0
	for op, err := range attempts(ww.conn, "`"+other+"`.secret") {
		if err == nil {
			writerOther++
			t.Errorf("the writer's %s on %s.secret succeeded", op, other)
		}
	}
	if _, err := Open(wctx, srv.TCPAddr, other); err == nil {
		t.Errorf("the writer opened database %s", other)
	}

	// control: user default, the same INSERT and DROP, succeeds
	ctlInsert, ctlDrop := 0, 0
	for table := range before {
		if w.conn.Exec(ctx, "INSERT INTO "+table+" SELECT * FROM "+table+" LIMIT 1") == nil {
			ctlInsert++
		}
	}
	for table := range before {
		if w.conn.Exec(ctx, "DROP TABLE "+table) == nil {
			ctlDrop++
		}
	}
	if ctlInsert != len(before) || ctlDrop != len(before) {
		t.Errorf("control: user default inserted into %d and dropped %d of %d tables; the control must show the attack working", ctlInsert, ctlDrop, len(before))
	}
	fmt.Printf("ATTACK analyst-write: on ClickHouse %s the read-only analyst's INSERT, ALTER DELETE, TRUNCATE and DROP on the %d tables of the release and analyst databases were refused %d of %d times (%d tables changed); the release stages' writer wrote its release and was refused %d of 4 writes on another database; control, user default: inserted into %d and dropped %d of %d tables\n",
		res.Server.Version, len(before), refused, tried, changed, 4-writerOther, ctlInsert, ctlDrop, len(before))
}
