package release

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/crowdlog/crowdlog/infra/clickhouse/chtest"
)

// The workload below issues every statement the release code can issue —
// the schema, the views, the writer's DML (threshold releases, the redo of
// an interrupted release with its ALTER … DELETE and system.mutations
// poll, DP draws and the privacy ledger, PDD days), the analyst database
// with its materialized views, and a read of every view — through the
// real code on one engine, and compares what it reads back with rows
// computed here from the data it wrote. TestStatementsServer runs it on
// the 18.16 server; TestStatementsChDB (chdb_test.go, build tag chdb) on
// chDB 26.7, once per LowCardinality choice of the schema.

// engineConns are the connections the workload runs on.
type engineConns struct {
	// conn has db as its current database and the server's default
	// mutations_sync = 0 (ALTER … DELETE returns before the mutation ends).
	conn driver.Conn
	// admin has any current database; it runs the analyst database's
	// qualified statements.
	admin driver.Conn
	// views has AnalystDatabase(db) as its current database.
	views driver.Conn
	db    string
	// lowCardinality is the schema applied before OpenConn (which then
	// finds the tables there and keeps them).
	lowCardinality bool
}

// stmtCounter counts the statements run through its conns, per group.
type stmtCounter struct {
	mu     sync.Mutex
	group  string
	order  []string
	runs   map[string]int
	texts  map[string]map[string]bool
	failed map[string]int
	errs   []string
}

func newStmtCounter() *stmtCounter {
	return &stmtCounter{runs: map[string]int{}, texts: map[string]map[string]bool{}, failed: map[string]int{}}
}

func (c *stmtCounter) start(group string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.group = group
	if _, ok := c.runs[group]; !ok {
		c.order = append(c.order, group)
		c.runs[group] = 0
		c.texts[group] = map[string]bool{}
	}
}

func (c *stmtCounter) count(query string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs[c.group]++
	c.texts[c.group][strings.Join(strings.Fields(query), " ")] = true
	if err != nil {
		c.failed[c.group]++
		c.errs = append(c.errs, fmt.Sprintf("%s: %.80s: %v", c.group, strings.Join(strings.Fields(query), " "), err))
	}
}

// log reports the counts per group and in all.
func (c *stmtCounter) log(t *testing.T, engine string) (total, distinct int) {
	t.Helper()
	all := map[string]bool{}
	for _, g := range c.order {
		t.Logf("%s: %-9s %4d statements run, %3d distinct, %d failed", engine, g, c.runs[g], len(c.texts[g]), c.failed[g])
		total += c.runs[g]
		for s := range c.texts[g] {
			all[s] = true
		}
	}
	t.Logf("%s: in all %d statements run, %d distinct", engine, total, len(all))
	for _, e := range c.errs {
		t.Logf("%s: failed: %s", engine, e)
	}
	return total, len(all)
}

// countingConn counts every Exec, Query, QueryRow and batch Send.
type countingConn struct {
	driver.Conn
	c *stmtCounter
}

func (cc countingConn) Exec(ctx context.Context, query string, args ...any) error {
	err := cc.Conn.Exec(ctx, query, args...)
	cc.c.count(query, err)
	return err
}

func (cc countingConn) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	rows, err := cc.Conn.Query(ctx, query, args...)
	cc.c.count(query, err)
	return rows, err
}

func (cc countingConn) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	row := cc.Conn.QueryRow(ctx, query, args...)
	cc.c.count(query, row.Err())
	return row
}

func (cc countingConn) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	b, err := cc.Conn.PrepareBatch(ctx, query, opts...)
	if err != nil {
		cc.c.count(query, err)
		return nil, err
	}
	return countingBatch{Batch: b, c: cc.c, query: query}, nil
}

type countingBatch struct {
	driver.Batch
	c     *stmtCounter
	query string
}

func (b countingBatch) Send() error {
	err := b.Batch.Send()
	b.c.count(b.query+" VALUES", err)
	return err
}

var errCrash = errors.New("crash injected by the test")

// crashAt is a Writer.Hook failing at step.
func crashAt(step string) func(string) error {
	return func(s string) error {
		if s == step {
			return errCrash
		}
		return nil
	}
}

// wantSorted orders items as ReleasedItems promises: impressions desc,
// item, variant.
func wantSorted(items []Item) []Item {
	out := append([]Item{}, items...)
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Impressions != b.Impressions {
			return a.Impressions > b.Impressions
		}
		if a.Item != b.Item {
			return a.Item < b.Item
		}
		return a.Variant < b.Variant
	})
	return out
}

// wantMerged merges lines of equal (reports, users) by summing tags and
// orders them as UndecryptedSummary promises.
func wantMerged(undec []Undecrypted) []Undecrypted {
	m := map[[2]uint64]Undecrypted{}
	for _, u := range undec {
		k := [2]uint64{u.Reports, u.Users}
		v, ok := m[k]
		if ok {
			v.Tags += u.Tags
		} else {
			v = u
		}
		m[k] = v
	}
	out := []Undecrypted{}
	for _, u := range m {
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Reports != out[j].Reports {
			return out[i].Reports > out[j].Reports
		}
		return out[i].Users > out[j].Users
	})
	return out
}

// utcSpends puts the spend times in UTC (a driver returns them in the
// server's zone).
func utcSpends(s []Spend) {
	for i := range s {
		s[i].SpentAt = s[i].SpentAt.UTC()
	}
}

// tricky are item texts that test escaping on the way in and out.
var tricky = []string{"dog", "a\tb", "new\nline", `back\slash`, "it's", "\"quoted\"", "`tick`", "?", "-- not a comment",
	"ünïcödé → 犬", `a→b\c`, "\\N", "nul\x00byte", "\xff\xfe not utf-8", ""}

// runStatements runs the workload on ec and returns the statement
// counter.
func runStatements(t *testing.T, ctx context.Context, engine string, ec engineConns) *stmtCounter {
	t.Helper()
	sc := newStmtCounter()
	conn := countingConn{ec.conn, sc}
	check := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %s:\n got  %+v\n want %+v", engine, what, got, want)
		}
	}
	released := map[Key][]Item{} // completed releases, as written
	var keys []Key               // in completion order

	sc.start("schema")
	for _, s := range SchemaStatementsFor(Server{LowCardinality: ec.lowCardinality}) {
		if err := conn.Exec(ctx, s); err != nil {
			t.Errorf("%s: schema (LowCardinality %v): %.70s…: %v", engine, ec.lowCardinality, s, err)
		}
	}
	var appType string
	if err := conn.QueryRow(ctx, "SELECT type FROM system.columns WHERE database = ? AND table = 'releases' AND name = 'app'", ec.db).Scan(&appType); err != nil {
		t.Fatal(err)
	}
	check("releases.app type", appType, map[bool]string{false: "String", true: "LowCardinality(String)"}[ec.lowCardinality])

	sc.start("open")
	w, err := OpenConn(ctx, conn, ec.db)
	if err != nil {
		sc.log(t, engine)
		t.Fatalf("%s: OpenConn: %v", engine, err)
	}
	t.Logf("%s: server %+v", engine, w.Server())

	sc.start("writer")
	at := time.Date(2026, 11, 28, 10, 11, 12, 987654321, time.UTC)
	atSec := at.Truncate(time.Second)
	var items []Item
	var undec []Undecrypted
	for ai, app := range []string{"query", "reformulation", "click", "url", "ltr", "keyword"} {
		key := Key{app, "20260101T000000Z-1h", "ft-u", 2 + ai%2}
		for i := 0; i < 4+ai; i++ {
			it := Item{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K,
				Item: fmt.Sprintf("%s %d", tricky[(i+ai)%len(tricky)], i), Variant: tricky[(i*3)%len(tricky)],
				Impressions: uint64(100 - 7*i%5), Users: uint64(3 + i)}
			switch app {
			case "reformulation", "click":
				it.Item = fmt.Sprintf("q%d %s → t%d", i%2, tricky[i%len(tricky)], i)
			case "ltr":
				it.Item = fmt.Sprintf("q%d → u%d → dwell → %dm", i%2, i, i)
			}
			items = append(items, it)
			released[key] = append(released[key], it)
		}
		for i := 0; i < 3; i++ {
			undec = append(undec, Undecrypted{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K,
				Reports: uint64(1 + i%2), Users: 1, Tags: uint64(10 + i)}) // lines 0 and 2 merge
		}
		keys = append(keys, key)
	}
	if err := w.WriteRelease(ctx, items, undec, at); err != nil {
		t.Fatalf("%s: WriteRelease: %v", engine, err)
	}
	if err := w.WriteRelease(ctx, items, undec, at); err != nil { // a second time: nothing written
		t.Fatalf("%s: WriteRelease again: %v", engine, err)
	}
	for _, key := range keys {
		got, err := w.ReleasedItems(ctx, key.App, key.Epoch, key.Policy, key.K)
		if err != nil {
			t.Fatal(err)
		}
		check("ReleasedItems "+key.String(), got, wantSorted(released[key]))
		gotU, err := w.UndecryptedSummary(ctx, key.App, key.Epoch, key.Policy, key.K)
		if err != nil {
			t.Fatal(err)
		}
		var wantU []Undecrypted
		for _, u := range undec {
			if u.Key() == key {
				wantU = append(wantU, u)
			}
		}
		check("UndecryptedSummary "+key.String(), gotU, wantMerged(wantU))
		var n, imp uint64
		var rat time.Time
		if err := conn.QueryRow(ctx, "SELECT items, impressions, released_at FROM releases FINAL"+keyWhere, keyArgs(key)...).Scan(&n, &imp, &rat); err != nil {
			t.Fatal(err)
		}
		var wantImp uint64
		for _, it := range released[key] {
			wantImp += it.Impressions
		}
		check("releases row "+key.String(), []any{n, imp, rat.UTC()}, []any{uint64(len(released[key])), wantImp, atSec})
		var raw uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM released_items"+keyWhere, keyArgs(key)...).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		check("physical released_items rows after two writes "+key.String(), raw, uint64(len(released[key])))
	}

	sc.start("redo")
	redoKey := Key{"query", "20260101T010000Z-1h", "ft-u", 2}
	first := makeItems(redoKey, 30)
	w.Hook = crashAt("before-releases-row")
	if err := w.WriteKeyedRelease(ctx, redoKey, first, nil, at); !errors.Is(err, errCrash) {
		t.Fatalf("%s: crashed write: %v", engine, err)
	}
	abandoned := Key{"query", "20260101T020000Z-1h", "ft-u", 2} // never completed
	if err := w.WriteKeyedRelease(ctx, abandoned, makeItems(abandoned, 3), nil, at); !errors.Is(err, errCrash) {
		t.Fatalf("%s: crashed write: %v", engine, err)
	}
	w.Hook = nil
	second := makeItems(redoKey, 12)
	for i := range second {
		second[i].Impressions += 1000 // other numbers than the crashed attempt's
	}
	if err := w.WriteKeyedRelease(ctx, redoKey, second, nil, at); err != nil {
		t.Fatalf("%s: redo: %v", engine, err)
	}
	released[redoKey] = second
	keys = append(keys, redoKey)
	got, err := w.ReleasedItems(ctx, redoKey.App, redoKey.Epoch, redoKey.Policy, redoKey.K)
	if err != nil {
		t.Fatal(err)
	}
	check("ReleasedItems after the redo", got, wantSorted(second))
	var raw, done uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM released_items"+keyWhere, keyArgs(redoKey)...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	check("physical released_items rows after the redo", raw, uint64(len(second)))
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND table = 'released_items' AND is_done = 1", ec.db).Scan(&done); err != nil {
		t.Fatal(err)
	}
	if done == 0 {
		t.Errorf("%s: no finished mutation on released_items: the redo did not delete the crashed attempt's rows", engine)
	}

	sc.start("dp")
	spendAt := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	dpKey := Key{"query", "2026-11-27", "dp-a", 0}
	dpItems := func(base uint64) []Item {
		var out []Item
		for i, s := range []string{"flu", "weather", "it's\tnoisy"} {
			out = append(out, Item{App: dpKey.App, Epoch: dpKey.Epoch, Policy: dpKey.Policy, Item: s,
				Impressions: base + uint64(i), Users: 0})
		}
		return out
	}
	budget := Budget{Epsilon: 1, Delta: 1e-5}
	spend := Spend{Dataset: "aol", Epoch: dpKey.Epoch, App: dpKey.App, Policy: dpKey.Policy, K: dpKey.K,
		Epsilon: 0.5, Delta: 1e-6, Params: "d=1 sigma=2.5", SpentAt: spendAt}
	candidate := dpItems(50)
	gotItems, _, err := w.WriteDrawnRelease(ctx, dpKey, candidate, nil, at, spend, budget)
	if err != nil {
		t.Fatalf("%s: WriteDrawnRelease: %v", engine, err)
	}
	check("first draw", gotItems, candidate)
	gotItems, _, err = w.WriteDrawnRelease(ctx, dpKey, dpItems(90), nil, at, spend, budget)
	if err != nil {
		t.Fatal(err)
	}
	check("complete DP release read back", gotItems, wantSorted(candidate))
	released[dpKey] = candidate
	keys = append(keys, dpKey)
	d, ok, err := w.readDraw(ctx, dpKey)
	if err != nil || !ok {
		t.Fatalf("%s: stored draw: %v, %v", engine, ok, err)
	}
	drawn, _, err := DecodeDraw(dpKey, d.body)
	if err != nil {
		t.Fatal(err)
	}
	check("stored draw", drawn, candidate)
	// interrupted after the ledger row: the redo writes the stored draw
	dp2 := Key{"url", "2026-11-27", "dp-a", 0}
	spend2 := spend
	spend2.App, spend2.Epsilon, spend2.SpentAt = dp2.App, 0.25, spendAt.Add(time.Second)
	cand2 := []Item{{App: dp2.App, Epoch: dp2.Epoch, Policy: dp2.Policy, Item: "www.example.com", Impressions: 7}}
	w.Hook = crashAt("before-releases-row")
	if _, _, err := w.WriteDrawnRelease(ctx, dp2, cand2, nil, at, spend2, budget); !errors.Is(err, errCrash) {
		t.Fatalf("%s: crashed DP write: %v", engine, err)
	}
	w.Hook = nil
	other := []Item{{App: dp2.App, Epoch: dp2.Epoch, Policy: dp2.Policy, Item: "www.other.org", Impressions: 70}}
	if gotItems, _, err = w.WriteDrawnRelease(ctx, dp2, other, nil, at, spend2, budget); err != nil {
		t.Fatalf("%s: DP redo: %v", engine, err)
	}
	check("DP redo writes the stored draw", gotItems, cand2)
	released[dp2] = cand2
	keys = append(keys, dp2)
	over := Key{"keyword", "2026-11-27", "dp-a", 0}
	spend3 := spend
	spend3.App, spend3.Epsilon = over.App, 0.5 // 0.5 + 0.25 + 0.5 > 1
	err = w.WriteSpendingRelease(ctx, over, []Item{{App: over.App, Epoch: over.Epoch, Policy: over.Policy, Item: "x", Impressions: 1}}, nil, at, spend3, budget)
	if !errors.Is(err, ErrOverBudget) {
		t.Errorf("%s: a release over the budget: %v, want ErrOverBudget", engine, err)
	}
	if done, err := w.IsReleased(ctx, over); err != nil || done {
		t.Errorf("%s: the release over the budget is released (%v, %v)", engine, done, err)
	}
	ledger, err := w.Ledger(ctx, "aol", "2026-11-27")
	if err != nil {
		t.Fatal(err)
	}
	utcSpends(ledger)
	check("ledger", ledger, []Spend{spend, spend2})

	sc.start("pdd")
	d1 := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	r1 := pddRound("flu", d1, 40, 31, map[string]int64{"weather": 5, "flu": 2, "zero": 0, "a\tb": 1, "it's": 9})
	r2 := pddRound("flu", d1.AddDate(0, 0, 1), 50, 50, map[string]int64{"weather": 3, "news": -2})
	r2.Epsilon, r2.MaxCount = 0.5, 10
	r3 := pddRound("flu", d1.AddDate(0, 0, 2), 10, 5, map[string]int64{"flu": 4})
	if err := w.WritePDDRound(ctx, r1, at); err != nil {
		t.Fatalf("%s: WritePDDRound: %v", engine, err)
	}
	pspend := Spend{Dataset: "aol", Epoch: dayArg(r2.Day), App: "flu", Policy: PDDPolicy, Epsilon: 0.5 * 2, Params: "keywords=2", SpentAt: spendAt}
	if err := w.WriteSpendingPDDRound(ctx, r2, at, pspend, Budget{Epsilon: 2}); err != nil {
		t.Fatalf("%s: WriteSpendingPDDRound: %v", engine, err)
	}
	w.Hook = crashAt("before-pdd-rounds-row")
	if err := w.WritePDDRound(ctx, pddRound("flu", r3.Day, 10, 5, map[string]int64{"flu": 40, "gone": 1}), at); !errors.Is(err, errCrash) {
		t.Fatalf("%s: crashed PDD day: %v", engine, err)
	}
	w.Hook = nil
	if err := w.WritePDDRound(ctx, r3, at); err != nil {
		t.Fatalf("%s: PDD redo: %v", engine, err)
	}
	daily, err := w.ReadKeywordDaily(ctx, "flu")
	if err != nil {
		t.Fatal(err)
	}
	check("keyword_daily", daily, wantDaily(r1, r2, r3))
	rounds, err := w.ReadPDDRounds(ctx, "flu")
	if err != nil {
		t.Fatal(err)
	}
	var wantRounds []PDDRound
	for _, r := range []PDDRound{r1, r2, r3} {
		r.Counts = nil
		wantRounds = append(wantRounds, r)
	}
	check("pdd_rounds", rounds, wantRounds)
	for _, r := range []PDDRound{r1, r2, r3} {
		if ok, err := w.IsPDDReleased(ctx, "flu", r.Day); err != nil || !ok {
			t.Errorf("%s: IsPDDReleased(%s) = %v, %v", engine, dayArg(r.Day), ok, err)
		}
	}
	all, err := w.DatasetLedger(ctx, "aol")
	if err != nil {
		t.Fatal(err)
	}
	utcSpends(all)
	check("dataset ledger", all, []Spend{pspend, spend, spend2}) // by epoch: 2026-11-21 < 2026-11-27

	sc.start("analyst")
	adb, err := OpenAnalystDatabaseConn(ctx, countingConn{ec.admin, sc}, countingConn{ec.views, sc}, ec.db)
	if err != nil {
		sc.log(t, engine)
		t.Fatalf("%s: OpenAnalystDatabaseConn: %v", engine, err)
	}
	// a release after the analyst database exists reaches it through the
	// materialized views
	late := Key{"query", "20260101T030000Z-1h", "ft-u", 3}
	lateItems := []Item{{App: "query", Epoch: late.Epoch, Policy: late.Policy, K: late.K, Item: "late\tone", Variant: "Late", Impressions: 5, Users: 4}}
	if err := w.WriteKeyedRelease(ctx, late, lateItems, nil, at); err != nil {
		t.Fatal(err)
	}
	released[late] = lateItems
	keys = append(keys, late)
	vconn := countingConn{ec.views, sc}
	var copied []Item
	rows, err := vconn.Query(ctx, "SELECT app, epoch, policy, k, item, variant, impressions, users FROM released_items")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var it Item
		var k uint32
		if err := rows.Scan(&it.App, &it.Epoch, &it.Policy, &k, &it.Item, &it.Variant, &it.Impressions, &it.Users); err != nil {
			t.Fatal(err)
		}
		it.K = int(k)
		copied = append(copied, it)
	}
	rows.Close()
	var wantCopied []Item
	for _, k := range keys {
		wantCopied = append(wantCopied, released[k]...)
	}
	byAll := func(s []Item) []Item {
		s = append([]Item{}, s...)
		sort.Slice(s, func(i, j int) bool { return fmt.Sprint(s[i]) < fmt.Sprint(s[j]) })
		return s
	}
	check("analyst copy of released_items (completed releases only)", byAll(copied), byAll(wantCopied))
	var nRel, nLedger, nCounts, nCompleted uint64
	for q, dst := range map[string]*uint64{
		"SELECT count() FROM releases": &nRel, "SELECT count() FROM privacy_ledger": &nLedger,
		"SELECT count() FROM pdd_keyword_counts": &nCounts, "SELECT count() FROM completed_releases": &nCompleted,
	} {
		if err := vconn.QueryRow(ctx, q).Scan(dst); err != nil {
			t.Fatalf("%s: %s: %v", engine, q, err)
		}
	}
	check("analyst releases, ledger, PDD counts, completed_releases", []uint64{nRel, nLedger, nCounts, nCompleted},
		[]uint64{uint64(len(keys)), 3, uint64(len(wantDaily(r1, r2, r3))), uint64(len(keys))})
	// released_queries: every completed query-app release, users NULL
	// under dp-a
	type qrow struct {
		epoch, policy string
		k             uint32
		query, varnt  string
		imp           uint64
		users         *uint64
	}
	var gotQ, wantQ []qrow
	rows, err = vconn.Query(ctx, "SELECT epoch, policy, k, query, variant, impressions, users FROM released_queries")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r qrow
		if err := rows.Scan(&r.epoch, &r.policy, &r.k, &r.query, &r.varnt, &r.imp, &r.users); err != nil {
			t.Fatal(err)
		}
		gotQ = append(gotQ, r)
	}
	rows.Close()
	for _, k := range keys {
		for _, it := range released[k] {
			if it.App != "query" {
				continue
			}
			r := qrow{it.Epoch, it.Policy, uint32(it.K), it.Item, it.Variant, it.Impressions, nil}
			if it.Policy != "dp-a" {
				u := it.Users
				r.users = &u
			}
			wantQ = append(wantQ, r)
		}
	}
	qkey := func(s []qrow) []string {
		var out []string
		for _, r := range s {
			u := "NULL"
			if r.users != nil {
				u = fmt.Sprint(*r.users)
			}
			out = append(out, fmt.Sprintf("%q %q %d %q %q %d %s", r.epoch, r.policy, r.k, r.query, r.varnt, r.imp, u))
		}
		sort.Strings(out)
		return out
	}
	check("analyst released_queries", qkey(gotQ), qkey(wantQ))
	var aDaily []KeywordDaily
	rows, err = vconn.Query(ctx, "SELECT campaign, day, keyword, count, confidence FROM keyword_daily ORDER BY day, keyword")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r KeywordDaily
		if err := rows.Scan(&r.Campaign, &r.Day, &r.Keyword, &r.Count, &r.Confidence); err != nil {
			t.Fatal(err)
		}
		r.Day = dateUTC(r.Day)
		aDaily = append(aDaily, r)
	}
	rows.Close()
	check("analyst keyword_daily", aDaily, wantDaily(r1, r2, r3))

	sc.start("views")
	nViews := len(ViewStatements())
	for _, v := range []struct {
		conn driver.Conn
		db   string
	}{{conn, ec.db}, {vconn, adb}} {
		var names []string
		rows, err := v.conn.Query(ctx, "SELECT name FROM system.tables WHERE database = ? AND engine = 'View' ORDER BY name", v.db)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		rows.Close()
		if len(names) != nViews {
			t.Errorf("%s: %d views in %s, want the %d of views.sql", engine, len(names), v.db, nViews)
		}
		for _, n := range names { // views are analysed again when read
			rows, err := v.conn.Query(ctx, "SELECT * FROM "+quote(n))
			if err != nil {
				t.Errorf("%s: read view %s.%s: %v", engine, v.db, n, err)
				continue
			}
			for rows.Next() {
			}
			if err := rows.Err(); err != nil {
				t.Errorf("%s: read view %s.%s: %v", engine, v.db, n, err)
			}
			rows.Close()
		}
	}
	return sc
}

// TestStatementsServer runs the statement workload on the 18.16 server
// (the schema without LowCardinality, as Open picks there).
func TestStatementsServer(t *testing.T) {
	srv = chtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := fmt.Sprintf("stmts_%d", time.Now().UnixNano())
	admin, err := dial(ctx, srv.TCPAddr, "default")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, s := range []string{"CREATE DATABASE " + db, "CREATE DATABASE " + AnalystDatabase(db)} {
		if err := admin.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := dial(ctx, srv.TCPAddr, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	views, err := dial(ctx, srv.TCPAddr, AnalystDatabase(db))
	if err != nil {
		t.Fatal(err)
	}
	defer views.Close()
	sc := runStatements(t, ctx, "18.16", engineConns{conn: conn, admin: admin, views: views, db: db})
	sc.log(t, "18.16")
}
