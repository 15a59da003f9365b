package tests

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// TestDevicePipelineCheck: ingest.New with Config.App against real
// aggregators announcing on embedded NATS (runner.NewAggregator, as
// `crowdlog aggregate --nats --pipeline` builds it): the device that
// agrees adopts the file's digest; each disagreement (policy, app options,
// app, k under a given digest) fails naming the Config field; with no
// aggregator announcing, New fails with ErrNoAnnouncement; a second
// aggregator process serving every definition does not mask the first.
func TestDevicePipelineCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := keydir.EnsureKeys(keys); err != nil {
		t.Fatal(err)
	}
	ns, err := natsserver.Start(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	dev := func(cfg ingest.Config) (*ingest.Device, error) {
		cfg.Memory, cfg.NATS, cfg.KeysDir, cfg.SkipRouteCheck, cfg.Epoch = true, ns.URL, keys, true, "check"
		if cfg.PipelineWait == 0 {
			cfg.PipelineWait = 2 * time.Second
		}
		d, err := ingest.New(ctx, cfg)
		if err == nil {
			d.Close(ctx)
		}
		return d, err
	}
	// no aggregator announces yet
	if _, err := dev(ingest.Config{App: "query", K: 5, PipelineWait: 300 * time.Millisecond}); !errors.Is(err, ingest.ErrNoAnnouncement) || !strings.Contains(err.Error(), "--nats") {
		t.Fatalf("no aggregator: %v, want ErrNoAnnouncement naming --nats", err)
	}
	kb, err := kafka.Start(ctx, filepath.Join(dir, "kafka"), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kb.Close)
	if err := kafka.EnsureTopics(ctx, kb.Addr, 1, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
	files := []string{"../testdata/pipelines/query-ftu-k5.yaml", "../testdata/pipelines/click-fta-domain.yaml", "../testdata/pipelines/query-dpu.yaml"}
	start := func(pipelines []string, group string) {
		o := aggregator.DefaultOptions()
		o.Kafka, o.KeyPaths, o.PipelineFiles, o.Group = []string{kb.Addr}, []string{filepath.Join(keys, keydir.AggregatorKey)}, pipelines, group
		o.NATS.URL = ns.URL
		s, err := runner.NewAggregator(o, slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); s.Run(sctx) }()
		t.Cleanup(func() { stop(); <-done })
	}
	start(files, "check-a")
	query, err := runner.PipelineDigest(files[0])
	if err != nil {
		t.Fatal(err)
	}
	// the announcement comes once the aggregator has listed the topic
	var d *ingest.Device
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if d, err = dev(ingest.Config{App: "query", K: 5, Policy: star.FTu}); err == nil || !errors.Is(err, ingest.ErrNoAnnouncement) || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		t.Fatalf("the agreeing device: %v", err)
	}
	_ = d
	wrong := query
	wrong[31] ^= 1
	for _, c := range []struct {
		name string
		cfg  ingest.Config
		want string
	}{
		{"policy", ingest.Config{App: "query", K: 5, Policy: star.FTa}, "set Config.Policy to star.FTu"},
		{"k", ingest.Config{App: "query", K: 3}, "Config.K = 3"},
		{"k under the file's digest", ingest.Config{App: "query", K: 3, Pipelines: map[string][32]byte{"query": query}}, "set Config.K to 5"},
		{"digest", ingest.Config{App: "query", K: 5, Pipelines: map[string][32]byte{"query": wrong}}, "set Config.Pipelines[\"query\"]"},
		{"app options", ingest.Config{App: "click", K: 10, Policy: star.FTa, AppOptions: apps.Options{URLLevel: "full"}}, "Config.AppOptions"},
		{"app", ingest.Config{App: "url", K: 5}, "Config.App \"url\""},
	} {
		_, err := dev(c.cfg)
		if !errors.Is(err, ingest.ErrPipelineMismatch) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("wrong %s: %v, want ErrPipelineMismatch saying %q", c.name, err, c.want)
			continue
		}
		t.Logf("wrong %s: %v", c.name, err)
	}
	if _, err := dev(ingest.Config{App: "click", K: 10, Policy: star.FTa, AppOptions: apps.Options{URLLevel: "domain"}}); err != nil {
		t.Errorf("the agreeing click device: %v", err)
	}
	// a DP pipeline's device: verified, but its counts are withheld (an
	// exact report count is outside the release's (ε, δ)); a threshold
	// pipeline's are disclosed
	dp, err := pipeline.Load(files[2])
	if err != nil {
		t.Fatal(err)
	}
	spec, err := dp.Spec()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg      ingest.Config
		withheld bool
	}{{ingest.Config{App: "query", K: spec.ShamirK, Pipelines: map[string][32]byte{"query": spec.Digest()}}, true}, {ingest.Config{App: "query", K: 5}, false}} {
		cfg := c.cfg
		cfg.Memory, cfg.NATS, cfg.KeysDir, cfg.SkipRouteCheck, cfg.Epoch, cfg.PipelineWait = true, ns.URL, keys, true, "check", 2*time.Second
		d, err := ingest.New(ctx, cfg)
		if err != nil {
			t.Fatalf("k %d: %v", cfg.K, err)
		}
		down, err := d.Downstream(ctx, "query")
		d.Close(ctx)
		if err != nil || down.Withheld != c.withheld {
			t.Fatalf("k %d: downstream %+v, %v; want withheld %v", cfg.K, down, err, c.withheld)
		}
		t.Logf("k %d: downstream %s", cfg.K, down)
	}
	// a process of another group serving every definition answers too;
	// the first one's definitions are still checked
	start(nil, "check-b")
	time.Sleep(time.Second)
	if _, err := dev(ingest.Config{App: "query", K: 3}); !errors.Is(err, ingest.ErrPipelineMismatch) {
		t.Errorf("wrong k beside an aggregator serving every definition: %v", err)
	}
}
