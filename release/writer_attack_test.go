package release

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// TestAttackWriterTableFunctions mounts the writer-table-functions attack
// on a real ClickHouse server of its own (18.16 here): the release
// stages' writer (Init's users.d writer: readonly = 0, allow_databases =
// the release and analyst databases) calls table functions to reach
// beyond its databases: remote('127.0.0.1:PORT', …) (which logs in as
// user default) on system.databases, system.tables and system.one with an
// IN subquery reading other.secrets, other.secrets directly, as itself,
// merge('other', …), and file() outside user_files. The fix: Init refuses a server whose default
// logs in without a password (ErrPasswordlessDefault), so remote() as
// default is refused once default has its password. The control is the
// pre-fix configuration: Init on the same server with default still
// passwordless (AllowPasswordlessDefault, what Init accepted before),
// where remote() reads the other database.
//
// url() to an HTTP server of the test and file() of a file inside
// user_files are counted and printed too, but no 18.16 profile setting
// refuses them short of readonly = 1, which also refuses the writer's
// INSERT (measured: allow_ddl = 0 and readonly = 2 leave every table
// function open and allow_ddl = 0 refuses the writer's ALTER … DELETE);
// on current servers the writer's GRANTs carry no URL, FILE, REMOTE or
// S3 (WriterStatements, docs/operations.md). Prints ATTACK
// writer-table-functions.
func TestAttackWriterTableFunctions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own ClickHouse server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	s, err := clickhouse.Start(ctx, dir)
	if errors.Is(err, clickhouse.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "internal-only") }))
	defer internal.Close()
	if err := os.WriteFile(filepath.Join(dir, "user_files", "operator.csv"), []byte("operator-only\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	admin, err := dial(ctx, s.TCPAddr, "default")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE DATABASE other", "CREATE TABLE other.secrets (v String) ENGINE = MergeTree ORDER BY v"} {
		if err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	b, err := admin.PrepareBatch(ctx, "INSERT INTO other.secrets (v)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append("not-for-the-writer"); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	admin.Close()

	wr := WriterAccount{Name: "crowdlog_tf_writer", Password: "tf-writer-pw"}
	opts := InitOptions{Addr: s.TCPAddr, Database: "crowdlog_tf", Writer: wr, UsersDir: clickhouse.UsersDir(dir), AnalystWait: 30 * time.Second}

	// The fix refuses the server as it comes (default without password).
	if _, err := Init(ctx, opts); !errors.Is(err, ErrPasswordlessDefault) {
		t.Fatalf("Init on a server whose default has no password: %v, want ErrPasswordlessDefault", err)
	}

	// attack counts, as the writer, the table functions that succeed (a
	// remote() to this server's own address runs locally unless
	// prefer_localhost_replica = 0, which the writer may SET; a subquery
	// under remote() then runs there as default):
	// those reaching another database (the breach), and url()/file()
	// inside user_files (counted apart).
	attack := func() (beyond, beyondTries, other, otherTries int) {
		t.Helper()
		c, err := DialAs(ctx, s.TCPAddr, opts.Database, wr.Name, wr.Password)
		if err != nil {
			t.Fatalf("writer login: %v", err)
		}
		defer c.Close()
		try := func(q string) bool {
			var n uint64
			err := c.QueryRow(ctx, q).Scan(&n)
			return err == nil && n > 0
		}
		for _, q := range []string{
			"SELECT count() FROM remote('" + s.TCPAddr + "', other.secrets)",
			"SELECT count() FROM remote('" + s.TCPAddr + "', system.databases) WHERE name = 'other' SETTINGS prefer_localhost_replica = 0",
			"SELECT count() FROM remote('" + s.TCPAddr + "', system.tables) WHERE database = 'other' SETTINGS prefer_localhost_replica = 0",
			"SELECT count() FROM remote('" + s.TCPAddr + "', system.one) WHERE dummy IN (SELECT toUInt8(0) FROM other.secrets) SETTINGS prefer_localhost_replica = 0",
			"SELECT count() FROM remote('" + s.TCPAddr + "', system.one) WHERE dummy IN (SELECT toUInt8(0) FROM other.secrets)",
			"SELECT count() FROM remote('" + s.TCPAddr + "', system.one) WHERE dummy IN (SELECT toUInt8(0) FROM remote('" + s.TCPAddr + "', system.one) WHERE 'not-for-the-writer' IN (SELECT v FROM other.secrets))",
			"SELECT count() FROM system.databases WHERE name = 'other'",
			"SELECT count() FROM remote('" + s.TCPAddr + "', other.secrets, '" + wr.Name + "', '" + wr.Password + "')",
			"SELECT count() FROM merge('other', '^secrets$')",
			"SELECT count() FROM file('../config.xml', TSV, 'l String')",
			"SELECT count() FROM file('/etc/passwd', TSV, 'l String')",
		} {
			beyondTries++
			if try(q) {
				beyond++
			}
		}
		for _, q := range []string{
			"SELECT count() FROM url('" + internal.URL + "/', TSV, 'l String')",
			"SELECT count() FROM file('operator.csv', TSV, 'l String')",
		} {
			otherTries++
			if try(q) {
				other++
			}
		}
		return
	}

	// Control: the pre-fix configuration, default without password.
	ctrl := opts
	ctrl.AllowPasswordlessDefault = true
	if _, err := Init(ctx, ctrl); err != nil {
		t.Fatal(err)
	}
	cb, cbt, co, cot := attack()

	// Fix: default gets a password; Init (as default with it) accepts the server.
	pw := []byte(`<?xml version="1.0"?>
<yandex><users><default><password replace="replace">tf-admin-pw</password></default></users></yandex>
`)
	if err := os.WriteFile(filepath.Join(clickhouse.UsersDir(dir), "default-password.xml"), pw, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for CheckDefaultPassword(ctx, s.TCPAddr) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("default still logs in without a password 30 s after users.d changed: %v", CheckDefaultPassword(ctx, s.TCPAddr))
		}
		time.Sleep(300 * time.Millisecond)
	}
	actx := clickhouse.WithLogin(ctx, clickhouse.Login{User: clickhouse.DefaultUser, Password: "tf-admin-pw"})
	if _, err := Init(actx, opts); err != nil {
		t.Fatalf("Init as default with its password: %v", err)
	}
	fb, fbt, fo, fot := attack()

	fmt.Printf("ATTACK writer-table-functions: writer reached another database or a server file in %d/%d table-function calls (remote as default, remote as itself, merge, file outside user_files); url()/file() in user_files %d/%d (open on 18.16: no setting short of readonly=1; no grant on current servers); control passwordless default (pre-fix Init): %d/%d, url/file %d/%d\n",
		fb, fbt, fo, fot, cb, cbt, co, cot)
	if fb > 0 {
		t.Errorf("the writer reached beyond its databases in %d table-function calls", fb)
	}
	if cb == 0 {
		t.Errorf("control: remote() as passwordless default did not read the other database; the attack is not mounted")
	}
}
