package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/pipelines/streams"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/randomness"
)

// TestStreamsCmd: `crowdlog streams` with the admin NKey creates every
// stream and bucket (one line each, idempotent on a second run); with a
// runtime role's NKey (relay b) the server refuses it.
func TestStreamsCmd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "nats")
	ns, err := natsserver.Options{Dir: filepath.Join(dir, "js")}.StartAuth(ctx, keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	run := func(role natsauth.Role, extra ...string) (string, error) {
		var out bytes.Buffer
		root := rootCmd()
		root.SetOut(&out)
		root.SetArgs(append([]string{"streams", "--nats", ns.URL, "--nats-nkey", filepath.Join(keys, natsauth.SeedFile(role))}, extra...))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	for range 2 {
		out, err := run(natsauth.Admin, "--pdd-retention", "48h")
		if err != nil {
			t.Fatalf("streams as admin: %v", err)
		}
		for _, name := range streams.Names() {
			if !strings.Contains(out, "stream "+name+":") {
				t.Errorf("no line for stream %s in:\n%s", name, out)
			}
		}
		if !strings.Contains(out, "stream "+natsauth.AdminStreams[len(natsauth.AdminStreams)-1]+": subjects [crowdlog.pdd.active.>], replicas 1, max age 48h0m0s") {
			t.Errorf("the active index does not keep --pdd-retention:\n%s", out)
		}
		// one account per role: each relay's stream captures only its own
		// inbox, in its own account
		for _, r := range []natsauth.Role{natsauth.RelayA, natsauth.RelayB} {
			name, _ := natsauth.RelayName(r)
			want := fmt.Sprintf("stream %s: subjects [%s], replicas 1, max age 0s (account %s)", protocol.RelayStream, protocol.RelaySubject(name), natsauth.AccountOf(r))
			if !strings.Contains(out, want) {
				t.Errorf("want %q in:\n%s", want, out)
			}
		}
	}
	// --epoch-length gives the spent tokens the TTL a randomness service
	// with that schedule needs (spent.CheckTTL accepts it)
	out, err := run(natsauth.Admin, "--epoch-length", "24h")
	if err != nil {
		t.Fatalf("streams --epoch-length: %v", err)
	}
	need := 2 * (24*time.Hour + randomness.DefaultGrace + randomness.DefaultSkew)
	if !strings.Contains(out, "stream KV_"+protocol.SpentTokensBucket+": subjects [$KV."+protocol.SpentTokensBucket+".>], replicas 1, max age "+need.String()) {
		t.Errorf("the spent-token bucket does not keep 2 × (24h + grace + skew) = %v:\n%s", need, out)
	}
	if _, err := run(natsauth.Admin, "--epoch-length", "24h", "--spend-ttl", "1h"); err == nil {
		t.Error("--epoch-length with --spend-ttl accepted")
	}
	if _, err := run(natsauth.RelayB, "--timeout", "3s"); err == nil {
		t.Fatal("streams with relay b's NKey succeeded: a runtime role may change a stream")
	}
}
