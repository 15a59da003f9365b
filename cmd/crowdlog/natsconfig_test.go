package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// TestAttackNATSConfigStdout: `crowdlog nats-config` for a
// cluster (its configuration holds the route password) refuses stdout
// (exit 2, nothing printed) and writes the file of --out with mode 0600
// (replacing a world-readable one), printing only its name; no output of
// nats-config or route-secret holds the password.
func TestAttackNATSConfigStdout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	run := func(args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		root := rootCmd()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	if _, err := run("nats-config", "nkey", "--role", "randomness", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(dir, "route.secret")
	out, err := run("nats-config", "route-secret", "--out", secretFile)
	if err != nil {
		t.Fatal(err)
	}
	password, err := natsauth.ReadRouteSecret(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	leaks, outputs := 0, 0
	defer func() {
		fmt.Printf("ATTACK nats-config-stdout: %d of %d outputs showed the route password\n", leaks, outputs)
	}()
	check := func(what, text string) {
		t.Helper()
		outputs++
		if strings.Contains(text, password) {
			leaks++
			t.Errorf("%s shows the route password:\n%s", what, text)
		}
	}
	check("route-secret", out)
	cluster := []string{"nats-config", "--nkeys", dir, "--cluster-name", "crowdlog", "--cluster-listen", "127.0.0.1:6222",
		"--routes", "127.0.0.1:6222,127.0.0.1:6223", "--route-secret", secretFile}
	out, err = run(cluster...)
	check("nats-config without --out", out+errText(err))
	var ec exitCode
	if !errors.As(err, &ec) || ec.code != 2 || !strings.Contains(err.Error(), "--out") || out != "" {
		t.Errorf("nats-config for a cluster without --out: %v, printed %q; want exit 2 asking for --out, nothing printed", err, out)
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run(append(cluster, "--out", conf)...)
	if err != nil {
		t.Fatal(err)
	}
	check("nats-config --out", out)
	if !strings.Contains(out, conf) {
		t.Errorf("nats-config --out printed %q, want the file's name", out)
	}
	fi, err := os.Stat(conf)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(conf)
	if fi.Mode().Perm() != 0o600 || !strings.Contains(string(b), password) {
		t.Errorf("%s: mode %v, holds the password %v; want 0600 and the cluster block", conf, fi.Mode().Perm(), strings.Contains(string(b), password))
	}
	// without a cluster there is no secret: stdout stays
	if out, err := run("nats-config", "--nkeys", dir); err != nil || !strings.Contains(out, "nkey") {
		t.Errorf("nats-config without a cluster: %v\n%s", err, out)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
