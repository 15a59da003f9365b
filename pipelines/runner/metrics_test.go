package runner

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/randomness"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsMatchSummary scrapes /metrics of an in-process run and checks
// that the counters equal the run's own summary.
func TestMetricsMatchSummary(t *testing.T) {
	needClickHouse(t)
	if testing.Short() {
		t.Skip("end-to-end run in -short mode")
	}
	dir := t.TempDir()
	input := writeSubset(t, dir, 30)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var scraped string
	sum, err := runWithScrape(ctx, Config{Input: input, App: "query", Policy: "ft-u", K: 2, Partitions: 2,
		StateDir: filepath.Join(dir, "state"), Metrics: "127.0.0.1:0"}, &scraped)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, line := range strings.Split(scraped, "\n") {
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		values[name] += f
	}
	check := func(name string, want int64) {
		t.Helper()
		if got := values[name]; int64(got) != want || want == 0 {
			t.Errorf("%s = %v, summary says %d (must be non-zero)", name, got, want)
		}
	}
	check("crowdlog_ingest_reports_published_total", sum.Sent)
	check("crowdlog_aggregator_decrypted_total", sum.Decrypted)
	check(`crowdlog_relay_forwarded_total{relay="b"}`, sum.Relayed)
	check("crowdlog_release_rows_total", int64(sum.Released))
	if values["crowdlog_randomness_evaluated_total"] == 0 {
		t.Error("randomness evaluated counter is zero")
	}

	// every metric the Grafana dashboard plots exists in the scrape
	b, err := os.ReadFile("../../infra/deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	metricName := regexp.MustCompile(`crowdlog_[a-z_]+`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				if !strings.Contains(scraped, "\n"+m) && !strings.Contains(scraped, "# TYPE "+strings.TrimSuffix(m, "_bucket")) {
					t.Errorf("dashboard panel %q plots %s, which no role exports", p.Title, m)
				}
			}
		}
	}
	if len(dash.Panels) == 0 {
		t.Error("dashboard has no panels")
	}
}

// runWithScrape runs the pipeline and scrapes /metrics right after the
// release, before the services stop.
func runWithScrape(ctx context.Context, cfg Config, out *string) (*Summary, error) {
	cfg.afterRelease = func(addr string) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			*out = err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		*out = string(b)
	}
	return Run(ctx, cfg)
}

// TestRegisterRandomnessTokenRefusals: the randomness service's token
// refusals are exported per reason (one series each, registered without a
// collision) next to the evaluated and rejected counters.
func TestRegisterRandomnessTokenRefusals(t *testing.T) {
	reg := prometheus.NewRegistry()
	RegisterRandomness(reg, &randomness.Service{})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "crowdlog_randomness_token_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					reasons[l.GetValue()] = true
				}
			}
		}
	}
	for _, r := range []string{randomness.ReasonTokensMissing, randomness.ReasonTokenInvalid, randomness.ReasonTokenSpent, randomness.ReasonTokensUnavailable} {
		if !reasons[r] {
			t.Errorf("no crowdlog_randomness_token_refused_total{reason=%q} series (have %v)", r, reasons)
		}
	}
}
