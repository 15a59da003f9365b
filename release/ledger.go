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

// over reports the first coordinate ("epsilon" or "delta") on which
// spent + s exceeds b, with the numbers; coord is "" when s fits.
func (b Budget) over(spentEps, spentDelta float64, s Spend) (coord string, spent, add, limit float64) {
	const tol = 1e-9
	if b.Epsilon > 0 && spentEps+s.Epsilon > b.Epsilon*(1+tol) {
		return "epsilon", spentEps, s.Epsilon, b.Epsilon
	}
	if b.Delta > 0 && spentDelta+s.Delta > b.Delta*(1+tol) {
		return "delta", spentDelta, s.Delta, b.Delta
	}
	return "", 0, 0, 0
}

// check returns an ErrOverBudget error when spent + s exceeds b.
func (b Budget) check(spentEps, spentDelta float64, s Spend) error {
	switch coord, spent, add, limit := b.over(spentEps, spentDelta, s); coord {
	case "epsilon":
		return fmt.Errorf("release %s: %w: epsilon %.4g already spent on dataset %q epoch %q + %.4g for this release > budget %.4g; nothing was released (raise --budget-epsilon, use a new --epoch, or lower --epsilon)",
			s.Key(), ErrOverBudget, spent, s.Dataset, s.Epoch, add, limit)
	case "delta":
		return fmt.Errorf("release %s: %w: delta %.4g already spent on dataset %q epoch %q + %.4g for this release > budget %.4g; nothing was released (raise --budget-delta or use a new --epoch)",
			s.Key(), ErrOverBudget, spent, s.Dataset, s.Epoch, add, limit)
	}
	return nil
}

// Ledger returns the ledger rows of (dataset, epoch) in spending order.
func (w *Writer) Ledger(ctx context.Context, dataset, epoch string) ([]Spend, error) {
	return w.readLedger(ctx, dataset, &epoch)
}

// DatasetLedger returns every ledger row of dataset, all epochs (threshold
// epochs and PDD days alike), ordered by epoch, then in spending order.
func (w *Writer) DatasetLedger(ctx context.Context, dataset string) ([]Spend, error) {
	return w.readLedger(ctx, dataset, nil)
}

// readLedger reads the rows of dataset, of one epoch when epoch is not nil.
func (w *Writer) readLedger(ctx context.Context, dataset string, epoch *string) ([]Spend, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	where, args, what := " WHERE dataset = ?", []any{dataset}, dataset
	if epoch != nil {
		where, args, what = where+" AND epoch = ?", append(args, *epoch), dataset+"/"+*epoch
	}
	rows, err := w.conn.Query(ctx, "SELECT epoch, app, policy, k, epsilon, delta, params, spent_at FROM privacy_ledger"+
		where+" ORDER BY epoch, spent_at, app, policy, k", args...)
	if err != nil {
		return nil, fmt.Errorf("release: read privacy_ledger for %s: %w", what, err)
	}
	defer rows.Close()
	out := []Spend{}
	for rows.Next() {
		s := Spend{Dataset: dataset}
		var k uint32
		if err := rows.Scan(&s.Epoch, &s.App, &s.Policy, &k, &s.Epsilon, &s.Delta, &s.Params, &s.SpentAt); err != nil {
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

// WriteSpendingRelease is WriteDrawnRelease without its results: items
// and undec are this attempt's candidate draw of key.
func (w *Writer) WriteSpendingRelease(ctx context.Context, key Key, items []Item, undec []Undecrypted, releasedAt time.Time, spend Spend, budget Budget) error {
	_, _, err := w.WriteDrawnRelease(ctx, key, items, undec, releasedAt, spend, budget)
	return err
}

// WriteDrawnRelease writes a differentially private release of key so
// that its noise is drawn once: items and undec are this attempt's
// candidate (noisy items of key, each with key and an empty Variant: a DP
// row is the normalized item and its noisy counts, never an original form
// chosen exactly from the reports — docs/policies.md; Item unique), used
// only when no draw of key is stored yet. It returns what the
// release holds: the stored draw, or for a release already complete the
// rows read back (ReleasedItems, UndecryptedSummary).
//
// Steps, each idempotent on redo: (1) a complete release (releases row
// present) is returned as it is, nothing written; (2) without a ledger
// row for key, the (dataset, epoch) budget is checked: over it, an error
// wrapping ErrOverBudget and nothing written; (3) the draw: the stored one
// if any, else the candidate, stored in release_draws before anything an
// analyst can see (docs/sql.md); (4) the ledger row, once: a ledger row
// without a releases row is an interrupted attempt, not spent again; (5)
// the draw's rows as WriteKeyedRelease writes them, rows of an interrupted
// attempt deleted first, the releases row last and only after the draw
// was read again and is still the canonical one (see draws.go). A stored
// draw that does not decode stops the release with ErrBadDraw. spend's
// (App, Epoch, Policy, K) must equal key. ctx bounds the call
// (DefaultTimeout when it has no deadline).
func (w *Writer) WriteDrawnRelease(ctx context.Context, key Key, items []Item, undec []Undecrypted, releasedAt time.Time, spend Spend, budget Budget) ([]Item, []Undecrypted, error) {
	if spend.Key() != key {
		return nil, nil, fmt.Errorf("release %s: ledger spend is for %s", key, spend.Key())
	}
	if !validSpend(spend) {
		return nil, nil, fmt.Errorf("release %s: invalid spend (epsilon %v, delta %v)", key, spend.Epsilon, spend.Delta)
	}
	if _, err := checkItems(key, items); err != nil {
		return nil, nil, err
	}
	for i, it := range items {
		if it.Variant != "" {
			return nil, nil, fmt.Errorf("release %s: item %d carries a variant; a DP release publishes the normalized item only (release/stage.State.ReleasePolicy leaves Variant empty): an exact original form is outside the recorded (ε, δ)", key, i)
		}
	}
	if _, err := mergeUndecrypted(key, undec); err != nil {
		return nil, nil, err
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	done, err := w.IsReleased(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	if done {
		w.Logger.Info("release already written; skipping", "key", key.String())
		return w.readRelease(ctx, key)
	}
	eps, delta, has, err := w.spentOn(ctx, spend.Dataset, key)
	if err != nil {
		return nil, nil, err
	}
	if !has {
		if err := budget.check(eps, delta, spend); err != nil {
			return nil, nil, err
		}
	}
	d, err := w.draw(ctx, key, func() ([]byte, error) { return encodeDraw(items, undec) })
	if err != nil {
		return nil, nil, err
	}
	items, undec, err = DecodeDraw(key, d.body)
	if err != nil {
		return nil, nil, err
	}
	if !has {
		if releasedAt.IsZero() {
			releasedAt = time.Now()
		}
		at := spend.SpentAt
		if at.IsZero() {
			at = releasedAt
		}
		if err := w.insertSpend(ctx, "release "+key.String(), spend, at); err != nil {
			return nil, nil, err
		}
		w.Logger.Info("privacy budget spent", "key", key.String(), "dataset", spend.Dataset,
			"epsilon", spend.Epsilon, "delta", spend.Delta, "epoch_epsilon_total", eps+spend.Epsilon)
		if err := w.runHook("ledger"); err != nil {
			return nil, nil, err
		}
	}
	err = w.writeKeyed(ctx, key, items, undec, releasedAt, func(ctx context.Context) error { return w.checkDraw(ctx, key, d.id) })
	if err != nil {
		return nil, nil, err
	}
	return items, undec, nil
}

// readRelease reads back the items and undecrypted lines of a complete
// release of key.
func (w *Writer) readRelease(ctx context.Context, key Key) ([]Item, []Undecrypted, error) {
	items, err := w.ReleasedItems(ctx, key.App, key.Epoch, key.Policy, key.K)
	if err != nil {
		return nil, nil, err
	}
	undec, err := w.UndecryptedSummary(ctx, key.App, key.Epoch, key.Policy, key.K)
	if err != nil {
		return nil, nil, err
	}
	return items, undec, nil
}

// insertSpend appends spend to privacy_ledger at at (UTC, truncated to the
// second); what names the release in errors.
func (w *Writer) insertSpend(ctx context.Context, what string, spend Spend, at time.Time) error {
	b, err := w.conn.PrepareBatch(ctx, "INSERT INTO privacy_ledger (dataset, epoch, app, policy, k, epsilon, delta, params, spent_at)")
	if err != nil {
		return fmt.Errorf("%s: prepare privacy_ledger insert: %w", what, err)
	}
	if err := b.Append(spend.Dataset, spend.Epoch, spend.App, spend.Policy, uint32(spend.K), spend.Epsilon, spend.Delta,
		spend.Params, at.UTC().Truncate(time.Second)); err != nil {
		b.Abort()
		return fmt.Errorf("%s: append ledger row: %w", what, err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("%s: insert ledger row: %w", what, err)
	}
	return nil
}

func validSpend(s Spend) bool {
	return s.Epsilon >= 0 && s.Delta >= 0 && !math.IsInf(s.Epsilon, 0) && !math.IsInf(s.Delta, 0)
}

// PDDPolicy is the policy column of the ledger rows of noisy Private Data
// Donor days (release/pdd): the Laplace mechanism of PDD mode. It is no
// threshold policy name (release/policy), so a PDD row never shares a key
// with a threshold release.
const PDDPolicy = "pdd-laplace"

// PDDLedgerKey is the ledger key of the PDD day (campaign, day): App = the
// campaign, Epoch = the UTC day as YYYY-MM-DD, Policy = PDDPolicy, K = 0.
// The day is the epoch because a PDD round is one day of the clients' data,
// as an epoch is in the threshold mode: the budget of (dataset, day) is
// shared by every campaign, and every threshold release whose epoch is
// named after that day, in the dataset.
func PDDLedgerKey(campaign string, day time.Time) Key {
	return Key{App: campaign, Epoch: dayArg(day), Policy: PDDPolicy}
}

// WriteSpendingPDDRound writes a noisy PDD day as WritePDDRound does,
// after spending spend from the budget of (spend.Dataset, day) as
// WriteSpendingRelease does for a threshold DP release. spend's key must
// be PDDLedgerKey(r.Campaign, r.Day).
//
// Order and idempotence are WriteDrawnRelease's: a complete day
// (pdd_rounds row present) is skipped and spends nothing; the day's noisy
// counts are stored as its draw before anything else, and a redo writes
// the stored draw, not r; a ledger row of the day without its pdd_rounds
// row is an interrupted attempt, not spent again, and the day is
// rewritten. Otherwise, when the (dataset, day)
// ledger plus spend exceeds budget, it returns an error wrapping
// ErrOverBudget that names the campaign, the day and the budget, and
// writes nothing. The ledger row goes in first, so no day is visible
// without its spend; a day WritePDDRound would refuse (bad campaign, day,
// groups, duplicate keywords) is refused before anything is spent.
func (w *Writer) WriteSpendingPDDRound(ctx context.Context, r PDDRound, releasedAt time.Time, spend Spend, budget Budget) error {
	_, err := w.WriteDrawnPDDRound(ctx, r, releasedAt, spend, budget)
	return err
}

// WriteDrawnPDDRound is WriteSpendingPDDRound returning the day it
// released: r on a first attempt, the stored draw on a redo (r is then
// only a candidate: the day's noise is drawn once, see draws.go), and r
// when the day was complete already.
func (w *Writer) WriteDrawnPDDRound(ctx context.Context, r PDDRound, releasedAt time.Time, spend Spend, budget Budget) (PDDRound, error) {
	key := PDDLedgerKey(r.Campaign, r.Day)
	what := "pdd release " + pddKey(r.Campaign, r.Day)
	if spend.Key() != key {
		return PDDRound{}, fmt.Errorf("%s: ledger spend is for %s, want %s", what, spend.Key(), key)
	}
	if !validSpend(spend) {
		return PDDRound{}, fmt.Errorf("%s: invalid spend (epsilon %v, delta %v)", what, spend.Epsilon, spend.Delta)
	}
	if err := checkPDDRound(r); err != nil {
		return PDDRound{}, fmt.Errorf("%s: %w", what, err)
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	done, err := w.IsPDDReleased(ctx, r.Campaign, r.Day)
	if err != nil {
		return PDDRound{}, err
	}
	if done {
		w.Logger.Info("pdd day already written; skipping", "key", pddKey(r.Campaign, r.Day))
		return r, nil
	}
	eps, delta, has, err := w.spentOn(ctx, spend.Dataset, key)
	if err != nil {
		return PDDRound{}, err
	}
	if !has {
		if coord, spent, add, limit := budget.over(eps, delta, spend); coord != "" {
			return PDDRound{}, fmt.Errorf("%s: %w: campaign %q day %s would spend %s %.4g (%s) from dataset %q, which has %.4g spent on that day: %.4g > budget %.4g; nothing was released (raise --budget-%s, lower --epsilon, or monitor fewer keywords: a noisy day spends keywords × epsilon)",
				what, ErrOverBudget, r.Campaign, key.Epoch, coord, add, spend.Params, spend.Dataset, spent, spent+add, limit, coord)
		}
	}
	d, err := w.draw(ctx, key, func() ([]byte, error) { return encodePDDDraw(r) })
	if err != nil {
		return PDDRound{}, err
	}
	if r, err = decodePDDDraw(r.Campaign, r.Day, d.body); err != nil {
		return PDDRound{}, err
	}
	if !has {
		at := spend.SpentAt
		if at.IsZero() {
			at = releasedAt
		}
		if at.IsZero() {
			at = time.Now()
		}
		if err := w.insertSpend(ctx, what, spend, at); err != nil {
			return PDDRound{}, err
		}
		w.Logger.Info("privacy budget spent", "key", key.String(), "dataset", spend.Dataset,
			"epsilon", spend.Epsilon, "delta", spend.Delta, "day_epsilon_total", eps+spend.Epsilon)
		if err := w.runHook("ledger"); err != nil {
			return PDDRound{}, err
		}
	}
	if err := w.writePDDRound(ctx, r, releasedAt, func(ctx context.Context) error { return w.checkDraw(ctx, key, d.id) }); err != nil {
		return PDDRound{}, err
	}
	return r, nil
}

// checkPDDRound returns the error WritePDDRound would refuse r with before
// writing anything (nil when it would write it).
func checkPDDRound(r PDDRound) error {
	if r.Campaign == "" || len(r.Campaign) > 64 {
		return errors.New("campaign name must be 1–64 bytes")
	}
	if d := r.Day.UTC().Truncate(24*time.Hour).Unix() / 86400; d < 0 || d > maxDateDay {
		return errors.New("day outside the ClickHouse Date range 1970-01-01..2149-06-06")
	}
	if math.IsNaN(r.Confidence) || math.IsInf(r.Confidence, 0) || math.IsNaN(r.Epsilon) || math.IsInf(r.Epsilon, 0) || r.Epsilon < 0 {
		return fmt.Errorf("confidence %v and epsilon %v must be finite (epsilon ≥ 0)", r.Confidence, r.Epsilon)
	}
	if r.Complete+r.Recovered+r.Lost != r.Groups {
		return fmt.Errorf("%d complete + %d recovered + %d lost groups ≠ %d groups", r.Complete, r.Recovered, r.Lost, r.Groups)
	}
	seen := make(map[string]struct{}, len(r.Counts))
	for _, c := range r.Counts {
		if _, dup := seen[c.Keyword]; dup {
			return fmt.Errorf("keyword %q appears twice; merge counts before releasing", c.Keyword)
		}
		seen[c.Keyword] = struct{}{}
	}
	return nil
}
