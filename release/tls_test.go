package release

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/tlstest"
)

// TestWriterOverTLS: a ClickHouse server offering TLS on the native
// protocol (infra/clickhouse.WriteTLSConfig) takes a release written
// through Open with a Login whose TLS verifies the server's CA (from
// LoginConfig, as the --clickhouse-tls-ca flag gives it); a client
// without TLS, or with TLS that trusts another CA, is refused there.
func TestWriterOverTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	_, caFile := tlstest.TLS(t, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	chdir := filepath.Join(dir, "ch")
	if err := clickhouse.WriteTLSConfig(chdir, filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), port); err != nil {
		t.Fatal(err)
	}
	s, err := clickhouse.Start(ctx, chdir)
	if errors.Is(err, clickhouse.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	secure := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	login, err := clickhouse.LoginConfig{CAFile: caFile}.Load()
	if err != nil {
		t.Fatal(err)
	}
	tctx := clickhouse.WithLogin(ctx, login)
	var w *Writer
	for deadline := time.Now().Add(20 * time.Second); ; { // the secure port opens with the server, after /ping
		if w, err = Open(tctx, secure, "tls_db"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Open over TLS: %v", err)
	}
	defer w.Close()
	key := Key{"query", "2006-03", "ft-u", 2}
	if err := w.WriteKeyedRelease(tctx, key, []Item{{App: "query", Epoch: "2006-03", Policy: "ft-u", K: 2, Item: "dog", Impressions: 3, Users: 2}}, nil, time.Now()); err != nil {
		t.Fatalf("release over TLS: %v", err)
	}
	short, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if _, err := Probe(short, secure); err == nil {
		t.Error("a client without TLS was answered on the secure port")
	}
	wrongCA, err := clickhouse.LoginConfig{CAFile: filepath.Join(t.TempDir(), "ca.pem")}.Load()
	if err == nil {
		t.Fatalf("a missing CA file loaded: %+v", wrongCA)
	}
	otherDir := t.TempDir()
	tlstest.TLS(t, otherDir)
	foreign, err := clickhouse.LoginConfig{CAFile: filepath.Join(otherDir, "ca.pem")}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Probe(clickhouse.WithLogin(short, foreign), secure); err == nil {
		t.Error("a client trusting another CA accepted the server")
	}
}
