package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/relays"
)

// TestIssuerReadyz: `crowdlog issuer --metrics` answers /readyz 200 while
// NATS runs, 503 naming nats once NATS stops, and 200 again once NATS is
// back on the same port, each within 10 s.
func TestIssuerReadyz(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	natsDir := t.TempDir()
	srv, err := natsserver.Start(ctx, natsDir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown() }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()

	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		c := issuerCmd()
		c.SetArgs([]string{"--nats", srv.URL, "--keys", t.TempDir(), "--randomness-tokens", "1", "--report-tokens", "1",
			"--epoch", "e1", "--metrics", metricsAddr})
		done <- c.ExecuteContext(rctx)
	}()
	defer func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("issuer did not stop within 30 s")
		}
	}()

	readyz := "http://" + metricsAddr + "/readyz"
	await := func(what string, ok func(code int, body string) bool, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		code, body := 0, ""
		for {
			if resp, err := http.Get(readyz); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				code, body = resp.StatusCode, string(b)
				if ok(code, body) {
					return
				}
			}
			select {
			case err := <-done:
				t.Fatalf("issuer exited: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz not %s within %v: last %d %q", what, within, code, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	isReady := func(code int, body string) bool { return code == http.StatusOK && body == "ok\n" }
	// the first wait also covers the issuer's start-up
	await("ready", isReady, 30*time.Second)

	srv.Shutdown()
	await(`503 naming "nats"`, func(code int, body string) bool {
		return code == http.StatusServiceUnavailable && strings.HasPrefix(body, "nats: ")
	}, 60*time.Second)

	srv, err = natsserver.Options{Dir: natsDir, Port: srv.Port}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	await("ready after NATS restart", isReady, 60*time.Second)
}

func TestRelayChecks(t *testing.T) {
	for _, tc := range []struct {
		o    relays.Config
		want []string
	}{
		{relays.Config{Name: "a"}, []string{"nats", "jetstream"}},
		{relays.Config{Name: "b"}, []string{"nats", "jetstream", "kafka"}},
		{relays.Config{Name: "a", Next: relays.LastHop}, []string{"nats", "jetstream", "kafka"}},
		{relays.Config{Name: "c", Next: "d"}, []string{"nats", "jetstream"}},
	} {
		var got []string
		for _, c := range relayChecks(context.Background(), nil, tc.o) {
			got = append(got, c.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("relay %q next %q: checks %v, want %v", tc.o.Name, tc.o.Next, got, tc.want)
		}
	}
}
