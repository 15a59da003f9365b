package runner

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest/keywords"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/report"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// TestPDDReportAndExport: two real `crowdlog pdd` runs into one ClickHouse
// — Prio3 mode (campaign p3, exact shares, 60 users, 5 days, L = 300, a
// minimum batch size above some days' clients) and groups mode (campaign
// groups, 60 users, 3 days, ε = 1, max count 3) — then `crowdlog report`
// and the Prio3 run's export, compared with counts made from the raw log
// (tests/truth):
//
//   - the days whose clients active in the raw log are below the minimum
//     batch are exactly the withheld days (below_min_batch) of the report's
//     table and of the export, the others are released;
//   - the report's top keywords are the raw log's top keywords summed over
//     the released days, and its daily counts equal the raw log's clipped,
//     L1-bounded counts; so does every export line, zeros included;
//   - a third run, noisy Prio3 (campaign p3b, 3 days), finds each day's
//     budget of dataset default spent by the groups campaign: it ends with
//     an error naming the 3 refused days, its export is 3 withheld lines
//     (budget), and so are its days in the report;
//   - the HTML holds the campaigns' count and confidence plots, one
//     withheld row per withheld day, and the groups campaign's noise band
//     (one draw of Lap(3/1): ± 3·ln 20 = ± 9.0).
func TestPDDReportAndExport(t *testing.T) {
	if testing.Short() {
		t.Skip("two PDD replays: make test runs it, -short does not")
	}
	needClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ch := startClickHouse(ctx, t, dir)
	defer ch.Stop()

	const users, days, length, bits = 60, 5, 300, 2
	listPath := filepath.Join(dir, "keywords.txt")
	words := keywords.Default().Words[:length]
	if err := os.WriteFile(listPath, []byte(strings.Join(words, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// independent counts from the raw log
	dc, err := truth.KeywordClients(bundled, users, listPath, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var logDays []string
	for d := range dc.Active {
		logDays = append(logDays, d)
	}
	sort.Strings(logDays)
	if len(logDays) < days {
		t.Fatalf("%d days in the log", len(logDays))
	}
	logDays = logDays[:days]
	// the minimum batch: the median day's clients, so that some days fall below
	var active []int
	for _, d := range logDays {
		active = append(active, len(dc.Active[d]))
	}
	sorted := append([]int(nil), active...)
	sort.Ints(sorted)
	minBatch := sorted[len(sorted)/2]
	wantWithheld := map[string]bool{}
	for i, d := range logDays {
		if active[i] < minBatch {
			wantWithheld[d] = true
		}
	}
	if len(wantWithheld) == 0 || len(wantWithheld) == days {
		t.Fatalf("clients per day %v: no split at the minimum batch %d", active, minBatch)
	}
	want := dc.ClippedL1(1<<bits-1, p3.DefaultL1, words, nil)

	run := func(cfg PDDConfig) {
		t.Helper()
		cfg.Input, cfg.Keywords, cfg.ClickHouse, cfg.Partitions = bundled, listPath, ch.TCPAddr, 4
		cfg.StateDir = filepath.Join(dir, cfg.Campaign)
		if _, err := RunPDD(ctx, cfg); err != nil {
			t.Fatalf("campaign %s: %v", cfg.Campaign, err)
		}
	}
	export := filepath.Join(dir, "p3.tsv")
	run(PDDConfig{Campaign: "p3", Mode: ModePrio3, MaxUsers: users, MaxDays: days, Bits: bits, ExactShares: true,
		MinBatchSize: minBatch, Export: export})
	run(PDDConfig{Campaign: "groups", MaxUsers: users, MaxDays: 3, GroupSize: 10, Delay: 1, Online: "all", Epsilon: 1, MaxCount: 3})
	// a noisy Prio3 campaign on the same days: the groups campaign spent
	// 300·ε of dataset default on each, Prio3's budget is ε = 1 per day
	budgetExport := filepath.Join(dir, "p3b.tsv")
	cfg := PDDConfig{Campaign: "p3b", Mode: ModePrio3, MaxUsers: users, MaxDays: 3, Bits: bits, Epsilon: 1, MinBatchSize: 1,
		Export: budgetExport, Input: bundled, Keywords: listPath, ClickHouse: ch.TCPAddr, Partitions: 4, StateDir: filepath.Join(dir, "p3b")}
	if _, err := RunPDD(ctx, cfg); err == nil || !strings.Contains(err.Error(), "3 days refused over the privacy budget") {
		t.Fatalf("campaign p3b over the budget: %v", err)
	}
	if b, err := os.ReadFile(budgetExport); err != nil || strings.Count(string(b), "\twithheld\tbudget\n") != 3 || strings.Count(string(b), "\n") != 4 {
		t.Fatalf("export of p3b (%v):\n%s", err, b)
	}

	data, err := report.Load(ctx, report.Options{Addr: ch.TCPAddr, Keywords: []string{"weather"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(data.PDD) != 3 || data.PDD[0].Name != "groups" || data.PDD[1].Name != "p3" || data.PDD[2].Name != "p3b" {
		t.Fatalf("PDD campaigns %+v, want groups, p3 and p3b", data.PDD)
	}
	// every campaign's mode, ε, S or max_count and k, recorded by the release stages
	for i, want := range []release.PDDCampaign{
		{Campaign: "groups", Mode: release.PDDModeGroups, Epsilon: 1, Sensitivity: 3, K: 10, Params: fmt.Sprintf("max_count=3 keywords=%d", length)},
		{Campaign: "p3", Mode: release.PDDModePrio3, Sensitivity: p3.DefaultL1, K: uint64(minBatch), Params: fmt.Sprintf("kind=sumvec bits=%d l1=%d keywords=%d", bits, p3.DefaultL1, length)},
		{Campaign: "p3b", Mode: release.PDDModePrio3, Epsilon: 1, Sensitivity: p3.DefaultL1, K: 1, Params: fmt.Sprintf("kind=sumvec bits=%d l1=%d keywords=%d", bits, p3.DefaultL1, length)},
	} {
		if got := data.PDD[i].Configs; len(got) != 1 || got[0] != want || data.PDD[i].Mode != want.Mode {
			t.Errorf("campaign %s: mode %q, pdd_campaigns %+v; want %+v", want.Campaign, data.PDD[i].Mode, got, want)
		}
	}
	for i, d := range data.PDD[2].Days {
		if d.Released || d.Reason != release.WithheldBudget || d.Day.Format("2006-01-02") != logDays[i] {
			t.Errorf("p3b day %d: %+v, want %s withheld over the budget", i, d, logDays[i])
		}
	}
	if n := len(data.PDD[2].Days); n != 3 {
		t.Errorf("p3b: %d days, want 3", n)
	}
	c := data.PDD[1]
	var gotDays []string
	released := map[string]int{}
	for i, d := range c.Days {
		day := d.Day.Format("2006-01-02")
		gotDays = append(gotDays, day)
		if d.Released == wantWithheld[day] || (!d.Released && d.Reason != release.WithheldMinBatch) {
			t.Errorf("%s: released %v reason %q; %d clients active in the raw log, minimum batch %d", day, d.Released, d.Reason, len(dc.Active[day]), minBatch)
		}
		if d.Released {
			released[day] = i
		}
	}
	if strings.Join(gotDays, " ") != strings.Join(logDays, " ") {
		t.Fatalf("report days %v, want the log's %v", gotDays, logDays)
	}
	// the top keywords over the released days, ties by keyword
	totals := map[string]int{}
	for day := range released {
		for w, n := range want[day] {
			totals[w] += n
		}
	}
	var top []string
	for w, n := range totals {
		if n > 0 {
			top = append(top, w)
		}
	}
	sort.Slice(top, func(i, j int) bool {
		if totals[top[i]] != totals[top[j]] {
			return totals[top[i]] > totals[top[j]]
		}
		return top[i] < top[j]
	})
	top = top[:min(len(top), report.DefaultPDDTop)]
	if len(c.Keywords) != len(top)+1 || c.Keywords[len(top)].Keyword != "weather" || !c.Keywords[len(top)].Named {
		t.Fatalf("keywords %+v, want the top %v and the named weather", c.Keywords, top)
	}
	cells := 0
	for i, k := range c.Keywords {
		if i < len(top) && k.Keyword != top[i] {
			t.Errorf("top keyword %d: %s, the raw log's %s", i+1, k.Keyword, top[i])
		}
		for day, j := range released {
			if int(k.Counts[j]) != want[day][k.Keyword] {
				t.Errorf("%s %s: report %d, raw log %d", day, k.Keyword, k.Counts[j], want[day][k.Keyword])
			}
			cells++
		}
	}

	// the export: one line per withheld day, every keyword of each released day
	f, err := os.Open(export)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	if sc.Text() != release.PDDExportHeader {
		t.Fatalf("export header %q", sc.Text())
	}
	lines, withheldLines := map[string]int{}, map[string]bool{}
	for sc.Scan() {
		fl := strings.Split(sc.Text(), "\t")
		if len(fl) != 8 || fl[0] != "p3" {
			t.Fatalf("export line %q", sc.Text())
		}
		if fl[6] == "withheld" {
			if fl[7] != release.WithheldMinBatch || fl[2] != "" || fl[3] != "" {
				t.Fatalf("withheld line %q", sc.Text())
			}
			withheldLines[fl[1]] = true
			continue
		}
		n, err := strconv.Atoi(fl[3])
		if err != nil || fl[6] != "released" || n != want[fl[1]][fl[2]] {
			t.Fatalf("export line %q: the raw log has %d", sc.Text(), want[fl[1]][fl[2]])
		}
		lines[fl[1]]++
	}
	if fmt.Sprint(withheldLines) != fmt.Sprint(wantWithheld) {
		t.Fatalf("withheld lines %v, want %v", withheldLines, wantWithheld)
	}
	for day := range released {
		if lines[day] != length {
			t.Fatalf("%s: %d export lines, want one per keyword (%d)", day, lines[day], length)
		}
	}

	// the HTML
	out := filepath.Join(dir, "report.html")
	if err := report.WriteFile(out, data); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, s := range []string{`data-plot="pdd-0"`, `data-plot="pdd-confidence-0"`, `data-plot="pdd-1"`, `data-plot="pdd-confidence-1"`,
		"<h3>campaign p3</h3>", "<h3>campaign groups</h3>",
		fmt.Sprintf("Prio3 mode (two aggregators, one Laplace draw each per count); exact counts (ε = 0), S = %d", p3.DefaultL1), "± 9.0<br><span class=\"note\">1 × Lap(3), scale from the ledger</span>", "weather (named)"} {
		if !strings.Contains(html, s) {
			t.Errorf("the report lacks %q", s)
		}
	}
	for day := range wantWithheld {
		if !strings.Contains(html, `<tr class="withheld"><td>`+day+`</td><td>withheld</td><td title="`) {
			t.Errorf("the report's days table lacks the withheld day %s", day)
		}
	}
	if n := strings.Count(html, `<tr class="withheld">`); n != len(wantWithheld)+3 {
		t.Errorf("%d withheld rows, want %d below the minimum batch and 3 over the budget", n, len(wantWithheld))
	}
	if strings.Contains(html, "mode not recorded") {
		t.Error("the report says \"mode not recorded\" for a campaign of this run")
	}
	if n := strings.Count(html, "budget: the release would have passed the privacy budget"); n != 3 {
		t.Errorf("%d rows withheld over the budget, want 3", n)
	}
	t.Logf("p3: clients per day %v, minimum batch %d: %d days withheld, %d released; %d report cells and %d export lines equal the raw log",
		active, minBatch, len(wantWithheld), len(released), cells, len(released)*length)
}
