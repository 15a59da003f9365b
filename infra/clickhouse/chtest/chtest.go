// Package chtest shares one local ClickHouse server (infra/clickhouse)
// among the tests of a package: the first Server call starts it in a
// temporary directory, Main stops it and removes the directory after the
// tests. For tests only.
package chtest

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// StartTimeout bounds the shared server's start.
const StartTimeout = 60 * time.Second

var (
	once sync.Once
	srv  *clickhouse.Server
	err  error
	dir  string
)

// Server returns the package's shared server, started on first use. A
// missing clickhouse-server binary skips the test, unless CI=true, where it
// fails; any other start error fails the test.
func Server(t testing.TB) *clickhouse.Server {
	t.Helper()
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "crowdlog-ch-"); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
		defer cancel()
		srv, err = clickhouse.Start(ctx, dir)
	})
	if errors.Is(err, clickhouse.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatalf("start ClickHouse: %v", err)
	}
	return srv
}

// Main runs the package's tests, then stops the shared server (if one was
// started) and removes its directory. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if srv != nil {
		_ = srv.Stop()
	}
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}
