package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/relays"
)

// TestChaos ingests a log while SIGKILLing a random relay, aggregator or
// release process every few seconds (and restarting it), while the
// aggregator group grows 1 → 3 and shrinks to 2, and while one node of the
// NATS cluster at a time is stopped for two ticks and restarted (the next
// stop waits until every replica of every stream, the relay stream's
// consumers included, is current again: 3 replicas tolerate one failure,
// and a replica still catching up is a second one). The services are a
// 3-node JetStream cluster (relay stream with 3 replicas) and
// 3 kfake brokers (topics with replication factor 3, nominal in kfake); every
// role gets all seed URLs and brokers. The export must equal the release
// computed from the raw log, and byte for byte a fault-free run's: nothing
// lost, nothing counted twice. Before that, aggregator/audit reconciles the
// reports topic with the aggregator's output report id by report id (every
// report the clients sent must be in Kafka before the epoch's close, every
// report of an opened artifact emitted), so that a loss names its hop; the
// JetStream advisories seen are logged. `make chaos` runs it on the whole bundled log
// (CROWDLOG_CHAOS_USERS=1000); `make test` on a small subset.
// CROWDLOG_CHAOS_CLUSTER=0 runs it on one NATS server and one broker
// (no NATS node stops).
//
// Tokens are on: an issuer serves randomness and report tokens and ARC
// credentials, and the aggregators check them (verification at the
// threshold, restored from snapshots and replays like the rest of the
// partition state).
//
// A stopped NATS node is never the one `crowdlog run` (ingest), the
// randomness service or the issuer is connected to: the randomness client
// re-sends a request that timed out (oprfclient.Client.RetryFor), but a
// request lost with its connection only times out after 30 s, which would
// stall the run; relays ride the loss out (reconnect, redelivery after
// --ack-wait).
func TestChaos(t *testing.T) {
	users := 120
	if v, err := strconv.Atoi(os.Getenv("CROWDLOG_CHAOS_USERS")); err == nil && v > 0 {
		users = v
	}
	nodes := 3
	if os.Getenv("CROWDLOG_CHAOS_CLUSTER") == "0" {
		nodes = 1
	}
	every := 3 * time.Second
	const k, policy = 2, "ft-u"
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	c := newClusterOf(t, ctx, 6, nodes)
	c.keepOnFailure()
	input := subset(t, users)
	bin, dir, keys := c.bin, c.dir, c.keys
	adv := watchAdvisories(t, c.nats)
	// Tokens on, as users run it: an issuer of randomness and report
	// tokens and ARC credentials, and aggregators that check every report's
	// token and FT_u presentation (verification at the threshold, its
	// state in the snapshots). The randomness service and the issuer share
	// one NATS node, which is never stopped (see spareNATSNode).
	if err := keydir.EnsureIssuerKeys(keys, "chaos"); err != nil {
		t.Fatal(err)
	}
	clientSide := c.nats
	if c.natsCluster != nil {
		clientSide = c.natsCluster.URLs[0]
	}
	c.start("randomness", "randomness", "--nats", clientSide, "--keys", keys)
	c.start("issuer", "issuer", "--nats", clientSide, "--keys", keys, "--epoch", "chaos",
		"--randomness-tokens", "100000", "--report-tokens", "100000")
	// the run waits only 5 s for an issuer before it replays without
	// tokens: on a slow machine the process may take longer to start
	c.waitLog("issuer", "issuer ready", 2*time.Minute)
	var victims []*proc
	for _, name := range []string{"a", "b"} {
		victims = append(victims, c.start("relay-"+name, "relay", "--name", name,
			"--nats", c.nats, "--kafka", c.kafka, "--key", filepath.Join(keys, "relay-"+name+".key"), "--ack-wait", "4s"))
	}
	// the aggregators share one snapshot directory, as members on one host
	// (or on a shared volume) do: a killed or moved partition is restored
	// from a snapshot another process may have written
	aggArgs := []string{"aggregate", "--kafka", c.kafka, "--key", filepath.Join(keys, keydir.AggregatorKey), "--keys", keys, "--session-timeout", "6s",
		"--snapshot-dir", filepath.Join(dir, "snapshots"), "--snapshot-every", "300"}
	aggs := []*proc{c.start("aggregate-0", aggArgs...)}
	victims = append(victims, c.start("release", append([]string{"release", "--kafka", c.kafka, "--clickhouse", c.chd, "--policy", policy, "--k", strconv.Itoa(k)}, c.writerArgs(c.chd, c.chDir)...)...))

	c.openEpoch("chaos")
	out := filepath.Join(dir, "out.tsv")
	run := exec.CommandContext(ctx, bin, "run", "--external", "--no-progress", "--input", input, "--app", "query",
		"--policy", policy, "--k", strconv.Itoa(k), "--epoch", "chaos", "--nats", c.nats, "--kafka", c.kafka,
		"--clickhouse", c.chd, "--keys", keys, "--export", out,
		// NATS nodes stop at random from the start: creating the relay
		// stream may wait for a quorum far longer than the default 2 min
		"--timeout", "30m", "--start-timeout", "30m", "--ingest-timeout", "15m")
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()

	kills, joins, leaves, natsStops, natsWaits := 0, 0, 0, 0, 0
	natsDown := -1    // the stopped NATS node
	natsUpAt := 0     // the tick at which it restarts
	nextNATSStop := 5 // the first tick at which the next may stop
	natsJS := newStreamWatch(t, c.nats)
	var natsWhat []string // what each stopped node served
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	tick := time.NewTicker(every)
	defer tick.Stop()
	var runErr error
	for step := 1; ; step++ {
		select {
		case runErr = <-done:
		case <-tick.C:
			stopNATS := false
			if c.natsCluster != nil && natsDown < 0 && step >= nextNATSStop {
				if stopNATS = natsJS.current(ctx); !stopNATS {
					natsWaits++
				}
			}
			switch {
			case step == 2 || step == 3: // 1 → 3 aggregators
				aggs = append(aggs, c.start(fmt.Sprintf("aggregate-%d", len(aggs)), aggArgs...))
				joins++
			case step == 6: // 3 → 2
				aggs[len(aggs)-1].stop(syscall.SIGTERM)
				aggs = aggs[:len(aggs)-1]
				leaves++
			case stopNATS:
				// a NATS node down for two ticks, only while every
				// replica of every stream (the relay stream, its
				// consumers, the key-value buckets) is current: a
				// replica still catching up after the previous restart
				// counts as a second failure, which 3 replicas do not
				// tolerate (on a slow machine the cluster then never
				// regains its quorum and ingest stalls)
				var what string
				natsDown, what = c.spareNATSNode(rng)
				c.natsCluster.Stop(natsDown)
				natsStops++
				natsWhat = append(natsWhat, what)
				natsUpAt = step + 2
			case natsDown >= 0 && step >= natsUpAt:
				if err := c.natsCluster.Restart(ctx, natsDown); err != nil {
					t.Fatalf("restart NATS node %d: %v", natsDown, err)
				}
				natsDown = -1
				nextNATSStop = step + 4
			default:
				pool := append(append([]*proc{}, victims...), aggs...)
				v := pool[rng.IntN(len(pool))]
				v.stop(syscall.SIGKILL)
				kills++
				time.Sleep(300 * time.Millisecond)
				v.restart()
			}
			continue
		}
		break
	}
	report := fmt.Sprintf("chaos: %d users, %d NATS servers + %d Kafka brokers, %d kills, %d aggregator joins, %d leaves (final group: %d), %d NATS node stops (%d ticks waited for replicas to catch up first): %s",
		users, nodes, nodes, kills, joins, leaves, len(aggs), natsStops, natsWaits, strings.Join(natsWhat, "; "))
	os.WriteFile(filepath.Join(c.logs, "run.log"), runOut.Bytes(), 0o644)
	var restores, replays int
	aggLogs, _ := filepath.Glob(filepath.Join(c.logs, "aggregate-*.log"))
	for _, f := range aggLogs {
		b, _ := os.ReadFile(f)
		restores += bytes.Count(b, []byte("restored from snapshot"))
		replays += bytes.Count(b, []byte("rebuilding partition state by replay"))
	}
	report += fmt.Sprintf("; partitions restored from snapshots %d times, replayed %d times", restores, replays)
	t.Logf("JetStream advisories: %s", adv())
	if runErr != nil {
		t.Fatalf("%s\nrun: %v\nrelay stream: %s\n%s\n%s", report, runErr, natsJS.describe(), c.logTails(40), runOut.String())
	}
	tok := summaryField(runOut.String(), "tokens")
	if tok == "" || strings.HasPrefix(tok, "off") {
		t.Fatalf("%s: the run's tokens were %q, want on (an issuer runs)\n%s", report, tok, runOut.String())
	}
	// Reconcile Kafka with the aggregator's output, report id by report
	// id, so that a loss names its hop (see aggregator/audit).
	aud := c.audit(ctx, "query", "chaos")
	t.Log(aud.String())
	if late, missing := aud.Lost(); late > 0 || missing > 0 || aud.Orphans > 0 {
		t.Errorf("%s: %d reports reached Kafka only after the epoch close, %d were not emitted although their tag opened, %d emitted reports are not in Kafka", report, late, missing, aud.Orphans)
	}
	if sent := sentReports(runOut.String()); sent != aud.Reports {
		t.Errorf("%s: %d reports sent by the clients, %d distinct in Kafka", report, sent, aud.Reports)
	}
	n := c.checkExport(ctx, input, out, policy, k, "chaos", 6, report)
	t.Logf("%s; tokens %s; export of %d items byte-identical to the fault-free run and equal to the raw-log release", report, tok, n)
}

// spareNATSNode picks a running node of c's NATS cluster that neither
// `crowdlog run`, the randomness service nor the issuer is connected to
// (by their connection names, natsconn.Connect); the last two are given
// one node's URL, so with 3 nodes one always exists. Among those it prefers, at random, one leading the
// relay stream or a relay consumer (Shutdown does not hand leadership over:
// the other replicas must elect a new leader, as after a crash). what
// describes the node for the report: the roles connected to it and what it
// led.
func (c *cluster) spareNATSNode(rng *rand.Rand) (node int, what string) {
	var spare, leaders []int
	whats := map[int]string{}
	for i := range c.natsCluster.URLs {
		s := c.natsCluster.Node(i)
		if s == nil {
			continue
		}
		cz, err := s.NATS().Connz(&server.ConnzOptions{Limit: 1 << 16})
		if err != nil {
			c.t.Fatalf("NATS node %d connections: %v", i, err)
		}
		ok := true
		var names []string
		for _, ci := range cz.Conns {
			if ci.Name == "crowdlog-run" || ci.Name == "crowdlog-randomness" || ci.Name == "crowdlog-issuer" {
				ok = false
			}
			names = append(names, strings.TrimPrefix(ci.Name, "crowdlog-"))
		}
		if !ok {
			continue
		}
		spare = append(spare, i)
		var led []string
		if s.NATS().JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, relays.Stream) {
			led = append(led, "stream")
		}
		for _, r := range []string{"a", "b"} {
			if s.NATS().JetStreamIsConsumerLeader(server.DEFAULT_GLOBAL_ACCOUNT, relays.Stream, relays.ConsumerName(r)) {
				led = append(led, relays.ConsumerName(r))
			}
		}
		if len(led) > 0 {
			leaders = append(leaders, i)
		}
		sort.Strings(names)
		whats[i] = fmt.Sprintf("node %d (clients %v, leader of %v)", i, names, led)
	}
	if len(spare) == 0 {
		c.t.Fatal("every NATS node serves ingest, randomness or the issuer")
	}
	if len(leaders) > 0 {
		spare = leaders
	}
	node = spare[rng.IntN(len(spare))]
	return node, whats[node]
}

// watchAdvisories counts JetStream advisories on the relay stream by type
// and reason (e.g. a message the server terminated or deleted while
// unacknowledged) until the test ends; the returned func summarizes them.
func watchAdvisories(t *testing.T, url string) func() string {
	nc, err := nats.Connect(url, nats.Name("chaos-advisories"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var mu sync.Mutex
	counts := map[string]int{}
	_, err = nc.Subscribe("$JS.EVENT.ADVISORY.>", func(m *nats.Msg) {
		var a struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(m.Data, &a)
		key := strings.TrimPrefix(a.Type, "io.nats.jetstream.advisory.v1.")
		if a.Reason != "" {
			key += " (" + a.Reason + ")"
		}
		mu.Lock()
		counts[key]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		keys := make([]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, fmt.Sprintf("%s: %d", k, counts[k]))
		}
		sort.Strings(keys)
		return strings.Join(keys, "; ")
	}
}

// streamWatch reads the replication state of the relay stream and its
// consumers through its own NATS connection (JetStream API).
type streamWatch struct {
	t  *testing.T
	js jetstream.JetStream
}

func newStreamWatch(t *testing.T, url string) *streamWatch {
	nc, err := nats.Connect(url, nats.Name("chaos-stream-watch"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &streamWatch{t: t, js: js}
}

// clusters returns the cluster info of the relay stream and of each relay's
// consumer, named; an error when one cannot be read within 2 s.
func (w *streamWatch) clusters(ctx context.Context) (map[string]*jetstream.ClusterInfo, *jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := w.js.Stream(ctx, relays.Stream)
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", relays.Stream, err)
	}
	si, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s info: %w", relays.Stream, err)
	}
	out := map[string]*jetstream.ClusterInfo{"stream": si.Cluster}
	for _, r := range []string{"a", "b"} {
		cons, err := s.Consumer(ctx, relays.ConsumerName(r))
		if err != nil {
			return out, si, fmt.Errorf("consumer %s: %w", relays.ConsumerName(r), err)
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return out, si, fmt.Errorf("consumer %s info: %w", relays.ConsumerName(r), err)
		}
		out[relays.ConsumerName(r)] = ci.Cluster
	}
	return out, si, nil
}

// current reports whether the relay stream and both consumers, and every
// other stream of the cluster (the issuer's and the randomness service's
// key-value buckets), have a leader and every replica online and current.
func (w *streamWatch) current(ctx context.Context) bool {
	cl, _, err := w.clusters(ctx)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	streams := w.js.ListStreams(ctx)
	for si := range streams.Info() {
		cl["stream "+si.Config.Name] = si.Cluster
	}
	if streams.Err() != nil {
		return false
	}
	for _, c := range cl {
		if c == nil || c.Leader == "" {
			return false
		}
		for _, r := range c.Replicas {
			if r == nil || !r.Current || r.Offline {
				return false
			}
		}
	}
	return true
}

// describe is the relay stream's state for a failure message: messages per
// subject, and leader and replicas (current, lag) of the stream and both
// consumers.
func (w *streamWatch) describe() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, si, err := w.clusters(ctx)
	var parts []string
	if si != nil {
		parts = append(parts, fmt.Sprintf("messages %d, per subject %v", si.State.Msgs, si.State.Subjects))
	}
	names := make([]string, 0, len(cl))
	for n := range cl {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := cl[n]
		if c == nil {
			parts = append(parts, n+": no cluster info")
			continue
		}
		var reps []string
		for _, r := range c.Replicas {
			reps = append(reps, fmt.Sprintf("%s current=%v offline=%v lag=%d active=%s", r.Name, r.Current, r.Offline, r.Lag, r.Active))
		}
		parts = append(parts, fmt.Sprintf("%s: leader %q, replicas [%s]", n, c.Leader, strings.Join(reps, "; ")))
	}
	if err != nil {
		parts = append(parts, "error: "+err.Error())
	}
	return strings.Join(parts, "; ")
}

// logTails is the last n lines of each relay's and the randomness
// service's log (roles log no artifacts, user ids or keys).
func (c *cluster) logTails(n int) string {
	var b strings.Builder
	for _, name := range []string{"relay-a", "relay-b", "randomness"} {
		data, err := os.ReadFile(filepath.Join(c.logs, name+".log"))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(&b, "--- %s.log (last %d lines)\n%s\n", name, len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

// waitLog waits until logs/NAME.log contains line, at most bound, and
// fails the test naming what it waited for.
func (c *cluster) waitLog(name, line string, bound time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(bound)
	for {
		b, _ := os.ReadFile(filepath.Join(c.logs, name+".log"))
		if bytes.Contains(b, []byte(line)) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s did not log %q within %s; its log:\n%s", name, line, bound, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
