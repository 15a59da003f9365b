package ready_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/metrics"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/infra/ready"
)

// bound is how soon /readyz must follow a dependency going away or coming
// back.
const bound = 10 * time.Second

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// await polls /readyz until ok reports true for its answer, failing the
// test after bound.
func await(t *testing.T, url, what string, ok func(code int, body string) bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	var code int
	var body string
	for {
		code, body = get(t, url)
		if ok(code, body) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not %s within %v: last answer %d %q", what, bound, code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func isReady(code int, body string) bool { return code == http.StatusOK && body == "ok\n" }

func failing(name string) func(int, string) bool {
	return func(code int, body string) bool {
		if code != http.StatusServiceUnavailable {
			return false
		}
		for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
			if strings.HasPrefix(l, name+": ") {
				return true
			}
		}
		return false
	}
}

// A role connected to NATS (with JetStream) and Kafka: /readyz answers 200,
// turns 503 naming the dependency once it stops, and 200 again once it is
// back on the same port; /healthz stays 200 throughout.
func TestReadyzFollowsNATSAndKafka(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	natsDir := t.TempDir()
	ns, err := natsserver.Start(ctx, natsDir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ns.Shutdown() }()
	nc, err := nats.Connect(ns.URL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { kc.Close() }()
	kafkaAddr := kc.ListenAddrs()[0]
	_, kafkaPort, _ := strings.Cut(kafkaAddr, ":")

	c := ready.New(nil, ready.NATS(nc), ready.JetStream(js), infrakafka.ReadyCheck([]string{kafkaAddr}, nil))
	c.Start(ctx, 0)
	reg := metrics.NewRegistry()
	c.Register(reg)
	addr, err := metrics.Serve(ctx, "127.0.0.1:0", reg, c.Ready)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr.String()
	readyz := base + "/readyz"

	await(t, readyz, "ready at start", isReady)

	// NATS goes away, then comes back on the same port.
	ns.Shutdown()
	await(t, readyz, `503 naming "nats"`, failing("nats"))
	if code, body := get(t, readyz); strings.Contains(body, "kafka:") {
		t.Errorf("kafka reported failing while only NATS is down: %d %q", code, body)
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d while NATS is down, want 200 (liveness)", code)
	}
	ns, err = natsserver.Options{Dir: natsDir, Port: ns.Port}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	await(t, readyz, "ready after NATS restart", isReady)

	// Kafka goes away, then comes back on the same port.
	kc.Close()
	await(t, readyz, `503 naming "kafka"`, failing("kafka"))
	if _, body := get(t, readyz); strings.Contains(body, "nats:") {
		t.Errorf("nats reported failing while only Kafka is down: %q", body)
	}
	port := 0
	for _, ch := range kafkaPort {
		port = port*10 + int(ch-'0')
	}
	kc, err = kfake.NewCluster(kfake.Ports(port))
	if err != nil {
		t.Fatal(err)
	}
	await(t, readyz, "ready after Kafka restart", isReady)

	// The metrics say the same.
	if _, body := get(t, base+"/metrics"); !strings.Contains(body, `crowdlog_ready_check{check="kafka"} 1`) {
		t.Errorf("metrics lack crowdlog_ready_check{check=\"kafka\"} 1")
	}
}

func TestReadyWithoutStartRunsChecks(t *testing.T) {
	var fail atomic.Bool
	c := ready.New(nil,
		ready.Check{Name: "a", Fn: func(context.Context) error { return nil }},
		ready.Check{Name: "b", Fn: func(context.Context) error {
			if fail.Load() {
				return errors.New("down\nsee nats://user:secret@10.0.0.1:4222")
			}
			return nil
		}})
	if err := c.Ready(context.Background()); err != nil {
		t.Fatalf("Ready = %v, want nil", err)
	}
	fail.Store(true)
	err := c.Ready(context.Background())
	if err == nil {
		t.Fatal("Ready = nil with check b failing")
	}
	if got, want := err.Error(), "b: down; see nats://REDACTED@10.0.0.1:4222"; got != want {
		t.Errorf("Ready = %q, want %q", got, want)
	}
	var nilChecker *ready.Checker
	if err := nilChecker.Ready(context.Background()); err != nil {
		t.Errorf("nil Checker: %v", err)
	}
}

// A check that ignores its context is reported as timed out and not
// started again while it still runs.
func TestCheckTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	c := ready.New(nil, ready.Check{Name: "slow", Timeout: 50 * time.Millisecond, Fn: func(context.Context) error {
		calls.Add(1)
		<-release
		return nil
	}})
	for i := 0; i < 3; i++ {
		err := c.Ready(context.Background())
		if err == nil || !strings.HasPrefix(err.Error(), "slow: ") {
			t.Fatalf("Ready = %v, want slow failing", err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("slow check started %d times, want 1 while it runs", n)
	}
}

func TestDir(t *testing.T) {
	dir := t.TempDir()
	c := ready.New(nil, ready.Dir("keys", dir), ready.Dir("missing", dir+"/nope"))
	err := c.Ready(context.Background())
	if err == nil || strings.Contains(err.Error(), "keys:") || !strings.HasPrefix(err.Error(), "missing: ") {
		t.Errorf("Ready = %v, want only missing failing", err)
	}
}
