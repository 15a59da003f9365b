package release

import (
	"context"
	"fmt"
	"time"
)

// PDDStatusPolicy is the policy column of the ledger row a Prio3 day's
// released/withheld status spends when the day is withheld
// (release/prio3 StatusSpend): the leader's noisy count test, (ε_c,
// δ)-DP per person-day. A released day charges its status on its
// PDDPolicy row with the totals; a withheld day releases nothing else, so
// its status has a row of its own, under another key of the same
// (dataset, day) budget.
const PDDStatusPolicy = "pdd-status"

// PDDStatusLedgerKey is the ledger key of the withheld status of the PDD
// day (campaign, day): App = the campaign, Epoch = the UTC day as
// YYYY-MM-DD, Policy = PDDStatusPolicy, K = 0.
func PDDStatusLedgerKey(campaign string, day time.Time) Key {
	return Key{App: campaign, Epoch: dayArg(day), Policy: PDDStatusPolicy}
}

// SpendPDDStatus appends spend, the status of a withheld PDD day (key
// PDDStatusLedgerKey), to the privacy ledger of (spend.Dataset, day) and
// reports whether it wrote the row. Idempotent per key: a key already in
// the ledger spends nothing again (spent false, nil). When the day's
// ledger plus spend exceeds budget it returns an error wrapping
// ErrOverBudget naming the campaign, the day and the numbers, and writes
// nothing. ctx bounds the call (DefaultTimeout when it has no deadline).
func (w *Writer) SpendPDDStatus(ctx context.Context, spend Spend, budget Budget) (spent bool, err error) {
	key := spend.Key()
	what := "pdd status " + key.App + "/" + key.Epoch
	if key.Policy != PDDStatusPolicy || key.K != 0 || key.App == "" || len(key.App) > 64 {
		return false, fmt.Errorf("%s: ledger spend is for %s, want a PDDStatusLedgerKey", what, key)
	}
	if _, err := time.Parse(time.DateOnly, key.Epoch); err != nil {
		return false, fmt.Errorf("%s: epoch %q is not a day (YYYY-MM-DD)", what, key.Epoch)
	}
	if !validSpend(spend) {
		return false, fmt.Errorf("%s: invalid spend (epsilon %v, delta %v)", what, spend.Epsilon, spend.Delta)
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	eps, delta, has, err := w.spentOn(ctx, spend.Dataset, key)
	if err != nil || has {
		return false, err
	}
	if coord, spentSoFar, add, limit := budget.over(eps, delta, spend); coord != "" {
		return false, fmt.Errorf("%s: %w: campaign %q day %s: its withheld status would spend %s %.4g (%s) from dataset %q, which has %.4g spent on that day: %.4g > budget %.4g; recorded as withheld for the budget (raise --budget-%s or lower --status-epsilon)",
			what, ErrOverBudget, key.App, key.Epoch, coord, add, spend.Params, spend.Dataset, spentSoFar, spentSoFar+add, limit, coord)
	}
	at := spend.SpentAt
	if at.IsZero() {
		at = time.Now()
	}
	if err := w.insertSpend(ctx, what, spend, at); err != nil {
		return false, err
	}
	w.Logger.Info("privacy budget spent", "key", key.String(), "dataset", spend.Dataset,
		"epsilon", spend.Epsilon, "delta", spend.Delta, "day_epsilon_total", eps+spend.Epsilon)
	return true, nil
}
