package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// TestClickHouseWriterLogin: `crowdlog clickhouse init --writer` on a real
// ClickHouse server (18.16: a users.d file) creates the release stages'
// user with the password of CROWDLOG_WRITER_PASSWORD_FILE; `crowdlog
// report` then logs in as that user through --clickhouse-user and
// CROWDLOG_CLICKHOUSE_PASSWORD_FILE (it finds no release yet: the login
// worked), is refused with a wrong password, and no output shows a
// password.
func TestClickHouseWriterLogin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	s, err := clickhouse.Start(ctx, filepath.Join(dir, "ch"))
	if errors.Is(err, clickhouse.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	secret := func(name, value string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const writerPW, analystPW = "writer-secret-83", "analyst-secret-19"
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := rootCmd()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		err := root.ExecuteContext(ctx)
		text := out.String()
		if err != nil {
			text += err.Error()
		}
		if strings.Contains(text, writerPW) || strings.Contains(text, analystPW) {
			t.Errorf("%v: the output shows a password:\n%s", args, text)
		}
		return text, err
	}
	t.Setenv("CROWDLOG_WRITER_PASSWORD_FILE", secret("writer-pw", writerPW))
	t.Setenv("CROWDLOG_ANALYST_PASSWORD", analystPW)
	if out, err := run("clickhouse", "init", "--clickhouse", s.TCPAddr, "--users-d", clickhouse.UsersDir(s.Dir), "--insecure-passwordless-default", "--database", "crowdlog_t", "--analyst", "an", "--writer", "wr"); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(clickhouse.UsersDir(s.Dir), clickhouse.WriterFile)); err != nil {
		t.Fatalf("no users.d file for the writer: %v", err)
	}
	t.Setenv("CROWDLOG_CLICKHOUSE_PASSWORD_FILE", secret("ch-pw", writerPW))
	out, err := run("report", "--clickhouse", s.TCPAddr, "--database", "crowdlog_t", "--clickhouse-user", "wr", "--out", filepath.Join(dir, "r.html"))
	if err == nil || !strings.Contains(out, "no completed release") {
		t.Fatalf("report as the writer: %v\n%s (want: logged in, no completed release yet)", err, out)
	}
	t.Setenv("CROWDLOG_CLICKHOUSE_PASSWORD_FILE", secret("ch-pw", "wrong"))
	if out, err := run("report", "--clickhouse", s.TCPAddr, "--database", "crowdlog_t", "--clickhouse-user", "wr", "--out", filepath.Join(dir, "r.html")); err == nil || strings.Contains(out, "no completed release") {
		t.Fatalf("report with a wrong password: %v\n%s", err, out)
	}
}
