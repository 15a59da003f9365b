package release

import (
	"errors"
	"testing"
	"time"
)

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
	if err := w.WriteSpendingRelease(ctx, a, makeItems(a, 3), nil, time.Time{}, spend(a), budget); err != nil {
		t.Fatal(err)
	}
	err := w.WriteSpendingRelease(ctx, b, makeItems(b, 3), nil, time.Time{}, spend(b), budget)
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
	if err := w.WriteSpendingRelease(ctx, a, makeItems(a, 3), nil, time.Time{}, spend(a), budget); err != nil {
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
