package release

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Spend is one row of the privacy budget ledger (table privacy_ledger):
// the release of Key-like (App, Epoch, Policy, K) spent (Epsilon, Delta) of
// the budget of (Dataset, Epoch). Params describes the policy parameters
// (e.g. "d=1 shamir_k=2 threshold=4.74"), never data.
type Spend struct {
	Dataset, Epoch, App, Policy string
	K                           int
	Epsilon, Delta              float64
	Params                      string
	SpentAt                     time.Time
}

// Key returns the release key the spend belongs to.
func (s Spend) Key() Key { return Key{s.App, s.Epoch, s.Policy, s.K} }

// Budget is the privacy budget of one (dataset, epoch): the sum of the
// ledger's epsilon (delta) may not exceed Epsilon (Delta). A zero field
// means no limit on that coordinate (the ledger still records every spend).
type Budget struct {
	Epsilon, Delta float64
}

// ErrOverBudget is returned (wrapped, with the numbers) when a release
// would push its (dataset, epoch) over the configured Budget; nothing of
// that release is written.
var ErrOverBudget = errors.New("privacy budget exceeded")

// check returns an ErrOverBudget error when spent + s exceeds b.
func (b Budget) check(spentEps, spentDelta float64, s Spend) error {
	const tol = 1e-9
	if b.Epsilon > 0 && spentEps+s.Epsilon > b.Epsilon*(1+tol) {
		return fmt.Errorf("release %s: %w: epsilon %.4g already spent on dataset %q epoch %q + %.4g for this release > budget %.4g; nothing was released (raise --budget-epsilon, use a new --epoch, or lower --epsilon)",
			s.Key(), ErrOverBudget, spentEps, s.Dataset, s.Epoch, s.Epsilon, b.Epsilon)
	}
	if b.Delta > 0 && spentDelta+s.Delta > b.Delta*(1+tol) {
		return fmt.Errorf("release %s: %w: delta %.4g already spent on dataset %q epoch %q + %.4g for this release > budget %.4g; nothing was released (raise --budget-delta or use a new --epoch)",
			s.Key(), ErrOverBudget, spentDelta, s.Dataset, s.Epoch, s.Delta, b.Delta)
	}
	return nil
}

// Ledger returns the ledger rows of (dataset, epoch) in spending order.
func (w *Writer) Ledger(ctx context.Context, dataset, epoch string) ([]Spend, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	rows, err := w.conn.Query(ctx, "SELECT app, policy, k, epsilon, delta, params, spent_at FROM privacy_ledger"+
		" WHERE dataset = ? AND epoch = ? ORDER BY spent_at, app, policy, k", dataset, epoch)
	if err != nil {
		return nil, fmt.Errorf("release: read privacy_ledger for %s/%s: %w", dataset, epoch, err)
	}
	defer rows.Close()
	out := []Spend{}
	for rows.Next() {
		s := Spend{Dataset: dataset, Epoch: epoch}
		var k uint32
		if err := rows.Scan(&s.App, &s.Policy, &k, &s.Epsilon, &s.Delta, &s.Params, &s.SpentAt); err != nil {
			return nil, fmt.Errorf("release: scan privacy_ledger: %w", err)
		}
		s.K = int(k)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("release: read privacy_ledger: %w", err)
	}
	return out, nil
}

// spentOn sums the ledger of (dataset, epoch) and reports whether key has
// a row already.
func (w *Writer) spentOn(ctx context.Context, dataset string, key Key) (eps, delta float64, has bool, err error) {
	rows, err := w.Ledger(ctx, dataset, key.Epoch)
	if err != nil {
		return 0, 0, false, err
	}
	for _, r := range rows {
		eps += r.Epsilon
		delta += r.Delta
		if r.Key() == key {
			has = true
		}
	}
	return eps, delta, has, nil
}

// CheckBudget returns an error wrapping ErrOverBudget when spend would
// exceed budget given the ledger so far (nil when the spend's key is already
// in the ledger). It writes nothing; `crowdlog run` calls it before
// ingesting so an over-budget run fails at once.
func (w *Writer) CheckBudget(ctx context.Context, spend Spend, budget Budget) error {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	eps, delta, has, err := w.spentOn(ctx, spend.Dataset, spend.Key())
	if err != nil || has {
		return err
	}
	return budget.check(eps, delta, spend)
}

// WriteSpendingRelease writes a differentially private release: it checks
// the (dataset, epoch) budget, appends spend to privacy_ledger and then
// writes the release as WriteKeyedRelease does. spend's (App, Epoch,
// Policy, K) must equal key.
//
// Order and idempotence: a completed release (releases row present) is
// skipped. A ledger row for key without a releases row is an interrupted
// attempt: it is not spent again, the release is redone. Otherwise, when
// the sum of the ledger plus spend exceeds budget, it returns an error
// wrapping ErrOverBudget and writes nothing. The ledger row goes in first,
// so no release is visible without its spend. Two writers racing on one
// (dataset, epoch) are not coordinated: run one release stage per dataset.
func (w *Writer) WriteSpendingRelease(ctx context.Context, key Key, items []Item, undec []Undecrypted, releasedAt time.Time, spend Spend, budget Budget) error {
	if spend.Key() != key {
		return fmt.Errorf("release %s: ledger spend is for %s", key, spend.Key())
	}
	if !(spend.Epsilon >= 0) || !(spend.Delta >= 0) || math.IsInf(spend.Epsilon, 0) || math.IsInf(spend.Delta, 0) {
		return fmt.Errorf("release %s: invalid spend (epsilon %v, delta %v)", key, spend.Epsilon, spend.Delta)
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	done, err := w.IsReleased(ctx, key)
	if err != nil {
		return err
	}
	if done {
		w.Logger.Info("release already written; skipping", "key", key.String())
		return nil
	}
	eps, delta, has, err := w.spentOn(ctx, spend.Dataset, key)
	if err != nil {
		return err
	}
	if !has {
		if err := budget.check(eps, delta, spend); err != nil {
			return err
		}
		if releasedAt.IsZero() {
			releasedAt = time.Now()
		}
		at := spend.SpentAt
		if at.IsZero() {
			at = releasedAt
		}
		b, err := w.conn.PrepareBatch(ctx, "INSERT INTO privacy_ledger (dataset, epoch, app, policy, k, epsilon, delta, params, spent_at)")
		if err != nil {
			return fmt.Errorf("release %s: prepare privacy_ledger insert: %w", key, err)
		}
		if err := b.Append(spend.Dataset, spend.Epoch, spend.App, spend.Policy, uint32(spend.K), spend.Epsilon, spend.Delta,
			spend.Params, at.UTC().Truncate(time.Second)); err != nil {
			b.Abort()
			return fmt.Errorf("release %s: append ledger row: %w", key, err)
		}
		if err := b.Send(); err != nil {
			return fmt.Errorf("release %s: insert ledger row: %w", key, err)
		}
		w.Logger.Info("privacy budget spent", "key", key.String(), "dataset", spend.Dataset,
			"epsilon", spend.Epsilon, "delta", spend.Delta, "epoch_epsilon_total", eps+spend.Epsilon)
	}
	return w.WriteKeyedRelease(ctx, key, items, undec, releasedAt)
}
