package runner

import (
	"context"
	"encoding/json"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/crowdlog/crowdlog/aggregator"
	aggprio3 "github.com/crowdlog/crowdlog/aggregator/prio3"
	"github.com/crowdlog/crowdlog/aggregator/vectors"
	"github.com/crowdlog/crowdlog/coordinator"
	"github.com/crowdlog/crowdlog/infra/ready"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol/pipelinespec"
	"github.com/crowdlog/crowdlog/randomness"
	pddrelease "github.com/crowdlog/crowdlog/release/pdd"
	prio3release "github.com/crowdlog/crowdlog/release/prio3"
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

	// every selector of every dashboard panel matches the scrape
	checkDashboard(t, scraped)
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

// dashboardPanel is a panel of infra/deploy/grafana-dashboard.json as the
// tests read it.
type dashboardPanel struct {
	Title       string
	Description string
	Targets     []struct{ Expr string }
}

func readDashboard(t *testing.T) []dashboardPanel {
	t.Helper()
	b, err := os.ReadFile("../../infra/deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct{ Panels []dashboardPanel }
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("dashboard has no panels")
	}
	return dash.Panels
}

// selector is one vector selector of a panel expression: the metric name
// and the label=value equality matchers.
type selector struct {
	name   string
	equals map[string]string
}

// panelSelectors parses expr with the PromQL parser and returns its vector
// selectors (those inside range vectors included).
func panelSelectors(expr string) ([]selector, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []selector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		sel := selector{name: vs.Name, equals: map[string]string{}}
		for _, m := range vs.LabelMatchers {
			switch {
			case m.Name == model.MetricNameLabel:
				if m.Type == labels.MatchEqual {
					sel.name = m.Value
				}
			case m.Type == labels.MatchEqual:
				sel.equals[m.Name] = m.Value
			}
		}
		out = append(out, sel)
		return nil
	})
	return out, nil
}

// scrapeFamilies parses a /metrics scrape (Prometheus text format).
func scrapeFamilies(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse the scrape: %v", err)
	}
	return mfs
}

// notInRun lists the roles `crowdlog run` does not run in process (the PDD
// coordinator, vectors aggregator and PDD release; the Prio3 leader, helper
// and release; the issuer when the run has no tokens; the readiness
// checker of the long-running roles): their series are checked against a registry with their
// Register functions applied to zero-valued services instead of the run's
// scrape. Every other metric must be in the run's scrape.
func notInRun(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	RegisterCoordinator(reg, &coordinator.Coordinator{})
	RegisterVectors(reg, &vectors.Service{})
	RegisterPDDRelease(reg, &pddrelease.Stage{})
	(&issuer.Service{}).Register(reg)
	(&aggprio3.LeaderService{}).Register(reg)
	(&aggprio3.HelperService{}).Register(reg)
	(&prio3release.Stage{}).Register(reg)
	// the per-pipeline counts exist only with aggregate --nats: one served
	// threshold pipeline, admitted 0
	reg.MustRegister(pipelineReports{&aggregator.Service{Announce: []pipelinespec.Spec{{App: "query", Policy: "ft-u", ShamirK: 2}}}})
	ready.New(nil, ready.Check{Name: "nats"}, ready.Check{Name: "jetstream"}, ready.Check{Name: "kafka"},
		ready.Check{Name: "kafka_writes"}, ready.Check{Name: "clickhouse"}).Register(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// family finds the family a selector name belongs to (name itself, or a
// histogram's or summary's name_bucket, _sum, _count).
func family(mfs map[string]*dto.MetricFamily, name string) *dto.MetricFamily {
	if mf := mfs[name]; mf != nil {
		return mf
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if mf := mfs[base]; mf != nil && (mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY) {
				return mf
			}
		}
	}
	return nil
}

// hasLabel reports whether a series of mf carries label name=value.
func hasLabel(mf *dto.MetricFamily, name, value string) bool {
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == name && l.GetValue() == value {
				return true
			}
		}
	}
	return false
}

// checkDashboard parses every panel expression of the Grafana dashboard
// with the PromQL parser and requires that each vector selector's metric
// exists in scraped (a real `crowdlog run`'s /metrics) and that each
// label="value" matcher's value appears on a series of that metric, e.g.
// crowdlog_relay_dropped_total{reason="unknown_key"}. Metrics of the roles
// the run does not run (notInRun) are checked against those roles'
// registries instead, and logged; a metric with no series there (a
// per-partition gauge before any fetch) only needs to be registered in
// the code (registeredMetricNames) when the panel selects no label value.
func checkDashboard(t *testing.T, scraped string) {
	t.Helper()
	run := scrapeFamilies(t, scraped)
	other := notInRun(t)
	registered := registeredMetricNames(t, "../..")
	for _, p := range readDashboard(t) {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no targets", p.Title)
		}
		for _, tg := range p.Targets {
			sels, err := panelSelectors(tg.Expr)
			if err != nil {
				t.Errorf("dashboard panel %q: %q does not parse: %v", p.Title, tg.Expr, err)
				continue
			}
			if len(sels) == 0 {
				t.Errorf("dashboard panel %q: %q selects no metric", p.Title, tg.Expr)
			}
			for _, sel := range sels {
				mf := family(run, sel.name)
				if mf == nil {
					if mf = family(other, sel.name); mf != nil {
						t.Logf("dashboard panel %q: %s checked against its role's registry (not run by crowdlog run)", p.Title, sel.name)
					}
				}
				if mf == nil {
					// a per-partition gauge of a role not run here has no
					// series before its first fetch: registered in the code
					// is enough when the panel selects no label value
					if file, ok := registered[sel.name]; ok && len(sel.equals) == 0 {
						t.Logf("dashboard panel %q: %s registered in %s (no series without partitions)", p.Title, sel.name, file)
						continue
					}
					t.Errorf("dashboard panel %q plots %s, which no role exports", p.Title, sel.name)
					continue
				}
				for l, v := range sel.equals {
					if l == "le" || v == "" {
						continue
					}
					if !hasLabel(mf, l, v) {
						t.Errorf("dashboard panel %q selects %s{%s=%q}, but no series of %s has that label value", p.Title, sel.name, l, v, mf.GetName())
					}
				}
			}
		}
	}
}

// TestDashboardPanels (no run needed): every panel expression parses, and
// a title that names several series ("in / forwarded", "(p50, p95)")
// plots at least as many.
func TestDashboardPanels(t *testing.T) {
	for _, p := range readDashboard(t) {
		if len(strings.Fields(p.Description)) < 8 {
			t.Errorf("dashboard panel %q has no description an operator can act on (%q): say what it plots and what a bad value means", p.Title, p.Description)
		}
		named := 1
		if n := strings.Count(p.Title, " / ") + 1; n > named {
			named = n
		}
		if strings.Contains(p.Title, "(p50, p95") {
			named = max(named, 2)
		}
		if len(p.Targets) < named {
			t.Errorf("dashboard panel %q names %d series but plots %d", p.Title, named, len(p.Targets))
		}
		for _, tg := range p.Targets {
			if _, err := panelSelectors(tg.Expr); err != nil {
				t.Errorf("dashboard panel %q: %q does not parse: %v", p.Title, tg.Expr, err)
			}
		}
	}
}

// TestDashboardLabelValues: the label values the dashboard selects on the
// roles that `crowdlog run` does not run exist in their registries (the
// run's scrape checks the others: TestMetricsMatchSummary).
func TestDashboardLabelValues(t *testing.T) {
	other := notInRun(t)
	for _, want := range []struct{ name, label, value string }{
		{"crowdlog_coordinator_refused_total", "reason", coordinator.RefusedSignature},
		{"crowdlog_issuer_refused_total", "reason", issuer.ReasonBudget},
		{"crowdlog_prio3_rejected_total", "reason", aggprio3.ReasonTokenSpent},
		{"crowdlog_prio3_rejected_total", "reason", "helper_" + aggprio3.ReasonTokenMissing},
		{"crowdlog_aggregator_pipeline_reports_total", "outcome", aggregator.PipelineOutcomeAdmitted},
	} {
		mf := family(other, want.name)
		if mf == nil || !hasLabel(mf, want.label, want.value) {
			t.Errorf("no %s{%s=%q}", want.name, want.label, want.value)
		}
	}
	// every label="value" a panel selects on those roles' metrics
	for _, p := range readDashboard(t) {
		for _, tg := range p.Targets {
			sels, err := panelSelectors(tg.Expr)
			if err != nil {
				continue // TestDashboardPanels reports it
			}
			for _, sel := range sels {
				mf := family(other, sel.name)
				if mf == nil {
					continue
				}
				for l, v := range sel.equals {
					if l != "le" && v != "" && !hasLabel(mf, l, v) {
						t.Errorf("dashboard panel %q selects %s{%s=%q}, but no series of %s has that label value", p.Title, sel.name, l, v, mf.GetName())
					}
				}
			}
		}
	}
}

// metricConstructors are the calls whose first string argument is a
// metric name (infra/metrics helpers, infra/metrics/hist, prometheus.NewDesc).
var metricConstructors = map[string]bool{"CounterFunc": true, "GaugeFunc": true, "CounterMapFunc": true, "GaugeMapFunc": true,
	"NewHistogram": true, "NewDesc": true}

// registeredMetricNames reads every non-test Go file of the module (from
// root) and returns the crowdlog_ metric names it registers, with the
// file that names each: the first string literal argument of a
// metricConstructors call, and the Name field of a prometheus *Opts
// literal (CounterOpts, GaugeOpts, HistogramOpts, ...).
func registeredMetricNames(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	fset := token.NewFileSet()
	add := func(e ast.Expr, file string) bool {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return false
		}
		name, err := strconv.Unquote(lit.Value)
		if err == nil && strings.HasPrefix(name, "crowdlog_") {
			out[name] = file
		}
		return true
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := goparser.ParseFile(fset, path, nil, goparser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				var fn string
				switch f := n.Fun.(type) {
				case *ast.SelectorExpr:
					fn = f.Sel.Name
				case *ast.Ident:
					fn = f.Name
				}
				if metricConstructors[fn] {
					for _, a := range n.Args {
						if add(a, rel) {
							break
						}
					}
				}
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
					return true
				}
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
							add(kv.Value, rel)
						}
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDashboardCoversMetrics (no run needed): every crowdlog_ metric the
// code registers (registeredMetricNames) is plotted by at least one panel
// of infra/deploy/grafana-dashboard.json, a histogram by its _bucket,
// _sum or _count series.
func TestDashboardCoversMetrics(t *testing.T) {
	plotted := map[string]bool{}
	for _, p := range readDashboard(t) {
		for _, tg := range p.Targets {
			sels, err := panelSelectors(tg.Expr)
			if err != nil {
				continue // TestDashboardPanels reports it
			}
			for _, sel := range sels {
				plotted[sel.name] = true
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if base, ok := strings.CutSuffix(sel.name, suf); ok {
						plotted[base] = true
					}
				}
			}
		}
	}
	names := registeredMetricNames(t, "../..")
	// the scan must see the metrics of every layer, or it proves nothing
	for _, known := range []string{"crowdlog_relay_kafka_refused_total", "crowdlog_prio3_uploads_skipped_total",
		"crowdlog_aggregator_dropped_total", "crowdlog_build_info", "crowdlog_ready_check", "crowdlog_ingest_oprf_round_trip_seconds"} {
		if _, ok := names[known]; !ok {
			t.Errorf("the source scan found no %s: registeredMetricNames misses a way metrics are registered", known)
		}
	}
	for name, file := range names {
		if !plotted[name] {
			t.Errorf("%s (registered in %s) is on no panel of infra/deploy/grafana-dashboard.json: add a panel with a title and a description an operator can act on", name, file)
		}
	}
	t.Logf("%d registered crowdlog_ metrics, all on the dashboard", len(names))
}
