package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/aggregator"
	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/release/policy"
)

// TestAttackMetricsExactCounts: a real `crowdlog aggregate` on a kfake
// broker reads 3 users' reports of one artifact (k = 3: decrypted) and 1
// user's report of another (pending). Whoever reads its /metrics is the
// attacker: under a DP policy (and without --pipeline, where a DP
// pipeline may be served) the scrape must not carry the exact counts a DP
// release withholds (crowdlog_aggregator_decrypted_total = 3,
// crowdlog_aggregator_pending_tags = 1, the decrypt-wait histogram),
// while --metrics-exact-counts and a threshold pipeline (ft-u) export
// them. Traffic counters (reports accepted) stay in every scrape.
func TestAttackMetricsExactCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	keys := t.TempDir()
	gen := keysCmd()
	gen.SetArgs([]string{"generate", "--keys", keys})
	gen.SetOut(io.Discard)
	if err := gen.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, aggPub, err := keydir.LoadRoute(keys)
	if err != nil {
		t.Fatal(err)
	}
	const partitions = 2
	kb, err := infrakafka.Start(ctx, filepath.Join(t.TempDir(), "kafka"), partitions)
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Close()
	if err := infrakafka.EnsureTopics(ctx, kb.Addr, partitions, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
	if err := aggregator.OpenEpoch(ctx, []string{kb.Addr}, nil, "query", "e1"); err != nil {
		t.Fatal(err)
	}
	// For each pipeline (and for none): its "rare query" by k users (k its
	// Shamir threshold: decrypted), its "unique query" by 1 (pending).
	pipelines := map[string]string{"dp-u": "../../testdata/pipelines/query-dpu.yaml", "ft-u": "../../testdata/pipelines/query-ftu-k5.yaml", "": ""}
	var msgs []kafkago.Message
	shamirK := map[string]int{}
	for name, file := range pipelines {
		c := star.Context{App: "query", Epoch: "e1", Policy: star.FTu, K: 3}
		if file != "" {
			pl, err := pipeline.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			pol, err := policy.New(pl.PolicyParams())
			if err != nil {
				t.Fatal(err)
			}
			c.Policy, c.K = pol.Sealing(), pol.ShamirK
			if c.Pipeline, err = pl.Digest(); err != nil {
				t.Fatal(err)
			}
		}
		shamirK[name] = c.K
		for art, users := range map[string]int{"rare query": c.K, "unique query": 1} {
			omega := make([]byte, 64)
			copy(omega, name+art) // stands in for the OPRF output: one ω per artifact
			s, err := star.DeriveSealingIn(omega, c)
			if err != nil {
				t.Fatal(err)
			}
			for range users {
				u, _ := star.NewUserSecret()
				r, err := s.Seal(&u, art, art)
				if err != nil {
					t.Fatal(err)
				}
				b, err := r.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				l, err := onion.SealLayer(aggPub, onion.Hop{Kind: onion.HopDeliver}, b)
				if err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, kafkago.Message{Key: onion.TagBucket(r.Tag), Value: l})
			}
		}
	}
	w := infrakafka.NewWriter(kb.Addr, protocol.ReportsTopic)
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	infrakafka.CloseWriter(w)

	exactSeries := []string{"crowdlog_aggregator_decrypted_total", "crowdlog_aggregator_pending_tags", "crowdlog_aggregator_decrypt_wait_seconds_count"}
	all := shamirK["dp-u"] + shamirK["ft-u"] + shamirK[""]
	shownDP, checkedDP := 0, 0
	var arms []string
	defer func() {
		fmt.Printf("ATTACK metrics-exact-counts: %d of %d exact-count series in /metrics of an aggregator that may serve a DP pipeline (%s)\n", shownDP, checkedDP, strings.Join(arms, "; "))
	}()
	for i, arm := range []struct {
		name      string
		args      []string
		exact     bool
		decrypted int // reports the arm decrypts
	}{
		{"dp-u pipeline", []string{"--pipeline", pipelines["dp-u"]}, false, shamirK["dp-u"]},
		{"no --pipeline (every definition, DP ones included)", nil, false, all},
		{"--metrics-exact-counts, no --pipeline", []string{"--metrics-exact-counts"}, true, all},
		{"dp-u pipeline, --metrics-exact-counts", []string{"--pipeline", pipelines["dp-u"], "--metrics-exact-counts"}, true, shamirK["dp-u"]},
		{"ft-u pipeline", []string{"--pipeline", pipelines["ft-u"]}, true, shamirK["ft-u"]},
	} {
		got := scrapeAggregator(ctx, t, append([]string{"--key", filepath.Join(keys, keydir.AggregatorKey), "--kafka", kb.Addr,
			"--group", fmt.Sprintf("metrics-%d", i)}, arm.args...), len(msgs))
		if got["crowdlog_aggregator_reports_total"] == 0 {
			t.Errorf("%s: crowdlog_aggregator_reports_total = 0: the role accepted no report (traffic stays exported)", arm.name)
		}
		var shown []string
		for _, name := range exactSeries {
			if v, ok := got[name]; ok {
				shown = append(shown, fmt.Sprintf("%s=%v", name, v))
			}
		}
		if !arm.exact {
			shownDP, checkedDP = shownDP+len(shown), checkedDP+len(exactSeries)
			arms = append(arms, fmt.Sprintf("%s, %d reports decrypted: %d of %d %v", arm.name, arm.decrypted, len(shown), len(exactSeries), shown))
			if len(shown) > 0 {
				t.Errorf("%s: /metrics exports the exact counts a DP release withholds: %v", arm.name, shown)
			}
			continue
		}
		t.Logf("%s: %v", arm.name, shown)
		if got["crowdlog_aggregator_decrypted_total"] != float64(arm.decrypted) || got["crowdlog_aggregator_pending_tags"] == 0 {
			t.Errorf("%s: decrypted_total %v, pending_tags %v; want %d and > 0", arm.name, got["crowdlog_aggregator_decrypted_total"], got["crowdlog_aggregator_pending_tags"], arm.decrypted)
		}
	}
}

// scrapeAggregator runs `crowdlog aggregate args --metrics ADDR` until its
// /metrics shows reports accepted or dropped for every one of want
// messages, and returns that scrape (series name with labels → value).
func scrapeAggregator(ctx context.Context, t *testing.T, args []string, want int) map[string]float64 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		root := rootCmd()
		root.SetArgs(append([]string{"aggregate", "--metrics", addr}, args...))
		root.SetOut(io.Discard)
		done <- root.ExecuteContext(rctx)
	}()
	defer func() {
		stop()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("aggregate did not stop within 20 s")
		}
	}()
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := map[string]float64{}
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(b), "\n") {
				name, v, ok := strings.Cut(line, " ")
				if !ok || strings.HasPrefix(line, "#") {
					continue
				}
				f, _ := strconv.ParseFloat(v, 64)
				got[name] = f
			}
			seen := got["crowdlog_aggregator_reports_total"]
			for name, v := range got {
				if strings.HasPrefix(name, "crowdlog_aggregator_dropped_total{") {
					seen += v
				}
			}
			if seen >= float64(want) {
				return got
			}
		}
		select {
		case err := <-done:
			done <- err // for the deferred wait
			t.Fatalf("aggregate %v exited: %v", args, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("aggregate %v: /metrics did not account for %d reports in 90 s: %v", args, want, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
