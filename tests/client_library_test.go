package tests

import (
	"github.com/prometheus/client_golang/prometheus"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/gobuild"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/normalize"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/randomness"
	"github.com/crowdlog/crowdlog/relays"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/stage"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// deployment is every server role in process on embedded NATS, kfake and a
// local ClickHouse, as `crowdlog run` starts them, for clients that run
// elsewhere (here: the example program).
type deployment struct {
	nats, kafka string
	keys        string
	js          jetstream.JetStream
	writer      *release.Writer
	// signer signs the epoch control records when the aggregator checks
	// them (the README's --control-pub); nil: unsigned
	signer *aggregator.ControlSigner
}

// startDeployment starts every role for epoch, the aggregator as
// aggregator.New gives it (every pipeline definition, unsigned control).
func startDeployment(t *testing.T, ctx context.Context, epoch string) *deployment {
	t.Helper()
	return startDeploymentWith(t, ctx, epoch, nil)
}

// readmeAggregateArgs are the flags of the README's `crowdlog aggregate`
// line (section "Running each role against real clusters"), its hosts and
// paths replaced by the test's: kafka:9092, nats://nats:4222, keys/ and
// testdata/.
func readmeAggregateArgs(t *testing.T, d *deployment) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "crowdlog aggregate --")
		if !ok {
			continue
		}
		rest, _, _ = strings.Cut("--"+rest, "#")
		r := strings.NewReplacer("kafka:9092", d.kafka, "nats://nats:4222", d.nats, "keys/", d.keys+"/", "testdata/", "../testdata/")
		return strings.Fields(r.Replace(rest))
	}
	t.Fatal("README.md has no `crowdlog aggregate --…` line")
	return nil
}

// startDeploymentWith is startDeployment with the aggregator of
// aggregateArgs (flags of `crowdlog aggregate`, built as the command
// builds it: runner.NewAggregator) when not nil; with --control-pub its
// epoch control records are signed for the first --pipeline.
func startDeploymentWith(t *testing.T, ctx context.Context, epoch string, aggregateArgs func(*deployment) []string) *deployment {
	t.Helper()
	dir := t.TempDir()
	d := &deployment{keys: filepath.Join(dir, "keys")}
	ns, err := natsserver.Start(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	d.nats = ns.URL
	kb, err := kafka.Start(ctx, filepath.Join(dir, "kafka"), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kb.Close)
	d.kafka = kb.Addr
	ch, err := clickhouse.Start(ctx, filepath.Join(dir, "clickhouse"))
	if errors.Is(err, clickhouse.ErrNotInstalled) {
		t.Skipf("ClickHouse not installed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Stop() })
	brokers := []string{d.kafka}
	if err := kafka.EnsureTopics(ctx, d.kafka, 2, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
	if err := keydir.EnsureKeys(d.keys); err != nil {
		t.Fatal(err)
	}
	nc, err := natsconn.Connect(d.nats, "test-deployment")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if d.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if err := relays.EnsureStream(ctx, d.js, 0); err != nil {
		t.Fatal(err)
	}
	svcCtx, stop := context.WithCancel(ctx)
	var svc errgroup.Group
	t.Cleanup(func() { stop(); svc.Wait() })
	rs, err := randomness.New(svcCtx, nc, d.keys, randomness.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rs.Keys.OpenEpoch(epoch); err != nil {
		t.Fatal(err)
	}
	svc.Go(func() error { return rs.Run(svcCtx) })
	for _, name := range []string{"a", "b"} {
		r, closeW, err := relays.New(svcCtx, d.js, relays.Config{Name: name, Kafka: brokers,
			KeyPaths: []string{filepath.Join(d.keys, "relay-"+name+".key")}, PoolTimeout: 100 * time.Millisecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		svc.Go(func() error { defer closeW(); return r.Run(svcCtx) })
	}
	var agg *aggregator.Service
	if aggregateArgs == nil {
		agg, err = aggregator.New(brokers, []string{filepath.Join(d.keys, keydir.AggregatorKey)}, nil)
	} else {
		if _, err := keydir.EnsureSigningKey(filepath.Join(d.keys, keydir.ControlSignKey)); err != nil {
			t.Fatal(err)
		}
		o := aggregator.DefaultOptions()
		fs := pflag.NewFlagSet("aggregate", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(aggregateArgs(d)); err != nil {
			t.Fatal(err)
		}
		agg, err = runner.NewAggregator(o, slog.Default())
		if err == nil && o.ControlPub != "" && len(o.PipelineFiles) > 0 {
			d.signer = &aggregator.ControlSigner{}
			if d.signer.Key, err = keydir.LoadSigningKey(filepath.Join(d.keys, keydir.ControlSignKey)); err == nil {
				d.signer.Pipeline, err = runner.PipelineDigest(o.PipelineFiles[0])
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	svc.Go(func() error { return agg.Run(svcCtx) })
	st, w, err := stage.New(svcCtx, brokers, ch.TCPAddr, "crowdlog", nil)
	if err != nil {
		t.Fatal(err)
	}
	svc.Go(func() error { defer w.Close(); return st.Run(svcCtx) })
	if d.writer, err = release.Open(ctx, ch.TCPAddr, "crowdlog"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.writer.Close() })
	if err := aggregator.OpenEpoch(ctx, brokers, d.signer, "query", epoch); err != nil {
		t.Fatal(err)
	}
	return d
}

// release waits for the relays to drain, closes the epoch and returns the
// released items of (query, epoch, ft-u, k).
func (d *deployment) release(t *testing.T, ctx context.Context, epoch string, k int) []release.Item {
	t.Helper()
	poll := func(what string, cond func() (bool, error)) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			ok, err := cond()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waited 60 s for %s (last error %v)", what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	poll("the relays to drain", func() (bool, error) { return relays.Drained(ctx, d.js, "a", "b") })
	if err := aggregator.CloseEpoch(ctx, []string{d.kafka}, d.signer, "query", epoch); err != nil {
		t.Fatal(err)
	}
	key := release.Key{App: "query", Epoch: epoch, Policy: "ft-u", K: k}
	poll("the release in ClickHouse", func() (bool, error) { return d.writer.IsReleased(ctx, key) })
	items, err := d.writer.ReleasedItems(ctx, key.App, key.Epoch, key.Policy, key.K)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// TestClientLibrary runs the example program (examples/embed, which embeds
// ingest.Device) against a whole deployment whose aggregator is started
// exactly as the README starts it (its `crowdlog aggregate` line: the
// query FT_u k = 5 pipeline, signed epoch control, --nats), and checks the
// FT_u release in ClickHouse against counts computed from the runs'
// arguments:
//
//   - device 1 sends "weather" twice (two instances) and "news";
//   - device 1 restarted with the same arguments (its state directory
//     kept) must add nothing: no second share, no second impression;
//   - devices 2–4 send "weather" and "news", device 5 "weather";
//   - device 1b is device 1 reinstalled (a fresh state directory, so a
//     new user secret) sending "news", news's fifth user: the control —
//     without the state a device is counted again.
//
// Then the arms that must fail fast at the client, before any report
// leaves: the example with --k 2 (the pipeline has k = 5) and with a wrong
// --digest; each error names the disagreeing value and the Config field.
// Last, the refusal the client can see: a device configured without
// Config.App (no check) and K = 2 sends; its reports are refused
// (pipeline-mismatch) and Device.Downstream counts them.
func TestClientLibrary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const epoch, k = "library-e1", 5 // k: the README's pipeline, testdata/pipelines/query-ftu-k5.yaml
	bin := filepath.Join(t.TempDir(), "embed")
	if err := gobuild.Build(ctx, bin, "../examples/embed"); err != nil {
		t.Fatal(err)
	}
	d := startDeploymentWith(t, ctx, epoch, func(d *deployment) []string { return readmeAggregateArgs(t, d) })
	if d.signer == nil {
		t.Fatal("the README's aggregator has no --control-pub and --pipeline: update the test's epoch control")
	}
	states := t.TempDir()
	const at = "2026-11-24T08:00:00Z"
	both := []string{"made up weather", "made up news"}
	runs := []struct {
		device  string
		queries []string
	}{
		{"device1", []string{"Made up  Weather", "made up weather", "made up news"}},
		{"device1", []string{"Made up  Weather", "made up weather", "made up news"}}, // the restart
		{"device2", both}, {"device3", both}, {"device4", both},
		{"device5", []string{"made up weather"}},
		{"device1b", []string{"made up news"}},
	}
	// ground truth from the arguments: per normalized query, the devices
	// (a state directory is a device) and the instances of the first run
	// of each (device, args) — a rerun adds nothing
	users := map[string]map[string]bool{}
	impressions := map[string]uint64{}
	done := map[string]bool{}
	example := func(device string, extra []string, queries []string) (string, error) {
		args := []string{"--nats", d.nats, "--keys", d.keys, "--state", filepath.Join(states, device),
			"--epoch", epoch, "--k", fmt.Sprint(k), "--at", at, "--wait", "20s"}
		out, err := exec.CommandContext(ctx, bin, append(append(args, extra...), queries...)...).CombinedOutput()
		return string(out), err
	}
	for _, r := range runs {
		key := r.device + "\x00" + strings.Join(r.queries, "\x00")
		out, err := example(r.device, nil, r.queries)
		if err != nil {
			t.Fatalf("examples/embed for %s: %v\n%s", r.device, err, out)
		}
		want := 0
		if !done[key] {
			done[key] = true
			for _, q := range r.queries {
				nq, _ := normalize.Query(q)
				if users[nq] == nil {
					users[nq] = map[string]bool{}
				}
				users[nq][r.device] = true
				impressions[nq]++
				want++
			}
		}
		if !strings.Contains(out, fmt.Sprintf("submitted %d reports", want)) {
			t.Fatalf("examples/embed for %s: %q, want %d reports submitted", r.device, out, want)
		}
		// the summary says how many the aggregator admitted; the runs are
		// sequential, so its delta is this run's reports
		if want > 0 && !strings.Contains(out, fmt.Sprintf("downstream: %d of %d reports admitted, 0 refused", want, want)) {
			t.Fatalf("examples/embed for %s: %q, want all %d reports admitted downstream", r.device, out, want)
		}
	}

	// the arms that must fail at the client: wrong k, wrong digest
	digest := d.signer.Pipeline
	wrong := digest
	wrong[0] ^= 1
	for _, arm := range []struct {
		name  string
		flags []string
		want  []string
	}{
		{"k", []string{"--k", "2"}, []string{"Config.K = 2", "k = 5", "set Config.K to 5"}},
		{"digest", []string{"--digest", fmt.Sprintf("%x", wrong)}, []string{"Config.Pipelines[\"query\"] = " + fmt.Sprintf("%x", wrong), fmt.Sprintf("%x", digest)}},
	} {
		start := time.Now()
		out, err := example("wrong-"+arm.name, append(arm.flags[:len(arm.flags):len(arm.flags)], "--wait", "0"), []string{"made up weather"})
		if err == nil {
			t.Fatalf("examples/embed with a wrong %s started and sent: %s", arm.name, out)
		}
		for _, w := range arm.want {
			if !strings.Contains(out, w) {
				t.Errorf("examples/embed with a wrong %s: error %q does not say %q", arm.name, out, w)
			}
		}
		if strings.Contains(out, "submitted") {
			t.Errorf("examples/embed with a wrong %s submitted: %s", arm.name, out)
		}
		t.Logf("wrong %s: refused at the client in %s: %s", arm.name, time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
	}

	// the controls: devices that check nothing (Config.App empty) with
	// k = 2 send, one sealing for no pipeline, one for the README
	// pipeline's digest (whose k is 5); the aggregator refuses both
	// (pipeline-mismatch: a digest not served; a k its definition does not
	// have) and Downstream shows each refusal
	for i, pipes := range []map[string][32]byte{nil, {"query": digest}} {
		dev, err := ingest.New(ctx, ingest.Config{StateDir: filepath.Join(states, fmt.Sprint("unchecked", i)), NATS: d.nats, KeysDir: d.keys,
			Epoch: epoch, Policy: star.FTu, K: 2, Pipelines: pipes})
		if err != nil {
			t.Fatal(err)
		}
		n, err := dev.Submit(ctx, "query", apps.Artifact{Primary: "made up weather", Secondary: "made up weather", Time: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)})
		if err != nil || n != 1 {
			t.Fatalf("unchecked device: submitted %d, %v", n, err)
		}
		var down ingest.Downstream
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if down, err = dev.Downstream(ctx, "query"); err != nil {
				t.Fatal(err)
			}
			if down.Refused["pipeline-mismatch"] >= 1 {
				break
			}
		}
		dev.Close(ctx)
		admitted := int64(0)
		if pipes != nil {
			for _, n := range impressions { // the example devices' reports, admitted under the same digest
				admitted += int64(n)
			}
		}
		if down.Refused["pipeline-mismatch"] != 1 || down.Admitted != admitted {
			t.Fatalf("unchecked device %d with k = 2: downstream %s, want its 1 report refused as pipeline-mismatch beside %d admitted", i, down, admitted)
		}
		t.Logf("unchecked device (no Config.App, k = 2, pipeline %x): downstream %s", down.Pipeline[:4], down)
	}

	items := d.release(t, ctx, epoch, k)
	got := map[string]release.Item{}
	for _, it := range items {
		got[it.Item] = it
	}
	for q, us := range users {
		it, ok := got[q]
		if len(us) < k {
			if ok {
				t.Errorf("%q released with %d users, below k", q, it.Users)
			}
			continue
		}
		if !ok || it.Users != uint64(len(us)) || it.Impressions != impressions[q] {
			t.Errorf("%q: released %v users=%d impressions=%d, want users=%d impressions=%d", q, ok, it.Users, it.Impressions, len(us), impressions[q])
		}
	}
	if len(got) != 2 {
		t.Errorf("%d items released, want 2", len(got))
	}
	t.Logf("released %d items; weather users=%d impressions=%d, news users=%d after device 1's restart and reinstall", len(got),
		got["made up weather"].Users, got["made up weather"].Impressions, got["made up news"].Users)

	// `crowdlog ingest` (runner.Ingest) against the README's aggregator
	// prints the aggregators' counts of its pipeline and epoch: they
	// include the example devices' reports, admitted under the same digest
	var exampleReports int64
	for _, n := range impressions {
		exampleReports += int64(n)
	}
	sum, err := runner.Ingest(ctx, runner.IngestConfig{Input: subset(t, 2), App: "query", Policy: "ft-u", K: k, Epoch: epoch,
		NATS: d.nats, KeysDir: d.keys, Workers: 2, TokensOff: true, DownstreamWait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ds := sum.Downstream; ds == nil || ds.Withheld || ds.Processes < 1 || ds.Admitted < exampleReports {
		t.Fatalf("crowdlog ingest's downstream: %v, want the aggregator's counts with at least the examples' %d reports admitted", ds, exampleReports)
	}
	t.Logf("crowdlog ingest after the epoch closed: %d reports sent; downstream: %s", sum.Reports, sum.Downstream)
}

// TestIngestStateDir: `crowdlog ingest --state DIR` (runner.Ingest) run
// twice on the same log and epoch sends nothing the second time: the FT_u
// release equals the one the raw log gives (tests/truth), not twice it.
func TestIngestStateDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const epoch, k = "library-e2", 2
	d := startDeployment(t, ctx, epoch)
	log := subset(t, 8)
	state := t.TempDir()
	var sent []int64
	for range 2 {
		reg := prometheus.NewRegistry()
		sum, err := runner.Ingest(ctx, runner.IngestConfig{Input: log, App: "query", Policy: "ft-u", K: k, Epoch: epoch,
			NATS: d.nats, KeysDir: d.keys, StateDir: state, Workers: 2, Registerer: reg, DownstreamWait: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, sum.Reports)
		// this aggregator runs without --nats: no counts, the summary
		// says nothing about downstream (TestClientLibrary has them)
		if sum.Downstream != nil {
			t.Fatalf("ingest %d: downstream %s from an aggregator that announces nothing", len(sent), sum.Downstream)
		}
		// what `crowdlog ingest --metrics` serves: the reports it published
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var published float64 = -1
		for _, mf := range mfs {
			if mf.GetName() == "crowdlog_ingest_reports_published_total" {
				published = mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		if published != float64(sum.Reports) {
			t.Fatalf("crowdlog_ingest_reports_published_total = %v, the ingest sent %d", published, sum.Reports)
		}
	}
	if sent[0] == 0 || sent[1] != 0 {
		t.Fatalf("reports sent by the two ingests: %v, want [>0 0]", sent)
	}
	want, err := truth.Release(log, "ft-u", k, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]truth.Row{}
	for _, it := range d.release(t, ctx, epoch, k) {
		got[it.Item] = truth.Row{Item: it.Item, Impressions: int(it.Impressions), Users: int(it.Users)}
	}
	if diff := truth.Diff(want, got, 5); len(diff) > 0 || len(want) == 0 {
		t.Fatalf("release after two ingests differs from the log's (%d items expected, %d released):\n%s", len(want), len(got), strings.Join(diff, "\n"))
	}
	t.Logf("%d reports sent, then 0; %d items released as the log says", sent[0], len(got))
}
