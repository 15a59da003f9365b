package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/protocol"
)

// TestNATSConfigCmd: the operator's path end to end. `nats-config nkey`
// makes the randomness and client keys, `nats-config --nkeys` prints the
// server config a real NATS server starts from, `crowdlog randomness`
// started with its seed from CROWDLOG_NATS_NKEY answers the client's
// public-key request over it, and a role without a key in the config
// cannot connect. `--table` prints natsauth.Markdown.
func TestNATSConfigCmd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		root := rootCmd()
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.ExecuteContext(ctx); err != nil {
			t.Fatalf("crowdlog %v: %v", args, err)
		}
		return out.String()
	}
	run("nats-config", "nkey", "--role", "randomness", "--dir", dir)
	run("nats-config", "nkey", "--role", "client", "--dir", dir)
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(run("nats-config", "--nkeys", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := run("nats-config", "--table"); got != natsauth.Markdown() {
		t.Fatalf("--table printed:\n%s", got)
	}
	ns, err := natsserver.Options{Dir: filepath.Join(dir, "js"), ConfigFile: conf}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()

	t.Setenv("CROWDLOG_NATS_NKEY", filepath.Join(dir, natsauth.SeedFile(natsauth.Randomness)))
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		root := rootCmd()
		root.SetArgs([]string{"randomness", "--nats", ns.URL, "--keys", filepath.Join(dir, "keys")})
		done <- root.ExecuteContext(rctx)
	}()
	client, err := natsconn.ConnectAs(ns.URL, "client", natsconn.RoleSecurity(dir, natsauth.Client))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	answered := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !answered; {
		m, err := client.Request(protocol.RandomnessPublicKeySubject, []byte(`{"epoch":"e1"}`), time.Second)
		answered = err == nil && len(m.Data) > 0
		if !answered {
			time.Sleep(100 * time.Millisecond)
		}
	}
	rcancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("crowdlog randomness did not stop within 30 s of its context ending")
	}
	if !answered {
		t.Fatal("crowdlog randomness (seed from CROWDLOG_NATS_NKEY) did not answer the client's public-key request within 20 s")
	}
	if _, err := natsauth.GenerateNKey(dir, natsauth.Issuer); err != nil { // a key the config does not list
		t.Fatal(err)
	}
	if nc, err := natsconn.ConnectAs(ns.URL, "issuer", natsconn.RoleSecurity(dir, natsauth.Issuer)); err == nil {
		nc.Close()
		t.Fatal("a role whose key is not in the server config connected")
	} else if !strings.Contains(err.Error(), "Authorization") {
		t.Fatalf("unlisted key: %v, want an authorization error", err)
	}
}
