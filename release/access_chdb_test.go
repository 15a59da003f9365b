//go:build chdb

package release

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/clickhouse/chdb"
)

// formatQuery returns the 26.7 engine's canonical text of stmt (its
// parser's, formatted back), or the parse error.
func formatQuery(ctx context.Context, conn driver.Conn, stmt string) (string, error) {
	var out string
	err := conn.QueryRow(ctx, "SELECT formatQuery(?)", stmt).Scan(&out)
	return out, err
}

// operationsStatements returns the SQL lines of docs/operations.md's
// block between the markers "<!-- access statements -->" and "<!-- end
// access statements -->": the statements an operator runs on a server
// with SQL users.
func operationsStatements(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "<!-- access statements -->")
	block, _, ok2 := strings.Cut(rest, "<!-- end access statements -->")
	if !ok || !ok2 {
		t.Fatal("docs/operations.md has no <!-- access statements --> block")
	}
	var out []string
	for _, l := range strings.Split(block, "\n") {
		l = strings.TrimSpace(l)
		for _, p := range []string{"CREATE USER", "REVOKE", "GRANT", "SHOW GRANTS", "ALTER USER", "ALTER SETTINGS PROFILE", "SELECT", "DROP USER"} {
			if strings.HasPrefix(l, p) {
				out = append(out, strings.TrimSuffix(l, ";"))
				break
			}
		}
	}
	return out
}

// TestChdbAccessStatements parses the statements that make the analyst
// and the writer on a server with SQL users (AnalystStatements,
// WriterStatements) and those docs/operations.md gives operators, on the
// 26.7 engine: each parses, and the engine's canonical text of the
// code's statements equals the text written here by hand (so the
// password literal, the grants and their targets are what they should
// be). The password literal reads back as the password. Running them
// fails only for want of a user storage (chDB has none: Code 514), not
// for their syntax.
func TestChdbAccessStatements(t *testing.T) {
	e := chdbEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := e.Conn("")
	pw := `it's\x`
	an, err := AnalystStatements(Analyst{Name: "analyst", Password: pw, Database: "crowdlog_analyst"})
	if err != nil {
		t.Fatal(err)
	}
	wr, err := WriterStatements(WriterAccount{Name: "crowdlog_writer", Password: "s3cret"}, "crowdlog")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`CREATE USER OR REPLACE analyst IDENTIFIED WITH sha256_password BY 'it\'s\\x' DEFAULT ROLE NONE SETTINGS readonly = 1`,
		`REVOKE ALL ON *.* FROM analyst`,
		`GRANT SELECT ON crowdlog_analyst.* TO analyst`,
		`CREATE USER OR REPLACE crowdlog_writer IDENTIFIED WITH sha256_password BY 's3cret' DEFAULT ROLE NONE`,
		`REVOKE ALL ON *.* FROM crowdlog_writer`,
		`GRANT SELECT, INSERT, CREATE TABLE, CREATE VIEW, ALTER ON crowdlog.* TO crowdlog_writer`,
		`GRANT SELECT, INSERT, CREATE TABLE, CREATE VIEW, ALTER ON crowdlog_analyst.* TO crowdlog_writer`,
	}
	got := append(append([]string(nil), an...), wr...)
	if len(got) != len(want) {
		t.Fatalf("%d statements, want %d: %q", len(got), len(want), got)
	}
	for i, stmt := range got {
		canon, err := formatQuery(ctx, conn, stmt)
		if err != nil {
			t.Errorf("26.7 does not parse %q: %v", stmt, err)
			continue
		}
		if canon != want[i] {
			t.Errorf("26.7 reads %q as\n%s\nwant\n%s", stmt, canon, want[i])
		}
	}
	// the password literal, as CREATE USER carries it, reads back as the password
	lit := strings.TrimSuffix(strings.SplitN(an[0], " BY ", 2)[1], " DEFAULT ROLE NONE SETTINGS readonly = 1")
	var back string
	if err := conn.QueryRow(ctx, "SELECT "+lit).Scan(&back); err != nil || back != pw {
		t.Errorf("password literal %s reads back as %q (%v), want %q", lit, back, err, pw)
	}
	// chDB's user default may not CREATE USER (Code 497) and, with access
	// management, has no storage for it (Code 514): not a syntax error
	if err := conn.Exec(ctx, an[0]); err == nil || !strings.Contains(err.Error(), "497") && !strings.Contains(err.Error(), "514") {
		t.Errorf("CREATE USER on chDB: %v, want Code 497 or 514 (no user management), not a syntax error", err)
	}
	docs := operationsStatements(t)
	for _, stmt := range docs {
		if _, err := formatQuery(ctx, conn, stmt); err != nil {
			t.Errorf("docs/operations.md: 26.7 does not parse %q: %v", stmt, err)
		}
	}
	if len(docs) < len(want) {
		t.Fatalf("docs/operations.md gives %d statements, want at least %d", len(docs), len(want))
	}
	// its first seven are the code's, for the names and password it shows
	dw, err := WriterStatements(WriterAccount{Name: "crowdlog_writer", Password: "…"}, "crowdlog")
	if err != nil {
		t.Fatal(err)
	}
	da, err := AnalystStatements(Analyst{Name: "analyst", Password: "…", Database: "crowdlog_analyst"})
	if err != nil {
		t.Fatal(err)
	}
	for i, stmt := range append(dw, da...) {
		c1, err1 := formatQuery(ctx, conn, stmt)
		c2, err2 := formatQuery(ctx, conn, docs[i])
		if err1 != nil || err2 != nil || c1 != c2 {
			t.Errorf("docs/operations.md statement %d reads\n%s (%v)\nthe code issues\n%s (%v)", i+1, c2, err2, c1, err1)
		}
	}
	t.Logf("chDB %s: %d statements of the code parsed to the expected text, %d of docs/operations.md parsed", e.Version(), len(got), len(docs))
}

// viewRows returns, per release-database view, the sorted cityHash64 of
// its rows as read through conn (ORDER BY: a sorted read, as the recipes
// do), or "error: …".
func viewRows(ctx context.Context, conn driver.Conn, views []string) map[string]string {
	out := map[string]string{}
	for _, v := range views {
		rows, err := conn.Query(ctx, "SELECT cityHash64(*) AS h FROM "+v+" ORDER BY h")
		if err != nil {
			out[v] = "error: " + err.Error()
			continue
		}
		var hs []uint64
		for rows.Next() {
			var h uint64
			if err = rows.Scan(&h); err != nil {
				break
			}
			hs = append(hs, h)
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
		if err != nil {
			out[v] = "error: " + err.Error()
			continue
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i] < hs[j] })
		out[v] = fmt.Sprintf("%d rows %v", len(hs), hs)
	}
	return out
}

// TestChdbResultSettings, on the 26.7 engine: each of ResultSettings at
// its bad value (badValue, with the limit that makes an overflow mode
// act) changes the rows of at least one view, or makes one fail, against
// the same views read with default settings (50,000 released queries and
// 50,000 reformulations over 5,000 sources, inserted here); and OpenConn
// on a session with the setting alone is refused with
// ErrUnsupportedServer naming the setting and its value, creating no
// table, while OpenConn with default settings passes before and after.
func TestChdbResultSettings(t *testing.T) {
	e := chdbEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := chdbDatabase(t, e, "settings")
	if _, err := OpenConn(ctx, e.Conn(db), db); err != nil {
		t.Fatalf("control, default settings: %v", err)
	}
	if _, err := e.QueryTSV(db, `INSERT INTO releases (app, epoch, policy, k, items, impressions, released_at) VALUES
		('query', '2006-03', 'ft-u', 2, 50000, 1250025000, '2006-04-01 00:00:00'),
		('reformulation', '2006-03', 'ft-u', 2, 50000, 100000, '2006-04-01 00:00:00'),
		('url', '2006-03', 'ft-u', 2, 0, 0, '2006-04-01 00:00:00');
		INSERT INTO released_items (app, epoch, policy, k, item, variant, impressions, users, released_at)
		SELECT 'query', '2006-03', 'ft-u', 2, concat('q', toString(number)), '', number + 1, 1, '2006-04-01 00:00:00' FROM numbers(50000);
		INSERT INTO released_items (app, epoch, policy, k, item, variant, impressions, users, released_at)
		SELECT 'reformulation', '2006-03', 'ft-u', 2, concat('q', toString(number % 5000), ' → r', toString(number)), '', 2, 1, '2006-04-01 00:00:00' FROM numbers(50000)`); err != nil {
		t.Fatal(err)
	}
	var views []string
	for _, s := range ViewStatements() {
		views = append(views, strings.Fields(s)[5]) // CREATE VIEW IF NOT EXISTS name
	}
	base := viewRows(ctx, e.Conn(db), views)
	for v, r := range base {
		if strings.HasPrefix(r, "error") {
			t.Fatalf("view %s with default settings: %s", v, r)
		}
	}
	for _, rs := range ResultSettings {
		b := badValue[rs.Name]
		set := map[string]string{rs.Name: b.value}
		if b.limit != "" {
			set[b.limit] = b.limitValue
		}
		// the engine reads a setting's default the first time it is set,
		// under the settings set so far: read them all at their defaults
		// first, or the tiny max_execution_time times that read out
		prime := map[string]string{rs.Name: quoteSetting(rs.Accept[0])}
		if b.limit != "" {
			prime[b.limit] = "0"
		}
		if err := e.ConnWith(db, prime).Ping(ctx); err != nil {
			t.Fatal(err)
		}
		conn := e.ConnWith(db, set)
		var changed []string
		for v, r := range viewRows(ctx, conn, views) {
			if r != base[v] {
				what := "rows"
				if strings.HasPrefix(r, "error") {
					what = "fails"
				}
				changed = append(changed, v+" "+what)
			}
		}
		sort.Strings(changed)
		if len(changed) == 0 {
			t.Errorf("%v changes no view: why refuse it?", set)
		}
		// the setting alone, as a settings profile would hold it
		_, err := OpenConn(ctx, e.ConnWith(db, map[string]string{rs.Name: b.value}), db)
		shown := rs.Name + " = " + strings.Trim(b.value, "'")
		if !errors.Is(err, ErrUnsupportedServer) || !strings.Contains(err.Error(), shown) || !strings.Contains(err.Error(), e.Version()) {
			t.Errorf("OpenConn with %v: %v; want ErrUnsupportedServer naming %q and ClickHouse %s", set, err, shown, e.Version())
		}
		t.Logf("%v: %d of %d views changed (%s); OpenConn refused", set, len(changed), len(views), strings.Join(changed, ", "))
	}
	if _, err := OpenConn(ctx, e.Conn(db), db); err != nil {
		t.Errorf("control after the refusals, default settings: %v", err)
	}
	// a refused OpenConn creates nothing
	empty := chdbDatabase(t, e, "refused")
	if _, err := OpenConn(ctx, e.ConnWith(empty, map[string]string{"join_use_nulls": "1"}), empty); !errors.Is(err, ErrUnsupportedServer) {
		t.Errorf("OpenConn with join_use_nulls = 1: %v", err)
	}
	if n, err := e.QueryTSV("", "SELECT count() FROM system.tables WHERE database = '"+empty+"'"); err != nil || strings.TrimSpace(n) != "0" {
		t.Errorf("refused OpenConn left %q tables in %s (%v)", n, empty, err)
	}
}

// usersChildEnv marks the child process of TestChdbUsersGrants, whose
// chDB session reads the users written by the parent.
const usersChildEnv = "CROWDLOG_TEST_CHDB_USERS"

// TestChdbUsersGrants checks the grant checks on the 26.7 engine's own
// users and SHOW GRANTS. chDB has no writable user storage, but reads a
// users.xml (and its users.d) named by a config.xml in its working
// directory, the storage users.d files load into on a server; and one
// process has one chDB session, so the test runs itself again in a
// directory holding such a config, with users: the analyst and writer
// users.d files crowdlog writes for 18.16 (clickhouse.WriteAnalystUser,
// WriteWriterUser), users whose <grants> are the GRANT statements of
// AnalystStatements and WriterStatements, and users with one extra grant
// or a grant option. Exactly crowdlog's grants pass; the users.d users
// (every global privilege) and the extras are refused, naming them;
// checkUserStorage refuses the users.d names.
func TestChdbUsersGrants(t *testing.T) {
	if os.Getenv(usersChildEnv) != "" {
		usersGrantsChild(t)
		return
	}
	dir := t.TempDir()
	adb := AnalystDatabase("crowdlog")
	usersd := filepath.Join(dir, "users.d")
	if _, err := clickhouse.WriteAnalystUser(usersd, clickhouse.AnalystUser{Name: "usersd_analyst", Password: "p1", Database: adb}); err != nil {
		t.Fatal(err)
	}
	if _, err := clickhouse.WriteWriterUser(usersd, clickhouse.WriterUser{Name: "usersd_writer", Password: "p2", Databases: []string{"crowdlog", adb}}); err != nil {
		t.Fatal(err)
	}
	an, err := AnalystStatements(Analyst{Name: "sql_analyst", Password: "p3", Database: adb})
	if err != nil {
		t.Fatal(err)
	}
	wr, err := WriterStatements(WriterAccount{Name: "sql_writer", Password: "p4"}, "crowdlog")
	if err != nil {
		t.Fatal(err)
	}
	grants := func(name string, stmts []string, extra ...string) string {
		var q strings.Builder
		for _, s := range stmts {
			if g, ok := strings.CutSuffix(s, " TO `"+name+"`"); ok && strings.HasPrefix(g, "GRANT ") {
				fmt.Fprintf(&q, "<query>%s</query>", g)
			}
		}
		for _, g := range extra {
			fmt.Fprintf(&q, "<query>%s</query>", g)
		}
		return fmt.Sprintf("<%s><no_password/><grants>%s</grants></%s>", name, q.String(), name)
	}
	users := `<clickhouse><users>
<default><no_password/><access_management>1</access_management><networks><ip>::/0</ip></networks><profile>default</profile><quota>default</quota></default>
` + grants("sql_analyst", an) + grants("sql_writer", wr) +
		grants("extra_analyst", an, "GRANT SELECT ON crowdlog.*") +
		grants("option_analyst", nil, "GRANT SELECT ON "+adb+".* WITH GRANT OPTION") + `
</users><profiles><default/></profiles><quotas><default/></quotas></clickhouse>`
	config := `<clickhouse><user_directories><users_xml><path>` + filepath.Join(dir, "users.xml") + `</path></users_xml></user_directories></clickhouse>`
	for name, text := range map[string]string{"users.xml": users, "config.xml": config} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestChdbUsersGrants$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), usersChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestChdbUsersGrants") {
		t.Fatal("the child did not run the checks")
	}
}

// usersGrantsChild is TestChdbUsersGrants in the child process.
func usersGrantsChild(t *testing.T) {
	e, err := chdb.Open()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := e.Conn("")
	adb := AnalystDatabase("crowdlog")
	an, wr := analystGrants(adb), writerGrants("crowdlog")
	for _, c := range []struct {
		user  string
		want  grantSet
		ok    bool
		names []string
	}{
		{"sql_analyst", an, true, nil},
		{"sql_writer", wr, true, nil},
		{"usersd_analyst", an, false, []string{"FILE", "URL", "S3", "REMOTE", "KILL QUERY", "SYSTEM SHUTDOWN", "ON *.*"}},
		{"usersd_writer", wr, false, []string{"FILE", "URL", "S3", "REMOTE", "KILL QUERY", "SYSTEM SHUTDOWN", "DROP TABLE"}},
		{"extra_analyst", an, false, []string{"SELECT ON crowdlog.*"}},
		{"option_analyst", an, false, []string{"WITH GRANT OPTION"}},
		{"sql_writer", an, false, []string{"INSERT"}},
	} {
		lines, err := showGrants(ctx, conn, c.user)
		if err != nil {
			t.Fatal(err)
		}
		err = verifyGrants(ctx, conn, c.user, c.want)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrExtraGrants) {
			t.Errorf("%s: %v, want ok %v; SHOW GRANTS:\n%s", c.user, err, c.ok, strings.Join(lines, "\n"))
			continue
		}
		for _, n := range c.names {
			if !strings.Contains(err.Error(), n) {
				t.Errorf("%s: the refusal does not name %q: %v", c.user, n, err)
			}
		}
		t.Logf("%s (%d SHOW GRANTS lines): ok %v", c.user, len(lines), err == nil)
	}
	for user, refused := range map[string]bool{"usersd_analyst": true, "usersd_writer": true, "no_such_user": false} {
		err := checkUserStorage(ctx, conn, e.Version(), user, "analyst")
		if (err != nil) != refused || err != nil && (!errors.Is(err, ErrExtraGrants) || !strings.Contains(err.Error(), "users_xml")) {
			t.Errorf("checkUserStorage(%s) = %v, want refused %v", user, err, refused)
		}
	}
}
