package clickhouse_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// startOrSkip starts a server in a fresh temp dir. A missing binary skips
// the test, unless CI=true, where it fails.
func startOrSkip(t *testing.T) *clickhouse.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := clickhouse.Start(ctx, t.TempDir())
	if errors.Is(err, clickhouse.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

func TestStartPingSelectStop(t *testing.T) {
	s := startOrSkip(t)

	resp, err := http.Get("http://" + s.HTTPAddr + "/ping")
	if err != nil {
		t.Fatalf("ping: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(body)) != "Ok." {
		t.Fatalf("ping answered %q, want Ok.", body)
	}

	conn, err := chgo.Open(&chgo.Options{Addr: []string{s.TCPAddr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("open native conn: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var one uint8
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("SELECT 1: %v", err)
	}
	if one != 1 {
		t.Fatalf("SELECT 1 returned %d", one)
	}
	conn.Close()

	// The data lives under Dir, nowhere else.
	if _, err := os.Stat(s.Dir + "/data"); err != nil {
		t.Fatalf("data dir: %v", err)
	}

	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := http.Get("http://" + s.HTTPAddr + "/ping"); err == nil {
		t.Fatal("server still answers after Stop")
	}
}

func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := clickhouse.Start(ctx, dir)
	if errors.Is(err, clickhouse.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	conn, err := chgo.Open(&chgo.Options{Addr: []string{s.TCPAddr}})
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "CREATE TABLE t (x UInt32) ENGINE = MergeTree() ORDER BY x"); err != nil {
		t.Fatalf("create: %v", err)
	}
	b, err := conn.PrepareBatch(ctx, "INSERT INTO t (x)")
	if err != nil {
		t.Fatal(err)
	}
	for i := uint32(0); i < 10; i++ {
		if err := b.Append(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}

	s2, err := clickhouse.Start(ctx, dir)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer s2.Stop()
	conn, err = chgo.Open(&chgo.Options{Addr: []string{s2.TCPAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 10 {
		t.Fatalf("after restart count = %d, want 10", n)
	}
}

func TestClientBinaryRuns(t *testing.T) {
	s := startOrSkip(t)
	argv, err := clickhouse.ClientBinary()
	if err != nil {
		t.Fatalf("ClientBinary: %v", err)
	}
	_, port, _ := strings.Cut(s.TCPAddr, ":")
	args := append(append([]string{}, argv[1:]...), "--host", "127.0.0.1", "--port", port, "--query", "SELECT 40 + 2")
	out, err := exec.Command(argv[0], args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
	if strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("client printed %q, want 42", out)
	}
}
