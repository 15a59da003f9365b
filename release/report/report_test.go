package report_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/clickhouse/chtest"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/report"
)

func TestMain(m *testing.M) { chtest.Main(m) }

// server returns the package's shared ClickHouse server (chtest).
func server(t testing.TB) *clickhouse.Server { return chtest.Server(t) }

func freshDB() string {
	return fmt.Sprintf("report_%d", time.Now().UnixNano())
}

// chromium returns the headless browser's path. Missing, it skips, unless
// CI=true, where it fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on $PATH: install it with `apt-get install -y chromium`"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip("skipping: " + msg)
	return ""
}

// dumpDOM renders path in headless Chromium and returns the DOM after
// parsing, as Chromium serializes it.
func dumpDOM(t *testing.T, browser, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	profile := t.TempDir()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+profile, "--dump-dom", "file://"+path)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("chromium --dump-dom did not finish within 90 s; stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v; stderr:\n%s", err, stderr.String())
	}
	if len(out) == 0 {
		t.Fatalf("chromium --dump-dom printed nothing; stderr:\n%s", stderr.String())
	}
	return string(out)
}

var (
	svgRE   = regexp.MustCompile(`(?s)<svg\b.*?</svg>`)
	tagRE   = regexp.MustCompile(`<[^>]*>`)
	spaceRE = regexp.MustCompile(`\s+`)
)

// visibleText is the text of dom outside its SVG plots, tags replaced by a
// space, entities decoded, runs of white space collapsed to one space.
func visibleText(dom string) string {
	s := svgRE.ReplaceAllString(dom, " ")
	s = tagRE.ReplaceAllString(s, " ")
	s = html.UnescapeString(s)
	return spaceRE.ReplaceAllString(s, " ")
}

func at(day int) time.Time { return time.Date(2026, 1, day, 12, 0, 0, 0, time.UTC) }

// madeUp is a made-up release: nothing here comes from a real log.
type madeUp struct {
	key   release.Key
	items []release.Item
	undec []release.Undecrypted
	spend *release.Spend
	when  time.Time
}

func items(key release.Key, names []string, counts [][2]uint64) []release.Item {
	out := make([]release.Item, len(names))
	for i, n := range names {
		out[i] = release.Item{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K, Item: n,
			Impressions: counts[i][0], Users: counts[i][1]}
	}
	return out
}

func TestReportInChromium(t *testing.T) {
	browser := chromium(t)
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := freshDB()
	w, err := release.Open(ctx, s.TCPAddr, db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	evil := `<b>bold</b> & "quoted" 'made-up'`
	a := release.Key{App: "query", Epoch: "2026-w01", Policy: "ft-u", K: 3}
	aNames := []string{"alpha pie recipe", "beta weather", "gamma tickets", "delta museum hours", evil,
		"epsilon bus map", "zeta garden tools", "eta chess rules", "theta ferry times", "iota lamp repair",
		"kappa below the cut", "lambda below the cut"}
	aCounts := [][2]uint64{{90, 30}, {75, 25}, {75, 20}, {60, 12}, {55, 11}, {40, 9}, {33, 8}, {21, 7}, {17, 5}, {12, 4}, {9, 3}, {5, 3}}
	b := release.Key{App: "query", Epoch: "2026-w02", Policy: "ft-u", K: 3}
	c := release.Key{App: "query", Epoch: "2026-w01", Policy: "dp-u", K: 10}
	d := release.Key{App: "url", Epoch: "2026-w01", Policy: "dp-a", K: 8}
	rels := []madeUp{
		{key: a, items: items(a, aNames, aCounts), when: at(1), undec: []release.Undecrypted{
			{Reports: 2, Users: 2, Tags: 5}, {Reports: 1, Users: 1, Tags: 7}, {Reports: 2, Users: 1, Tags: 3}}},
		{key: b, items: items(b, []string{"mu kite shop", "nu train strike"}, [][2]uint64{{14, 6}, {8, 4}}), when: at(8),
			undec: []release.Undecrypted{{Reports: 1, Users: 1, Tags: 4}}},
		{key: c, items: items(c, []string{"xi noisy count"}, [][2]uint64{{131, 41}}), when: at(2),
			spend: &release.Spend{Dataset: "made-up", Epsilon: 1.5, Delta: 1e-6, Params: "d=1 made-up"}},
		{key: d, items: items(d, []string{"example.org/omicron"}, [][2]uint64{{44, 0}}), when: at(3),
			spend: &release.Spend{Dataset: "made-up", Epsilon: 0.25, Delta: 0, Params: "d=2 made-up"}},
	}
	budget := release.Budget{Epsilon: 3}
	for _, r := range rels {
		for i := range r.undec {
			r.undec[i].App, r.undec[i].Epoch, r.undec[i].Policy, r.undec[i].K = r.key.App, r.key.Epoch, r.key.Policy, r.key.K
		}
		if r.spend == nil {
			err = w.WriteKeyedRelease(ctx, r.key, r.items, r.undec, r.when)
		} else {
			sp := *r.spend
			sp.App, sp.Epoch, sp.Policy, sp.K = r.key.App, r.key.Epoch, r.key.Policy, r.key.K
			err = w.WriteSpendingRelease(ctx, r.key, r.items, r.undec, r.when, sp, budget)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// An interrupted release: rows without a releases row must not show.
	conn, err := chgo.Open(&chgo.Options{Addr: []string{s.TCPAddr}, Protocol: chgo.Native,
		Auth: chgo.Auth{Database: db, Username: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO released_items (app, epoch, policy, k, item, variant, impressions, users, released_at)")
	if err != nil {
		t.Fatal(err)
	}
	if err := batch.Append("query", "2026-w09-partial", "ft-u", uint32(3), "pi partial only", "", uint64(999), uint64(99), at(9)); err != nil {
		t.Fatal(err)
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}

	data, err := report.Load(ctx, report.Options{Addr: s.TCPAddr, Database: db, Top: 10, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "report.html")
	if err := report.WriteFile(out, data); err != nil {
		t.Fatal(err)
	}
	dom := dumpDOM(t, browser, out)
	text := visibleText(dom)

	// Expected, from the made-up rows alone. a and b (query ft-u k=3,
	// epochs 2026-w01 and 2026-w02) are one series with two epochs: a trend.
	wantPlots := []string{"share", "ledger", "trend-"}
	for _, r := range rels {
		type row struct {
			item       string
			imp, users uint64
		}
		var rows []row
		for _, it := range r.items {
			rows = append(rows, row{it.Item, it.Impressions, it.Users})
		}
		sort.Slice(rows, func(i, j int) bool {
			if rows[i].imp != rows[j].imp {
				return rows[i].imp > rows[j].imp
			}
			return rows[i].item < rows[j].item
		})
		title := fmt.Sprintf("%s · %s · %s · k=%d", r.key.App, r.key.Epoch, r.key.Policy, r.key.K)
		if !strings.Contains(text, title) {
			t.Errorf("report lacks the section %q", title)
		}
		for i, row := range rows {
			line := fmt.Sprintf("%d %s %d %d", i+1, row.item, row.imp, row.users)
			if i < 10 && !strings.Contains(text, line) {
				t.Errorf("%s: report lacks top artifact row %q", title, line)
			}
			if i >= 10 && strings.Contains(text, row.item) {
				t.Errorf("%s: artifact %q (rank %d) shown though only the top 10 are asked for", title, row.item, i+1)
			}
		}
		var imp, still, tags uint64
		for _, it := range r.items {
			imp += it.Impressions
		}
		for _, u := range r.undec {
			still += u.Reports * u.Tags
			tags += u.Tags
		}
		share := "no summary"
		if len(r.undec) > 0 {
			share = fmt.Sprintf("%.1f%%", 100*float64(imp)/float64(imp+still))
		}
		summary := fmt.Sprintf("%s %s %s %d %d %d %d %d %s", r.key.App, r.key.Epoch, r.key.Policy, r.key.K, len(r.items), imp, tags, still, share)
		if !strings.Contains(text, summary) {
			t.Errorf("report lacks the release row %q", summary)
		}
		wantPlots = append(wantPlots, "top-")
		if len(r.undec) > 0 {
			wantPlots = append(wantPlots, "undecrypted-")
			if line := fmt.Sprintf("%d artifacts with %d reports stayed encrypted", tags, still); !strings.Contains(text, line) {
				t.Errorf("report lacks %q", line)
			}
		}
	}
	// Ledger: one (dataset, epoch) here.
	var eps, delta float64
	spends := 0
	for _, r := range rels {
		if r.spend != nil {
			eps += r.spend.Epsilon
			delta += r.spend.Delta
			spends++
		}
	}
	ledger := fmt.Sprintf("made-up 2026-w01 %d %.4g %.4g %.4g %.4g no limit —", spends, eps, budget.Epsilon, budget.Epsilon-eps, delta)
	if !strings.Contains(text, ledger) {
		t.Errorf("report lacks the ledger total %q", ledger)
	}
	if !strings.Contains(text, "d=1 made-up") {
		t.Error("report lacks the ledger row's parameters")
	}

	// Only completed releases.
	if strings.Contains(dom, "pi partial only") || strings.Contains(dom, "2026-w09-partial") {
		t.Error("report shows rows of a release without a releases row")
	}
	// Escaped: the made-up artifact's markup is text, never elements.
	if !strings.Contains(text, evil) {
		t.Errorf("report lacks the artifact %q as text", evil)
	}
	if strings.Contains(dom, "<b>") {
		t.Error("an artifact's markup became an element: a string from the database is not escaped")
	}
	// Every plot is an inline SVG.
	figures := regexp.MustCompile(`(?s)<figure class="plot" data-plot="([a-z]+-?)\d*">\s*<svg\b`).FindAllStringSubmatch(dom, -1)
	var got []string
	for _, f := range figures {
		got = append(got, f[1])
	}
	sort.Strings(got)
	sort.Strings(wantPlots)
	if strings.Join(got, ",") != strings.Join(wantPlots, ",") {
		t.Errorf("plots with an <svg>: got %v, want %v", got, wantPlots)
	}
	if n := strings.Count(dom, "<svg"); n != len(wantPlots) {
		t.Errorf("%d <svg> elements, want %d", n, len(wantPlots))
	}
	for _, ext := range []string{"http://", "https://", "src=", "<link", "<script"} {
		for _, m := range regexp.MustCompile(regexp.QuoteMeta(ext)+`[^"' >]*`).FindAllString(dom, -1) {
			if !strings.HasPrefix(m, "http://www.w3.org/") {
				t.Errorf("report refers to something outside the page: %q", m)
			}
		}
	}
}

// TestReportAsAnalyst runs Load as the read-only analyst of `crowdlog
// clickhouse init` (release.Init), who may read only the analyst database:
// the report reads the published copies there and shows the same
// releases and ledger as user default's report (a release written before
// init is backfilled, one after it is published as it completes); the
// analyst is refused on another release database.
func TestReportAsAnalyst(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := freshDB()
	w, err := release.Open(ctx, s.TCPAddr, db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a := release.Key{App: "query", Epoch: "2026-w01", Policy: "dp-u", K: 3}
	sp := release.Spend{Dataset: "made-up", Epoch: a.Epoch, App: a.App, Policy: a.Policy, K: a.K, Epsilon: 1, Params: "made-up"}
	if err := w.WriteSpendingRelease(ctx, a, items(a, []string{"alpha made-up"}, [][2]uint64{{12, 5}}), nil, at(1), sp, release.Budget{}); err != nil {
		t.Fatal(err)
	}
	analyst := release.Analyst{Name: "crowdlog_report_analyst", Password: "report-test-password"}
	res, err := release.Init(ctx, release.InitOptions{Addr: s.TCPAddr, AllowPasswordlessDefault: true, Database: db, Analyst: analyst, UsersDir: clickhouse.UsersDir(s.Dir)})
	if err != nil {
		t.Fatal(err)
	}
	// after init: one more release, published as it completes
	b := release.Key{App: "query", Epoch: "2026-w02", Policy: "ft-u", K: 3}
	if err := w.WriteKeyedRelease(ctx, b, items(b, []string{"beta made-up"}, [][2]uint64{{7, 4}}), nil, at(8)); err != nil {
		t.Fatal(err)
	}
	asDefault, err := report.Load(ctx, report.Options{Addr: s.TCPAddr, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	asAnalyst, err := report.Load(ctx, report.Options{Addr: s.TCPAddr, Database: db, User: analyst.Name, Password: analyst.Password})
	if err != nil {
		t.Fatal(err)
	}
	for who, d := range map[string]*report.Data{"default": asDefault, "analyst": asAnalyst} {
		if d.Database != res.AnalystDatabase {
			t.Errorf("%s's report read database %s, want the analyst database %s", who, d.Database, res.AnalystDatabase)
		}
		var keys []string
		for _, r := range d.Releases {
			keys = append(keys, r.Key.String())
		}
		if strings.Join(keys, " ") != a.String()+" "+b.String() || len(d.Ledger) != 1 || d.Ledger[0].Params != "made-up" {
			t.Errorf("%s's report: releases %v, ledger %+v", who, keys, d.Ledger)
		}
	}
	_, err = report.Load(ctx, report.Options{Addr: s.TCPAddr, Database: freshDB(), User: analyst.Name, Password: analyst.Password})
	if err == nil {
		t.Error("the analyst loaded a report of another release database")
	}
}

func TestNoSuchDatabase(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := report.Load(ctx, report.Options{Addr: s.TCPAddr, Database: "no_such_db_" + fmt.Sprint(time.Now().UnixNano())})
	if !errors.Is(err, report.ErrNoDatabase) {
		t.Fatalf("Load on a missing database: %v, want ErrNoDatabase", err)
	}
	if !strings.Contains(err.Error(), "--database") {
		t.Errorf("error %q does not say what to do", err)
	}
}

func TestEmptyDatabase(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A database with the tables and no release.
	db := freshDB()
	w, err := release.Open(ctx, s.TCPAddr, db)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	_, err = report.Load(ctx, report.Options{Addr: s.TCPAddr, Database: db})
	if !errors.Is(err, report.ErrNoRelease) || !strings.Contains(err.Error(), "no completed release yet") {
		t.Fatalf("Load on an empty crowdlog database: %v, want ErrNoRelease", err)
	}

	// A database without crowdlog's tables.
	conn, err := chgo.Open(&chgo.Options{Addr: []string{s.TCPAddr}, Protocol: chgo.Native, Auth: chgo.Auth{Username: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bare := freshDB()
	if err := conn.Exec(ctx, "CREATE DATABASE "+bare); err != nil {
		t.Fatal(err)
	}
	_, err = report.Load(ctx, report.Options{Addr: s.TCPAddr, Database: bare})
	if !errors.Is(err, report.ErrNoRelease) {
		t.Fatalf("Load on a database without tables: %v, want ErrNoRelease", err)
	}
}

func TestBadOptions(t *testing.T) {
	ctx := context.Background()
	if _, err := report.Load(ctx, report.Options{}); err == nil || !strings.Contains(err.Error(), "--clickhouse") {
		t.Errorf("Load without an address: %v, want an error naming --clickhouse", err)
	}
	if _, err := report.Load(ctx, report.Options{Addr: "127.0.0.1:1", Database: "x; DROP"}); err == nil || !strings.Contains(err.Error(), "identifier") {
		t.Errorf("Load with a bad database name: %v, want an error about the identifier", err)
	}
}

// BenchmarkLoadRender measures Load and Render of a made-up database of
// 10 releases of 20,000 items each (each with 40 undecrypted summary lines)
// and 10 ledger rows: go test -run - -bench LoadRender ./release/report/
func BenchmarkLoadRender(b *testing.B) {
	s := server(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db := fmt.Sprintf("report_bench_%d", time.Now().UnixNano())
	w, err := release.Open(ctx, s.TCPAddr, db)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	const keys, perKey = 10, 20000
	for k := range keys {
		key := release.Key{App: "query", Epoch: fmt.Sprintf("2026-w%02d", k+1), Policy: "dp-u", K: 10}
		its := make([]release.Item, perKey)
		for i := range its {
			its[i] = release.Item{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K,
				Item: fmt.Sprintf("made-up query %d", i), Impressions: uint64(perKey - i), Users: uint64(1 + (perKey-i)/3)}
		}
		var undec []release.Undecrypted
		for r := range 40 {
			undec = append(undec, release.Undecrypted{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K,
				Reports: uint64(r + 1), Users: 1, Tags: uint64(1000 / (r + 1))})
		}
		sp := release.Spend{Dataset: "made-up", Epoch: key.Epoch, App: key.App, Policy: key.Policy, K: key.K, Epsilon: 1, Params: "made-up"}
		if err := w.WriteSpendingRelease(ctx, key, its, undec, at(k+1), sp, release.Budget{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		d, err := report.Load(ctx, report.Options{Addr: s.TCPAddr, Database: db})
		if err != nil {
			b.Fatal(err)
		}
		var buf strings.Builder
		if err := report.Render(&buf, d); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(buf.Len()), "bytes/report")
	}
}

// trendSection returns the text of the trend section of a rendered page
// and its raw HTML.
func trendSection(t *testing.T, page string) (text, raw string) {
	t.Helper()
	i := strings.Index(page, `<section id="trends">`)
	if i < 0 {
		t.Fatal("report has no trend section")
	}
	j := strings.Index(page[i:], "</section>")
	if j < 0 {
		t.Fatal("trend section not closed")
	}
	raw = page[i : i+j]
	return visibleText(raw), raw
}

// TestReportTrend writes a made-up weekly series (query ft-u k=3, three
// epochs START-168h written out of time order, artifacts missing from some
// weeks, one with two variants in a week), the same series' release of the
// whole log as epoch "all", another series with one epoch and an
// interrupted weekly release, and checks the trend section against the
// top artifacts computed here from the rows written: the TrendTop
// artifacts with the most impressions summed over the weeks (ties by
// artifact), their impressions per week in time order, "—" where not
// released, and nothing of "all", of the one-epoch series or of the
// interrupted release.
func TestReportTrend(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := freshDB()
	w, err := release.Open(ctx, s.TCPAddr, db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	evil := `<b>o'brien</b> \ & "made-up"`
	// weeks in time order; written below in another order
	weeks := []string{"20060223T000000Z-168h", "20060302T000000Z-168h", "20060309T000000Z-168h"}
	type row struct {
		item, variant string
		imp           [3]uint64 // per week; 0 = no row that week
	}
	rows := []row{
		{"alpha made-up", "", [3]uint64{40, 35, 50}},
		{"beta made-up", "", [3]uint64{0, 60, 20}},   // not released in week 1
		{"gamma made-up", "", [3]uint64{30, 0, 0}},   // only week 1
		{"delta made-up", "", [3]uint64{10, 10, 10}}, // with its variant: 35
		{"delta made-up", "Delta Made-Up", [3]uint64{0, 5, 0}},
		{evil, "", [3]uint64{12, 0, 14}},
		{"epsilon made-up", "", [3]uint64{9, 9, 9}},
		{"zeta made-up", "", [3]uint64{0, 0, 25}},
		{"eta made-up", "", [3]uint64{8, 7, 6}},
		{"theta made-up", "", [3]uint64{7, 7, 7}}, // 21: ties eta, cut by name
		{"iota made-up", "", [3]uint64{3, 3, 3}},  // 9: below the cut
		{"kappa made-up", "", [3]uint64{0, 4, 0}}, // 4: below the cut
	}
	series := release.Key{App: "query", Policy: "ft-u", K: 3}
	for _, wi := range []int{1, 2, 0} {
		key := series
		key.Epoch = weeks[wi]
		var its []release.Item
		for _, r := range rows {
			if r.imp[wi] > 0 {
				its = append(its, release.Item{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K,
					Item: r.item, Variant: r.variant, Impressions: r.imp[wi], Users: 3})
			}
		}
		if err := w.WriteKeyedRelease(ctx, key, its, nil, at(10+wi)); err != nil {
			t.Fatal(err)
		}
	}
	// the whole log as one epoch, same (app, policy, k): a series of its own
	all := series
	all.Epoch = "all"
	if err := w.WriteKeyedRelease(ctx, all, items(all, []string{"omega only in all", "iota made-up"}, [][2]uint64{{900, 90}, {500, 50}}), nil, at(20)); err != nil {
		t.Fatal(err)
	}
	// one epoch only
	single := release.Key{App: "query", Epoch: "all", Policy: "ft-u", K: 5}
	if err := w.WriteKeyedRelease(ctx, single, items(single, []string{"pi single epoch"}, [][2]uint64{{700, 70}}), nil, at(21)); err != nil {
		t.Fatal(err)
	}
	// an interrupted weekly release: rows without a releases row
	conn, err := chgo.Open(&chgo.Options{Addr: []string{s.TCPAddr}, Protocol: chgo.Native,
		Auth: chgo.Auth{Database: db, Username: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO released_items (app, epoch, policy, k, item, variant, impressions, users, released_at)")
	if err != nil {
		t.Fatal(err)
	}
	if err := batch.Append("query", "20060316T000000Z-168h", "ft-u", uint32(3), "rho interrupted", "", uint64(999), uint64(99), at(22)); err != nil {
		t.Fatal(err)
	}
	if err := batch.Append("query", "20060316T000000Z-168h", "ft-u", uint32(3), "kappa made-up", "", uint64(999), uint64(99), at(22)); err != nil {
		t.Fatal(err)
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}

	// Expected, from the rows above alone.
	const top = 8
	type want struct {
		item  string
		per   [3]uint64
		rel   [3]bool
		total uint64
	}
	byItem := map[string]*want{}
	var order []string
	for _, r := range rows {
		x := byItem[r.item]
		if x == nil {
			x = &want{item: r.item}
			byItem[r.item] = x
			order = append(order, r.item)
		}
		for wi, n := range r.imp {
			if n > 0 {
				x.per[wi] += n
				x.rel[wi] = true
				x.total += n
			}
		}
	}
	var wants []want
	for _, it := range order {
		wants = append(wants, *byItem[it])
	}
	sort.Slice(wants, func(i, j int) bool {
		if wants[i].total != wants[j].total {
			return wants[i].total > wants[j].total
		}
		return wants[i].item < wants[j].item
	})
	cut := wants[top:]
	wants = wants[:top]

	data, err := report.Load(ctx, report.Options{Addr: s.TCPAddr, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	if len(data.Trends) != 1 {
		t.Fatalf("%d trends, want 1 (the weekly series): %+v", len(data.Trends), data.Trends)
	}
	tr := data.Trends[0]
	if tr.App != "query" || tr.Policy != "ft-u" || tr.K != 3 || tr.Period != "168h" || strings.Join(tr.Epochs, " ") != strings.Join(weeks, " ") {
		t.Errorf("trend %s %s k=%d period %q epochs %v, want query ft-u k=3, 168h, %v", tr.App, tr.Policy, tr.K, tr.Period, tr.Epochs, weeks)
	}
	if len(tr.Artifacts) != top {
		t.Fatalf("trend has %d artifacts, want %d", len(tr.Artifacts), top)
	}
	for i, a := range tr.Artifacts {
		x := wants[i]
		if a.Item != x.item || a.Total != x.total || fmt.Sprint(a.Impressions) != fmt.Sprint(x.per[:]) || fmt.Sprint(a.Released) != fmt.Sprint(x.rel[:]) {
			t.Errorf("trend artifact %d: %q total %d %v %v, want %q total %d %v %v", i+1, a.Item, a.Total, a.Impressions, a.Released,
				x.item, x.total, x.per, x.rel)
		}
	}

	var buf strings.Builder
	if err := report.Render(&buf, data); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	text, raw := trendSection(t, page)
	if !strings.Contains(text, "Top artifacts across epochs") || !strings.Contains(text, "query · ft-u · k=3 · 168h epochs") {
		t.Errorf("trend section lacks its titles: %s", text)
	}
	if !strings.Contains(text, "rank artifact 2006-02-23 2006-03-02 2006-03-09 total") {
		t.Errorf("trend table's epochs are not in time order: %s", text)
	}
	for i, x := range wants {
		cells := []string{fmt.Sprint(i + 1), x.item}
		for wi := range weeks {
			if x.rel[wi] {
				cells = append(cells, fmt.Sprint(x.per[wi]))
			} else {
				cells = append(cells, "—")
			}
		}
		cells = append(cells, fmt.Sprint(x.total))
		if line := strings.Join(cells, " "); !strings.Contains(text, line) {
			t.Errorf("trend section lacks the row %q", line)
		}
	}
	if !strings.Contains(text, "fewer than k = 3 distinct users sent it that epoch") {
		t.Error("trend section does not say what a missing artifact means")
	}
	for _, x := range cut {
		if strings.Contains(text, x.item) {
			t.Errorf("trend section shows %q (total %d), below the top %d", x.item, x.total, top)
		}
	}
	for _, s := range []string{"omega only in all", "pi single epoch", "rho interrupted", "20060316T000000Z-168h", "k=5"} {
		if strings.Contains(raw, s) {
			t.Errorf("trend section shows %q, which is not in the weekly series' completed releases", s)
		}
	}
	if n := strings.Count(raw, `data-plot="trend-`); n != 1 || !regexp.MustCompile(`data-plot="trend-0">\s*<svg\b`).MatchString(raw) {
		t.Errorf("trend section has %d trend plots, want one inline <svg>", n)
	}
	if strings.Contains(page, "<b>") || !strings.Contains(text, evil) {
		t.Error("an artifact of the trend is not escaped as text")
	}
}

// TestReportTrendSingleEpoch: with one epoch per series (the whole log as
// "all", and a day under another k) there is no trend, and the section
// says why and how to get one.
func TestReportTrendSingleEpoch(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := freshDB()
	w, err := release.Open(ctx, s.TCPAddr, db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i, key := range []release.Key{
		{App: "query", Epoch: "all", Policy: "ft-u", K: 5},
		{App: "query", Epoch: "all", Policy: "ft-u", K: 3},
		{App: "query", Epoch: "2006-03-01", Policy: "ft-u", K: 3}, // a day: another period than "all"
	} {
		if err := w.WriteKeyedRelease(ctx, key, items(key, []string{"alpha made-up"}, [][2]uint64{{12, 5}}), nil, at(1+i)); err != nil {
			t.Fatal(err)
		}
	}
	data, err := report.Load(ctx, report.Options{Addr: s.TCPAddr, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	if len(data.Trends) != 0 {
		t.Errorf("trends %+v, want none: every series has one epoch", data.Trends)
	}
	var buf strings.Builder
	if err := report.Render(&buf, data); err != nil {
		t.Fatal(err)
	}
	text, raw := trendSection(t, buf.String())
	if !strings.Contains(text, "No trend to show: every release series (app, policy, k) here has one epoch only") ||
		!strings.Contains(text, "crowdlog run --epoch-length 168h") {
		t.Errorf("trend section does not say why there is no trend: %s", text)
	}
	if strings.Contains(raw, "<svg") || strings.Contains(raw, "<table") {
		t.Error("trend section draws a plot or a table without a trend")
	}
}
