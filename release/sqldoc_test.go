package release

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// sqlBlock is one ```sql block of a page of docs/ (file, the line of its
// first statement), the name written after "sql" on its fence line, the
// sql-test marker of the line before the fence, if any (docsql_test.go),
// and the ```tsv block that follows it, if any: the rows it returns on the
// sample release (docs/sql.md).
type sqlBlock struct {
	file     string
	line     int
	name     string
	marker   string
	sql      string
	expected *string
}

// sqlTestMarker starts the HTML comment that may stand on the line before
// a sql fence: <!-- sql-test: ... --> (docsql_test.go).
const sqlTestMarker = "<!-- sql-test:"

// docBlocks returns the sql blocks of a Markdown text (file names it in
// errors), each with the tsv block that comes next before any other sql
// block.
func docBlocks(t *testing.T, file, md string) []sqlBlock {
	t.Helper()
	var out []sqlBlock
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		info, ok := strings.CutPrefix(strings.TrimLeft(lines[i], " "), "```")
		if !ok || info == "" {
			continue
		}
		marker := ""
		if i > 0 {
			if m, ok := strings.CutPrefix(strings.TrimSpace(lines[i-1]), sqlTestMarker); ok {
				marker = strings.TrimSpace(strings.TrimSuffix(m, "-->"))
			}
		}
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: unclosed ``` block", file, start)
		}
		body := strings.Join(lines[start:i], "\n")
		lang, name, _ := strings.Cut(info, " ")
		switch lang {
		case "sql":
			out = append(out, sqlBlock{file: file, line: start, name: strings.TrimSpace(name), marker: marker, sql: body})
		case "tsv":
			if len(out) == 0 || out[len(out)-1].expected != nil {
				t.Fatalf("%s:%d: tsv block without a sql block before it", file, start)
			}
			out[len(out)-1].expected = &body
		}
	}
	return out
}

// sampleSpend is one differentially private release of the sample: its
// single item and the spend recorded for it.
type sampleSpend struct {
	item  Item
	spend Spend
}

// sampleData is the sample release of docs/sql.md ("The sample release").
// The expected rows of every recipe are computed from it (recipeRows), and
// writeSampleWith writes it through a Writer on either engine.
type sampleData struct {
	// at is every row's released_at, and the spent_at of every spend
	// (the spends carry no SpentAt of their own).
	at time.Time
	// items are the rows of the completed non-DP releases, written with
	// WriteRelease: one releases row per (app, epoch, policy, k).
	items []Item
	// undecrypted is their undecrypted summary.
	undecrypted []Undecrypted
	// dp are the DP releases, written with WriteSpendingRelease.
	dp []sampleSpend
	// interrupted are rows of a release without its releases row: no
	// analyst view or copy may show them.
	interrupted []Item
	// pdd are PDD days (docsql_test.go's sample; none in docs/sql.md's),
	// written with WritePDDRound, or WriteSpendingPDDRound when spend is
	// set.
	pdd []samplePDD
}

// samplePDD is one PDD day of a sample and, for a noisy day, its spend.
type samplePDD struct {
	round PDDRound
	spend *Spend
}

func sample() sampleData {
	it := func(app, epoch, pol, item, variant string, imp, users uint64) Item {
		return Item{App: app, Epoch: epoch, Policy: pol, K: 2, Item: item, Variant: variant, Impressions: imp, Users: users}
	}
	un := func(epoch string, reports, users, tags uint64) Undecrypted {
		return Undecrypted{App: "query", Epoch: epoch, Policy: "ft-u", K: 2, Reports: reports, Users: users, Tags: tags}
	}
	dp := func(epoch string, imp uint64, eps float64) sampleSpend {
		return sampleSpend{it("query", epoch, "dp-a", "dog", "", imp, 0),
			Spend{Dataset: "default", Epoch: epoch, App: "query", Policy: "dp-a", K: 2, Epsilon: eps, Delta: 0.001, Params: "d=1"}}
	}
	return sampleData{
		at: time.Date(2006, 5, 1, 0, 0, 0, 0, time.UTC),
		items: []Item{
			it("query", "2006-03", "ft-u", "dog", "Dog", 10, 6),
			it("query", "2006-03", "ft-u", "cat", "", 4, 3),
			it("query", "2006-03", "ft-u", "fish", "", 2, 2),
			it("query", "2006-04", "ft-u", "dog", "", 6, 4),
			it("query", "2006-04", "ft-u", "cat", "", 8, 5),
			it("reformulation", "2006-03", "ft-u", "dog → puppy", "", 5, 4),
			it("reformulation", "2006-03", "ft-u", "dog → dog food", "", 2, 2),
			it("click", "2006-03", "ft-u", "dog → www.example.com", "", 4, 3),
			it("url", "2006-03", "ft-u", "www.example.com", "", 5, 4),
			it("ltr", "2006-03", "ft-u", "dog → www.example.com → dwell → 1m-5m", "", 3, 2),
			it("keyword", "2006-03", "ft-u", "dog", "", 12, 7),
		},
		undecrypted: []Undecrypted{un("2006-03", 1, 1, 7), un("2006-03", 2, 2, 3), un("2006-04", 1, 1, 4)},
		dp:          []sampleSpend{dp("2006-03", 9, 1.5), dp("2006-04", 5, 0.5)},
		interrupted: []Item{it("query", "2006-05", "ft-u", "dog", "", 99, 99)},
	}
}

// writeSampleWith writes s through w into w's database, as the release
// stage would: the non-DP releases, the DP releases with their spends, and
// the rows of an interrupted release.
func writeSampleWith(t *testing.T, ctx context.Context, w *Writer, s sampleData) {
	t.Helper()
	if err := w.WriteRelease(ctx, s.items, s.undecrypted, s.at); err != nil {
		t.Fatal(err)
	}
	for _, d := range s.dp {
		if err := w.WriteSpendingRelease(ctx, d.item.Key(), []Item{d.item}, nil, s.at, d.spend, Budget{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, it := range s.interrupted {
		if err := w.insertItems(ctx, it.Key(), []Item{it}, s.at); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range s.pdd {
		var err error
		if p.spend != nil {
			err = w.WriteSpendingPDDRound(ctx, p.round, s.at, *p.spend, Budget{})
		} else {
			err = w.WritePDDRound(ctx, p.round, s.at)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// writeSample writes the sample release that docs/sql.md describes into
// database crowdlog (dropped first, with its analyst database) of the
// 18.16 test server, through the Writer.
func writeSample(t *testing.T, ctx context.Context) {
	t.Helper()
	writeSampleData(t, ctx, sample())
}

// writeSampleData is writeSample with the sample s.
func writeSampleData(t *testing.T, ctx context.Context, s sampleData) {
	t.Helper()
	w0 := openTestWriter(t) // starts the server
	for _, db := range []string{AnalystDatabase(DefaultDatabase), DefaultDatabase} {
		if err := w0.conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
			t.Fatal(err)
		}
	}
	w, err := Open(ctx, srv.TCPAddr, DefaultDatabase)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeSampleWith(t, ctx, w, s)
}

// The expected rows of the recipes, computed from sampleData alone: plain
// Go over the sample's items, no release or SQL code. Each value is
// formatted as ClickHouse's TabSeparated writes it (tsvRows).

// completed returns the items of every completed release (those with a
// releases row): the non-DP and the DP ones, not the interrupted ones.
func (s sampleData) completed() []Item {
	out := append([]Item(nil), s.items...)
	for _, d := range s.dp {
		out = append(out, d.item)
	}
	return out
}

// where returns the completed items that keep accepts, sorted by less.
func (s sampleData) where(keep func(Item) bool, less func(a, b Item) bool) []Item {
	var out []Item
	for _, it := range s.completed() {
		if keep(it) {
			out = append(out, it)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return less(out[i], out[j]) })
	return out
}

// sampleRelease is one completed release of the sample: its key, its
// number of items and their impressions.
type sampleRelease struct {
	Key
	items, impressions uint64
}

// releases returns the completed releases, sorted by (app, epoch, policy, k).
func (s sampleData) releases() []sampleRelease {
	byKey := map[Key]*sampleRelease{}
	var out []sampleRelease
	for _, it := range s.completed() {
		r := byKey[it.Key()]
		if r == nil {
			r = &sampleRelease{Key: it.Key()}
			byKey[it.Key()] = r
		}
		r.items++
		r.impressions += it.Impressions
	}
	for _, r := range byKey {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.App != b.App {
			return a.App < b.App
		}
		if a.Epoch != b.Epoch {
			return a.Epoch < b.Epoch
		}
		if a.Policy != b.Policy {
			return a.Policy < b.Policy
		}
		return a.K < b.K
	})
	return out
}

// monthRange returns the UTC range of an epoch named YYYY-MM (the
// sample's epochs); ok is false for any other name.
func monthRange(epoch string) (start, end time.Time, ok bool) {
	start, err := time.Parse("2006-01", epoch)
	if err != nil {
		return time.Time{}, time.Time{}, false
	}
	return start, start.AddDate(0, 1, 0), true
}

// fields splits a composite artifact into its fields (the sample has no
// escaped field).
func fields(item string) []string { return strings.Split(item, " → ") }

// ftu2 keeps the items of app released under ft-u with k = 2.
func ftu2(app string) func(Item) bool {
	return func(it Item) bool { return it.App == app && it.Policy == "ft-u" && it.K == 2 }
}

// byEpochImpressions orders by epoch, impressions descending, then item.
func byEpochImpressions(a, b Item) bool {
	if a.Epoch != b.Epoch {
		return a.Epoch < b.Epoch
	}
	if a.Impressions != b.Impressions {
		return a.Impressions > b.Impressions
	}
	return a.Item < b.Item
}

// limitBy keeps the first n items of each epoch (LIMIT n BY epoch).
func limitBy(items []Item, n int) []Item {
	var out []Item
	seen := map[string]int{}
	for _, it := range items {
		if seen[it.Epoch]++; seen[it.Epoch] <= n {
			out = append(out, it)
		}
	}
	return out
}

// round rounds x to d decimals as ClickHouse's round does for Float64
// (half to even).
func round(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.RoundToEven(x*p) / p
}

const tsvTime = "2006-01-02 15:04:05"

// tsvRows formats rows as ClickHouse's TabSeparated output: strings with
// \, tab and newline escaped, integers in decimal, floats in their
// shortest form, times as "YYYY-MM-DD hh:mm:ss" in UTC, nil as \N.
func tsvRows(rows [][]any) string {
	esc := strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`)
	var lines []string
	for _, r := range rows {
		var f []string
		for _, v := range r {
			switch v := v.(type) {
			case nil:
				f = append(f, `\N`)
			case string:
				f = append(f, esc.Replace(v))
			case int:
				f = append(f, strconv.Itoa(v))
			case uint64:
				f = append(f, strconv.FormatUint(v, 10))
			case float64:
				f = append(f, strconv.FormatFloat(v, 'f', -1, 64))
			case time.Time:
				f = append(f, v.UTC().Format(tsvTime))
			default:
				panic(fmt.Sprintf("tsvRows: %T", v))
			}
		}
		lines = append(lines, strings.Join(f, "\t"))
	}
	return strings.Join(lines, "\n")
}

// recipeRows computes, per recipe name (the word after "sql" on the fence
// line of docs/sql.md), the rows the recipe must return on s.
var recipeRows = map[string]func(s sampleData) [][]any{
	"top-queries": func(s sampleData) (rows [][]any) {
		for _, it := range limitBy(s.where(ftu2("query"), byEpochImpressions), 2) {
			rows = append(rows, []any{it.Epoch, it.Item, it.Impressions, it.Users})
		}
		return rows
	},
	"top-clicks": func(s sampleData) (rows [][]any) {
		keep := func(it Item) bool { return ftu2("click")(it) && fields(it.Item)[0] == "dog" }
		for _, it := range limitBy(s.where(keep, byEpochImpressions), 10) {
			rows = append(rows, []any{it.Epoch, fields(it.Item)[1], it.Impressions, it.Users})
		}
		return rows
	},
	"epoch-totals": func(s sampleData) (rows [][]any) {
		for _, r := range s.releases() {
			if start, _, ok := monthRange(r.Epoch); ok && r.App == "query" && r.Policy == "ft-u" && r.K == 2 {
				rows = append(rows, []any{r.Epoch, start, r.items, r.impressions})
			}
		}
		return rows
	},
	"query-share": func(s sampleData) (rows [][]any) {
		for _, r := range s.releases() {
			start, _, ok := monthRange(r.Epoch)
			if !ok || r.App != "query" || r.Policy != "ft-u" || r.K != 2 {
				continue
			}
			released, imp := 0, uint64(0)
			for _, it := range s.where(ftu2("query"), byEpochImpressions) {
				if it.Epoch == r.Epoch && it.Item == "fish" {
					released, imp = 1, imp+it.Impressions
				}
			}
			rows = append(rows, []any{r.Epoch, start, released, imp, round(float64(imp)/float64(r.impressions), 3)})
		}
		return rows
	},
	"query-series": func(s sampleData) (rows [][]any) {
		series := map[string][]string{}
		var queries []string
		for _, it := range s.where(ftu2("query"), func(a, b Item) bool { return a.Epoch < b.Epoch }) {
			if _, _, ok := monthRange(it.Epoch); !ok {
				continue
			}
			if series[it.Item] == nil {
				queries = append(queries, it.Item)
			}
			series[it.Item] = append(series[it.Item], fmt.Sprintf("('%s',%d)", it.Epoch, it.Impressions))
		}
		sort.Strings(queries)
		for _, q := range queries {
			rows = append(rows, []any{q, "[" + strings.Join(series[q], ",") + "]"})
		}
		return rows
	},
	"epochs-per-query": func(s sampleData) (rows [][]any) {
		epochs := map[string]uint64{}
		for _, it := range s.where(ftu2("query"), byEpochImpressions) {
			if _, _, ok := monthRange(it.Epoch); ok {
				epochs[it.Item]++
			}
		}
		queries := map[uint64]uint64{}
		var ns []uint64
		for _, n := range epochs {
			if queries[n] == 0 {
				ns = append(ns, n)
			}
			queries[n]++
		}
		sort.Slice(ns, func(i, j int) bool { return ns[i] > ns[j] })
		for _, n := range ns {
			rows = append(rows, []any{n, queries[n]})
		}
		return rows
	},
	"releases-in-period": func(s sampleData) (rows [][]any) {
		from, to := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2006, 4, 1, 0, 0, 0, 0, time.UTC)
		for _, r := range s.releases() {
			if start, end, ok := monthRange(r.Epoch); ok && start.Before(to) && end.After(from) {
				rows = append(rows, []any{r.App, r.Epoch, r.Policy, r.K, start, end, r.items, r.impressions})
			}
		}
		return rows
	},
	"reformulation-proportions": func(s sampleData) (rows [][]any) {
		var released, total uint64
		var pairs []Item
		for _, it := range s.where(ftu2("reformulation"), func(a, b Item) bool {
			return a.Impressions > b.Impressions || a.Impressions == b.Impressions && fields(a.Item)[1] < fields(b.Item)[1]
		}) {
			if it.Epoch == "2006-03" && fields(it.Item)[0] == "dog" {
				pairs, released = append(pairs, it), released+it.Impressions
			}
		}
		for _, it := range s.where(ftu2("query"), byEpochImpressions) {
			if it.Epoch == "2006-03" && it.Item == "dog" {
				total += it.Impressions
			}
		}
		for _, it := range pairs {
			rows = append(rows, []any{fields(it.Item)[1], it.Impressions, round(100*float64(it.Impressions)/float64(total), 0)})
		}
		return append(rows, []any{"?", total - released, round(100*(1-float64(released)/float64(total)), 0)})
	},
	"reformulation-pairs": func(s sampleData) (rows [][]any) {
		for _, it := range s.where(ftu2("reformulation"), func(a, b Item) bool {
			if a.Epoch != b.Epoch || a.Impressions != b.Impressions {
				return byEpochImpressions(a, b)
			}
			return a.Item < b.Item
		}) {
			start, _, _ := monthRange(it.Epoch)
			f := fields(it.Item)
			rows = append(rows, []any{it.Epoch, start, f[0], f[1], it.Impressions, it.Users})
		}
		return rows
	},
	"undecrypted-per-epoch": func(s sampleData) (rows [][]any) {
		for _, r := range s.releases() {
			if r.App != "query" || r.Policy != "ft-u" || r.K != 2 {
				continue
			}
			var tags, reports uint64
			for _, u := range s.undecrypted {
				if u.Key() == r.Key {
					tags, reports = tags+u.Tags, reports+u.Tags*u.Reports
				}
			}
			rows = append(rows, []any{r.Epoch, tags, reports})
		}
		return rows
	},
	"released-share": func(s sampleData) (rows [][]any) {
		for _, r := range s.releases() {
			if r.App != "query" || r.Policy != "ft-u" || r.K != 2 {
				continue
			}
			var undec uint64
			for _, u := range s.undecrypted {
				if u.Key() == r.Key {
					undec += u.Tags * u.Reports
				}
			}
			rows = append(rows, []any{r.Epoch, r.impressions, undec, round(float64(r.impressions)/float64(r.impressions+undec), 3)})
		}
		return rows
	},
	"undecrypted-by-size": func(s sampleData) (rows [][]any) {
		type es struct {
			epoch   string
			reports uint64
		}
		tags := map[es]uint64{}
		var keys []es
		for _, u := range s.undecrypted {
			if u.App == "query" && u.Policy == "ft-u" && u.K == 2 {
				k := es{u.Epoch, u.Reports}
				if _, ok := tags[k]; !ok {
					keys = append(keys, k)
				}
				tags[k] += u.Tags
			}
		}
		sort.Slice(keys, func(i, j int) bool {
			return keys[i].epoch < keys[j].epoch || keys[i].epoch == keys[j].epoch && keys[i].reports > keys[j].reports
		})
		for _, k := range keys {
			rows = append(rows, []any{k.epoch, k.reports, tags[k]})
		}
		return rows
	},
	"ledger-per-epoch": func(s sampleData) (rows [][]any) {
		for _, g := range s.ledgerEpochs() {
			rows = append(rows, []any{g.dataset, g.epoch, g.epsilon, g.delta, len(g.spends)})
		}
		return rows
	},
	"ledger-spends": func(s sampleData) (rows [][]any) {
		for _, g := range s.ledgerEpochs() {
			for _, sp := range g.spends {
				rows = append(rows, []any{sp.Dataset, sp.Epoch, sp.App, sp.Policy, sp.K, sp.Epsilon, sp.Delta, sp.Params, s.at, 2 - g.epsilon})
			}
		}
		return rows
	},
	"app-queries": func(s sampleData) (rows [][]any) {
		for _, it := range s.where(ftu2("query"), byEpochImpressions) {
			rows = append(rows, []any{it.Epoch, it.Item, it.Variant, it.Impressions, it.Users})
		}
		return rows
	},
	"app-clicks": func(s sampleData) (rows [][]any) {
		for _, it := range s.where(ftu2("click"), byEpochImpressions) {
			f := fields(it.Item)
			rows = append(rows, []any{it.Epoch, f[0], f[1], it.Impressions, it.Users})
		}
		return rows
	},
	"app-urls": func(s sampleData) (rows [][]any) {
		for _, it := range limitBy(s.where(ftu2("url"), byEpochImpressions), 20) {
			rows = append(rows, []any{it.Epoch, it.Item, it.Impressions, it.Users})
		}
		return rows
	},
	"app-ltr": func(s sampleData) (rows [][]any) {
		keep := func(it Item) bool { return ftu2("ltr")(it) && it.Epoch == "2006-03" && fields(it.Item)[2] == "dwell" }
		for _, it := range s.where(keep, func(a, b Item) bool {
			fa, fb := fields(a.Item), fields(b.Item)
			return strings.Join([]string{fa[0], fa[1], fa[3]}, "\x00") < strings.Join([]string{fb[0], fb[1], fb[3]}, "\x00")
		}) {
			f := fields(it.Item)
			rows = append(rows, []any{f[0], f[1], f[3], it.Impressions})
		}
		return rows
	},
	"app-keywords": func(s sampleData) (rows [][]any) {
		for _, it := range limitBy(s.where(ftu2("keyword"), byEpochImpressions), 20) {
			rows = append(rows, []any{it.Epoch, it.Item, it.Impressions, it.Users})
		}
		return rows
	},
	"users-not-measured": func(s sampleData) (rows [][]any) {
		keep := func(it Item) bool { return it.App == "query" && it.Item == "dog" }
		for _, it := range s.where(keep, func(a, b Item) bool {
			return a.Epoch < b.Epoch || a.Epoch == b.Epoch && a.Policy < b.Policy
		}) {
			if it.Policy == "dp-a" { // dp-a publishes no user count (docs/policies.md)
				rows = append(rows, []any{it.Epoch, it.Policy, it.Impressions, nil, "not measured"})
			} else {
				rows = append(rows, []any{it.Epoch, it.Policy, it.Impressions, it.Users, strconv.FormatUint(it.Users, 10)})
			}
		}
		return rows
	},
	"users-measured": func(s sampleData) (rows [][]any) {
		for _, r := range s.releases() {
			measured := 1
			if r.Policy == "dp-a" {
				measured = 0
			}
			rows = append(rows, []any{r.App, r.Epoch, r.Policy, r.K, measured})
		}
		return rows
	},
	"users-by-policy": func(s sampleData) (rows [][]any) {
		type agg struct {
			released, withUsers, users uint64
		}
		by := map[string]*agg{}
		var policies []string
		for _, it := range s.completed() {
			if it.App != "query" {
				continue
			}
			if by[it.Policy] == nil {
				by[it.Policy] = &agg{}
				policies = append(policies, it.Policy)
			}
			a := by[it.Policy]
			a.released++
			if it.Policy != "dp-a" {
				a.withUsers, a.users = a.withUsers+1, a.users+it.Users
			}
		}
		sort.Strings(policies)
		for _, p := range policies {
			a := by[p]
			var total any = a.users
			if a.withUsers == 0 {
				total = nil // sum over no non-NULL value is NULL
			}
			rows = append(rows, []any{p, a.released, a.withUsers, total})
		}
		return rows
	},
	"copy-and-views": func(s sampleData) [][]any {
		var sum uint64
		for _, it := range s.completed() {
			if it.App == "query" && it.Policy == "ft-u" {
				sum += it.Impressions
			}
		}
		return [][]any{{sum, sum}}
	},
	"copy-final": func(s sampleData) (rows [][]any) {
		for _, it := range s.where(func(it Item) bool { return it.App == "query" }, byEpochImpressions) {
			rows = append(rows, []any{it.Epoch, it.Item, it.Impressions})
		}
		return rows
	},
}

// sampleLedgerEpoch is the ledger of one (dataset, epoch) of the sample.
type sampleLedgerEpoch struct {
	dataset, epoch string
	epsilon, delta float64
	spends         []Spend
}

// ledgerEpochs groups the sample's spends by (dataset, epoch), sorted.
func (s sampleData) ledgerEpochs() []sampleLedgerEpoch {
	var out []sampleLedgerEpoch
	for _, d := range s.dp {
		i := 0
		for i < len(out) && (out[i].dataset != d.spend.Dataset || out[i].epoch != d.spend.Epoch) {
			i++
		}
		if i == len(out) {
			out = append(out, sampleLedgerEpoch{dataset: d.spend.Dataset, epoch: d.spend.Epoch})
		}
		out[i].epsilon += d.spend.Epsilon
		out[i].delta += d.spend.Delta
		out[i].spends = append(out[i].spends, d.spend)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].dataset < out[j].dataset || out[i].dataset == out[j].dataset && out[i].epoch < out[j].epoch
	})
	return out
}

// cookbookBlocks reads docs/sql.md and checks, before any engine runs,
// that every sql block has a name with a recipeRows function and a tsv
// block equal to that function's rows on the sample, and that every
// function belongs to a block.
func cookbookBlocks(t *testing.T) []sqlBlock {
	t.Helper()
	md, err := os.ReadFile("../docs/sql.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := docBlocks(t, "docs/sql.md", string(md))
	if len(blocks) < 20 {
		t.Fatalf("docs/sql.md has %d sql blocks; want ≥ 20", len(blocks))
	}
	s, used := sample(), map[string]bool{}
	for _, b := range blocks {
		rows, ok := recipeRows[b.name]
		switch {
		case b.name == "" || !ok:
			t.Errorf("docs/sql.md:%d: sql block %q has no recipeRows function (name it after ```sql)", b.line, b.name)
		case used[b.name]:
			t.Errorf("docs/sql.md:%d: second sql block named %q", b.line, b.name)
		case b.expected == nil:
			t.Errorf("docs/sql.md:%d: sql block %q has no tsv block of its rows on the sample", b.line, b.name)
		default:
			if want := tsvRows(rows(s)); strings.TrimRight(*b.expected, "\n") != want {
				t.Errorf("docs/sql.md:%d: the tsv block of %q\n%s\ndiffers from the rows computed from the sample\n%s", b.line, b.name, *b.expected, want)
			}
		}
		used[b.name] = true
	}
	for name := range recipeRows {
		if !used[name] {
			t.Errorf("recipeRows[%q] belongs to no sql block of docs/sql.md", name)
		}
	}
	return blocks
}

// checkRecipes runs every block with run and compares its output with the
// rows computed from the sample (equal to the block's tsv block, checked
// by cookbookBlocks). It returns the number of blocks whose rows matched.
func checkRecipes(t *testing.T, engine string, blocks []sqlBlock, run func(sql string) (string, error)) int {
	t.Helper()
	s, matched := sample(), 0
	for _, b := range blocks {
		got, err := run(b.sql)
		if err != nil {
			t.Errorf("%s: docs/sql.md:%d (%s): %v\n%s", engine, b.line, b.name, err, b.sql)
			continue
		}
		rows, ok := recipeRows[b.name]
		if !ok {
			continue
		}
		if want := tsvRows(rows(s)); strings.TrimRight(got, "\n") != want {
			t.Errorf("%s: docs/sql.md:%d (%s): rows\n%s\nwant (computed from the sample)\n%s", engine, b.line, b.name, got, want)
			continue
		}
		matched++
	}
	return matched
}

// TestSQLCookbookRows checks docs/sql.md against the sample alone: every
// sql block is named, has a tsv block, and that block holds the rows
// computed from the sample in Go. No engine runs.
func TestSQLCookbookRows(t *testing.T) {
	blocks := cookbookBlocks(t)
	if t.Failed() {
		return
	}
	// The comparison can fail: a sample with one more completed query
	// changes the rows of the top-queries recipe.
	s := sample()
	s.items = append(s.items, Item{App: "query", Epoch: "2006-03", Policy: "ft-u", K: 2, Item: "emu", Impressions: 50, Users: 9})
	if tsvRows(recipeRows["top-queries"](s)) == tsvRows(recipeRows["top-queries"](sample())) {
		t.Error("top-queries rows do not depend on the sample")
	}
	t.Logf("%d sql blocks, each with a tsv block equal to its rows computed from the sample", len(blocks))
}

// TestSQLCookbook runs every sql block of docs/sql.md with
// clickhouse-client as the read-only analyst (made by Init, in its analyst
// database crowdlog_analyst) against the sample release on the ClickHouse
// 18.16 server, and compares each block's rows with those computed from
// the sample (recipeRows, equal to the block's tsv block). Init runs after
// the sample is written, so the sample reaches the analyst database
// through Init's backfill.
func TestSQLCookbook(t *testing.T) {
	blocks := cookbookBlocks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	writeSample(t, ctx)
	a := Analyst{Name: "crowdlog_doc_analyst", Password: "doc-test-password"}
	if _, err := Init(ctx, InitOptions{Addr: srv.TCPAddr, AllowPasswordlessDefault: true, Analyst: a, UsersDir: clickhouse.UsersDir(srv.Dir)}); err != nil {
		t.Fatal(err)
	}
	run, err := analystClient(ctx, a, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n := checkRecipes(t, "ClickHouse 18.16", blocks, run)
	t.Logf("ClickHouse 18.16: %d of %d recipes returned the rows computed from the sample", n, len(blocks))
}

// port returns the port of a "host:port" address.
func port(addr string) (string, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", os.ErrInvalid
	}
	return addr[i+1:], nil
}
