package release

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// dpItems is makeItems as a DP release has them: no variant.
func dpItems(key Key, n int) []Item {
	items := makeItems(key, n)
	for i := range items {
		items[i].Variant = ""
	}
	return items
}

// TestDrawnReleaseRefusesVariant: a DP candidate row carrying a variant
// (an original form chosen exactly from the reports, outside the
// release's (ε, δ)) is refused before anything is written, ledger
// included; the same rows without it are written.
func TestDrawnReleaseRefusesVariant(t *testing.T) {
	w := openTestWriter(t)
	ctx := ctx30(t)
	key := Key{"query", "2006-05", "dp-gsu", 2}
	spend := Spend{Dataset: "aol", Epoch: key.Epoch, App: key.App, Policy: key.Policy, K: key.K, Epsilon: 1, Delta: 0.001, Params: "test"}
	if _, _, err := w.WriteDrawnRelease(ctx, key, makeItems(key, 3), nil, time.Time{}, spend, Budget{}); err == nil || !strings.Contains(err.Error(), "variant") {
		t.Fatalf("a DP row with a variant: err %v, want a refusal naming the variant", err)
	}
	if rows, err := w.Ledger(ctx, "aol", key.Epoch); err != nil || len(rows) != 0 || rawCount(t, w, "released_items", key) != 0 {
		t.Fatalf("refused release left %d ledger rows (%v) or items", len(rows), err)
	}
	got, _, err := w.WriteDrawnRelease(ctx, key, dpItems(key, 3), nil, time.Time{}, spend, Budget{})
	if err != nil || len(got) != 3 {
		t.Fatalf("the same rows without variants: %d rows, %v", len(got), err)
	}
}

// TestLedgerRefusesOverBudget: with an ε budget of 1 per (dataset, epoch),
// a 0.6 release passes and is recorded, a second 0.6 release of the same
// epoch is refused with ErrOverBudget and leaves no trace, a redo of the
// first spends nothing again, and another epoch has its own budget.
func TestLedgerRefusesOverBudget(t *testing.T) {
	w := openTestWriter(t)
	ctx := ctx30(t)
	budget := Budget{Epsilon: 1, Delta: 0.01}
	spend := func(k Key) Spend {
		return Spend{Dataset: "aol", Epoch: k.Epoch, App: k.App, Policy: k.Policy, K: k.K, Epsilon: 0.6, Delta: 0.001, Params: "test"}
	}
	a := Key{"query", "2006-03", "dp-u", 2}
	b := Key{"click", "2006-03", "dp-u", 2}
	if err := w.WriteSpendingRelease(ctx, a, dpItems(a, 3), nil, time.Time{}, spend(a), budget); err != nil {
		t.Fatal(err)
	}
	err := w.WriteSpendingRelease(ctx, b, dpItems(b, 3), nil, time.Time{}, spend(b), budget)
	if !errors.Is(err, ErrOverBudget) {
		t.Fatalf("second release: err %v, want ErrOverBudget", err)
	}
	t.Logf("refusal: %v", err)
	if done, _ := w.IsReleased(ctx, b); done || rawCount(t, w, "released_items", b) != 0 {
		t.Fatal("refused release left rows")
	}
	if err := w.CheckBudget(ctx, spend(b), budget); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("CheckBudget: %v", err)
	}
	// redo of a: skipped, no second spend
	if err := w.WriteSpendingRelease(ctx, a, dpItems(a, 3), nil, time.Time{}, spend(a), budget); err != nil {
		t.Fatal(err)
	}
	rows, err := w.Ledger(ctx, "aol", "2006-03")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Key() != a || rows[0].Epsilon != 0.6 || rows[0].Delta != 0.001 {
		t.Fatalf("ledger %+v", rows)
	}
	if n := rawCount(t, w, "released_items", a); n != 3 {
		t.Fatalf("released %d rows of a", n)
	}
	// another epoch: its own budget
	c := Key{"click", "2006-04", "dp-u", 2}
	if err := w.WriteSpendingRelease(ctx, c, nil, nil, time.Time{}, spend(c), budget); err != nil {
		t.Fatal(err)
	}
	// delta budget
	d := Key{"url", "2006-04", "dp-u", 2}
	sd := spend(d)
	sd.Epsilon, sd.Delta = 0.1, 0.02
	if err := w.WriteSpendingRelease(ctx, d, nil, nil, time.Time{}, sd, budget); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("delta over budget: %v", err)
	}
}

// TestLedgerPDDDaySpendsOnce: a noisy PDD day spends from the budget of
// (dataset, day) exactly once — an attempt interrupted after its ledger row
// is redone without a second spend, a complete day is skipped — and a day
// that would exceed the budget (shared with other campaigns and with
// threshold releases whose epoch is that day) is refused with an error
// naming campaign, day and budget, and leaves no trace.
func TestLedgerPDDDaySpendsOnce(t *testing.T) {
	w := openTestWriter(t)
	ctx := ctx30(t)
	day := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	if k := PDDLedgerKey("flu", day.Add(13*time.Hour)); k != (Key{"flu", "2006-03-01", "pdd-laplace", 0}) {
		t.Fatalf("PDDLedgerKey = %v", k)
	}
	round := func(campaign string) PDDRound {
		return PDDRound{Campaign: campaign, Day: day, Active: 10, Grouped: 10, Decrypted: 8, Groups: 2, Complete: 1, Lost: 1,
			Confidence: 0.8, Epsilon: 0.5, MaxCount: 2, Counts: []KeywordCount{{"flu", 3}, {"fever", -1}}}
	}
	spend := func(campaign string, eps float64) Spend {
		return Spend{Dataset: "aol", Epoch: "2006-03-01", App: campaign, Policy: "pdd-laplace", Epsilon: eps, Params: "test"}
	}
	budget := Budget{Epsilon: 2}
	ledger := func(want ...Spend) {
		t.Helper()
		rows, err := w.DatasetLedger(ctx, "aol")
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(want) {
			t.Fatalf("ledger has %d rows, want %d: %+v", len(rows), len(want), rows)
		}
		for i, r := range rows {
			if r.Key() != want[i].Key() || r.Epsilon != want[i].Epsilon || r.Delta != 0 || r.Params != want[i].Params {
				t.Fatalf("ledger row %d = %+v, want %+v", i, r, want[i])
			}
		}
	}

	// crash after the ledger row, before the day's pdd_rounds row
	w.Hook = func(stage string) error {
		if stage == "before-pdd-rounds-row" {
			return errors.New("injected crash")
		}
		return nil
	}
	if err := w.WriteSpendingPDDRound(ctx, round("flu"), time.Time{}, spend("flu", 1.5), budget); err == nil {
		t.Fatal("interrupted write returned nil")
	}
	w.Hook = nil
	if done, _ := w.IsPDDReleased(ctx, "flu", day); done {
		t.Fatal("interrupted day is complete")
	}
	ledger(spend("flu", 1.5))
	// redo: the day is written, nothing spent again; a third call skips
	for range 2 {
		if err := w.WriteSpendingPDDRound(ctx, round("flu"), time.Time{}, spend("flu", 1.5), budget); err != nil {
			t.Fatal(err)
		}
	}
	if done, _ := w.IsPDDReleased(ctx, "flu", day); !done {
		t.Fatal("redone day not complete")
	}
	if got, _ := w.ReadKeywordDaily(ctx, "flu"); len(got) != 2 {
		t.Fatalf("keyword_daily %+v", got)
	}
	ledger(spend("flu", 1.5))

	// another campaign of the same day: 1.5 + 1 > 2
	err := w.WriteSpendingPDDRound(ctx, round("cold"), time.Time{}, spend("cold", 1), budget)
	if !errors.Is(err, ErrOverBudget) {
		t.Fatalf("over budget: err %v, want ErrOverBudget", err)
	}
	for _, s := range []string{`campaign "cold"`, "day 2006-03-01", "budget 2", `dataset "aol"`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("refusal %q does not say %s", err, s)
		}
	}
	if done, _ := w.IsPDDReleased(ctx, "cold", day); done {
		t.Fatal("refused day was written")
	}
	// a threshold release whose epoch is the day shares its budget
	tk := Key{"query", "2006-03-01", "dp-u", 2}
	ts := Spend{Dataset: "aol", Epoch: tk.Epoch, App: tk.App, Policy: tk.Policy, K: tk.K, Epsilon: 0.6, Params: "test"}
	if err := w.WriteSpendingRelease(ctx, tk, nil, nil, time.Time{}, ts, budget); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("threshold release on the spent day: %v", err)
	}
	ledger(spend("flu", 1.5))

	// a spend for another key, or a day the writer would refuse: nothing spent
	if err := w.WriteSpendingPDDRound(ctx, round("cold"), time.Time{}, spend("flu", 0.1), Budget{}); err == nil {
		t.Fatal("spend of another campaign accepted")
	}
	bad := round("cold")
	bad.Lost = 0
	if err := w.WriteSpendingPDDRound(ctx, bad, time.Time{}, spend("cold", 0.1), Budget{}); err == nil {
		t.Fatal("inconsistent day accepted")
	}
	ledger(spend("flu", 1.5))
}
