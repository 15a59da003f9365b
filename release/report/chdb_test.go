//go:build chdb

package report_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse/chdb"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/report"
)

// TestLoadChDB runs the report's queries (releases, undecrypted summary,
// top items with LIMIT … BY, trends with array arguments, ledger, PDD
// days, top and named keywords) on chDB,
// the current ClickHouse engine, over an analyst database the release code
// filled, and compares what Load read with what the test wrote.
func TestLoadChDB(t *testing.T) {
	e, err := chdb.Open()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := fmt.Sprintf("report_%d", time.Now().UnixNano())
	adb := release.AnalystDatabase(db)
	if _, err := e.QueryTSV("", "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.QueryTSV("", "DROP DATABASE IF EXISTS "+adb+"; DROP DATABASE IF EXISTS "+db) })
	async := map[string]string{"mutations_sync": "0"}
	w, err := release.OpenConn(ctx, e.ConnWith(db, async), db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.OpenAnalystDatabaseConn(ctx, e.ConnWith("", async), e.ConnWith(adb, async), db); err != nil {
		t.Fatal(err)
	}

	q1 := release.Key{App: "query", Epoch: "2026-01-01", Policy: "ft-u", K: 5}
	q2 := release.Key{App: "query", Epoch: "2026-01-02", Policy: "ft-u", K: 5}
	u1 := release.Key{App: "url", Epoch: "all", Policy: "ft-u", K: 5}
	dp := release.Key{App: "query", Epoch: "2026-01-01", Policy: "dp-u", K: 0}
	item := func(k release.Key, it, variant string, imp, users uint64) release.Item {
		return release.Item{App: k.App, Epoch: k.Epoch, Policy: k.Policy, K: k.K, Item: it, Variant: variant, Impressions: imp, Users: users}
	}
	written := map[release.Key][]release.Item{
		q1: {item(q1, "dog", "Dog", 40, 9), item(q1, "dog", "DOG", 5, 5), item(q1, "cat", "", 30, 7),
			item(q1, "a\tb", "", 30, 6), item(q1, "it's", "", 8, 5)},
		q2: {item(q2, "dog", "", 20, 8), item(q2, "fish", "", 50, 9), item(q2, "cat", "Cat", 1, 5)},
		u1: {item(u1, "www.example.com", "", 12, 6)},
		dp: {item(dp, "flu", "", 17, 0), item(dp, "cold", "", 3, 0)},
	}
	undec := map[release.Key][]release.Undecrypted{
		q1: {{App: q1.App, Epoch: q1.Epoch, Policy: q1.Policy, K: q1.K, Reports: 4, Users: 3, Tags: 2},
			{App: q1.App, Epoch: q1.Epoch, Policy: q1.Policy, K: q1.K, Reports: 9, Users: 4, Tags: 1}},
	}
	when := map[release.Key]time.Time{
		q1: time.Date(2026, 1, 2, 0, 5, 0, 0, time.UTC), q2: time.Date(2026, 1, 3, 0, 5, 0, 0, time.UTC),
		u1: time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC), dp: time.Date(2026, 1, 2, 1, 0, 0, 0, time.UTC),
	}
	for _, k := range []release.Key{q1, q2, u1} {
		if err := w.WriteKeyedRelease(ctx, k, written[k], undec[k], when[k]); err != nil {
			t.Fatal(err)
		}
	}
	spend := release.Spend{Dataset: "aol", Epoch: dp.Epoch, App: dp.App, Policy: dp.Policy, Epsilon: 1, Delta: 1e-7,
		Params: "d=1", SpentAt: when[dp]}
	if err := w.WriteSpendingRelease(ctx, dp, written[dp], nil, when[dp], spend, release.Budget{Epsilon: 2}); err != nil {
		t.Fatal(err)
	}
	crashed := release.Key{App: "query", Epoch: "2026-01-03", Policy: "ft-u", K: 5} // never complete
	w.Hook = func(step string) error {
		if step == "before-releases-row" {
			return errors.New("crash")
		}
		return nil
	}
	if err := w.WriteKeyedRelease(ctx, crashed, []release.Item{item(crashed, "ghost", "", 99, 99)}, nil, when[q2]); err == nil {
		t.Fatal("the crash hook did not stop the write")
	}

	// PDD: a released day, a lost day, a withheld day
	pd := func(n int) time.Time { return time.Date(2006, 3, n, 0, 0, 0, 0, time.UTC) }
	w.Hook = nil
	for _, r := range []release.PDDRound{
		{Campaign: "flu", Day: pd(1), Active: 5, Grouped: 5, Decrypted: 5, Groups: 1, Complete: 1, Confidence: 1, MaxCount: 3,
			Counts: []release.KeywordCount{{Keyword: "flu", Count: 4}, {Keyword: "cold", Count: 2}, {Keyword: "it's", Count: 1}}},
		{Campaign: "flu", Day: pd(2), Active: 5, Grouped: 5, Groups: 1, Lost: 1, MaxCount: 3},
	} {
		if err := w.WritePDDRound(ctx, r, when[q1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WritePDDWithheld(ctx, release.PDDWithheld{Campaign: "flu", Day: pd(3), Reason: release.WithheldBudget, Detail: "over"}, when[q1]); err != nil {
		t.Fatal(err)
	}

	const top = 3
	data, err := report.LoadConn(ctx, e.Conn(adb), report.Options{Database: db, Top: top, MaxReleases: 10, Keywords: []string{"it's"}, PDDTop: 1})
	if err != nil {
		t.Fatal(err)
	}
	if data.Database != adb {
		t.Errorf("read %s, want the analyst database %s", data.Database, adb)
	}
	// expected, from the written rows
	keys := []release.Key{dp, q1, q2, u1} // by app, epoch, policy, k
	if len(data.Releases) != len(keys) {
		t.Fatalf("%d releases, want %d: %+v", len(data.Releases), len(keys), data.Releases)
	}
	for i, k := range keys {
		got := data.Releases[i]
		var imp uint64
		for _, it := range written[k] {
			imp += it.Impressions
		}
		if got.Key != k || got.Items != uint64(len(written[k])) || got.Impressions != imp || !got.ReleasedAt.Equal(when[k]) {
			t.Errorf("release %d: %v %d items %d impressions at %v; want %v %d %d %v", i, got.Key, got.Items, got.Impressions,
				got.ReleasedAt, k, len(written[k]), imp, when[k])
		}
		wantTop := append([]release.Item{}, written[k]...)
		sort.SliceStable(wantTop, func(a, b int) bool {
			x, y := wantTop[a], wantTop[b]
			if x.Impressions != y.Impressions {
				return x.Impressions > y.Impressions
			}
			if x.Item != y.Item {
				return x.Item < y.Item
			}
			return x.Variant < y.Variant
		})
		if len(wantTop) > top {
			wantTop = wantTop[:top]
		}
		if !reflect.DeepEqual(got.Top, wantTop) {
			t.Errorf("top of %v:\n got  %+v\n want %+v", k, got.Top, wantTop)
		}
		wantU := append([]release.Undecrypted(nil), undec[k]...)
		sort.Slice(wantU, func(a, b int) bool { return wantU[a].Reports > wantU[b].Reports })
		if !reflect.DeepEqual(got.Undecrypted, wantU) {
			t.Errorf("undecrypted of %v: got %+v, want %+v", k, got.Undecrypted, wantU)
		}
	}
	// one trend: query ft-u k=5 over the two days, variants summed
	wantArt := map[string][]uint64{}
	for j, k := range []release.Key{q1, q2} {
		for _, it := range written[k] {
			if wantArt[it.Item] == nil {
				wantArt[it.Item] = make([]uint64, 2)
			}
			wantArt[it.Item][j] += it.Impressions
		}
	}
	var want []report.TrendArtifact
	for name, imps := range wantArt {
		a := report.TrendArtifact{Item: name, Impressions: imps, Released: []bool{imps[0] > 0, imps[1] > 0}}
		a.Total = imps[0] + imps[1]
		want = append(want, a)
	}
	sort.Slice(want, func(a, b int) bool {
		if want[a].Total != want[b].Total {
			return want[a].Total > want[b].Total
		}
		return want[a].Item < want[b].Item
	})
	if len(data.Trends) != 1 || !reflect.DeepEqual(data.Trends[0].Epochs, []string{q1.Epoch, q2.Epoch}) {
		t.Fatalf("trends %+v, want one over %s and %s", data.Trends, q1.Epoch, q2.Epoch)
	}
	if !reflect.DeepEqual(data.Trends[0].Artifacts, want) {
		t.Errorf("trend artifacts:\n got  %+v\n want %+v", data.Trends[0].Artifacts, want)
	}
	if len(data.PDD) != 1 || len(data.PDD[0].Days) != 3 {
		t.Fatalf("PDD %+v, want campaign flu with 3 days", data.PDD)
	}
	c := data.PDD[0]
	var days []string
	for _, d := range c.Days {
		days = append(days, fmt.Sprintf("%s %v %s", d.Day.Format("01-02"), d.Released, d.Reason))
	}
	if got := fmt.Sprint(days); got != "[03-01 true  03-02 false lost 03-03 false budget]" {
		t.Errorf("PDD days %s", got)
	}
	if len(c.Keywords) != 2 || c.Keywords[0].Keyword != "flu" || c.Keywords[0].Counts[0] != 4 || c.Keywords[1].Keyword != "it's" ||
		!c.Keywords[1].Named || c.Keywords[1].Counts[0] != 1 || c.Keywords[0].Total != 4 {
		t.Errorf("PDD keywords %+v, want flu (4 on day 1) and the named it's (1)", c.Keywords)
	}
	if len(data.Ledger) != 1 {
		t.Fatalf("ledger %+v, want the one spend", data.Ledger)
	}
	l := data.Ledger[0]
	l.SpentAt = l.SpentAt.UTC()
	if !reflect.DeepEqual(l, spend) {
		t.Errorf("ledger row %+v, want %+v", l, spend)
	}
}
