package release

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"
)

// Private Data Donor mode (Primault et al., WWW 2019): the ClickHouse side
// of the PDD release stage (release/pdd). Tables pdd_keyword_counts and
// pdd_rounds (schema.sql), view keyword_daily (views.sql); the design is in
// docs/pdd-release.md.

// PDDRound is one released day of a PDD campaign: the day's keyword counts
// and how they were obtained.
type PDDRound struct {
	// Campaign names the campaign (1–64 bytes).
	Campaign string
	// Day is the round's UTC calendar day (its 00:00 UTC; other times are
	// truncated to the day). ClickHouse Date: 1970-01-01 ≤ Day ≤ 2149-06-06.
	Day time.Time
	// Active is the number of clients active on Day, Grouped those put in
	// groups, Decrypted the members whose vectors the released sums cover.
	Active, Grouped, Decrypted uint32
	// Groups is the number of groups of the round: Complete + Recovered +
	// Lost.
	Groups, Complete, Recovered, Lost uint32
	// Confidence is Decrypted / Active (PDD §4.5), 0 when Active = 0.
	Confidence float64
	// Epsilon is the Laplace ε per (day, keyword), 0 for exact counts;
	// MaxCount the per-client per-keyword per-day clip (the noise's
	// sensitivity), recorded with it.
	Epsilon  float64
	MaxCount uint32
	// Counts are the released counts, one per keyword (noisy counts may be
	// negative). Zero counts are not written; keywords must be distinct.
	Counts []KeywordCount
}

// KeywordCount is one keyword's released count of one day.
type KeywordCount struct {
	Keyword string
	Count   int64
}

// KeywordDaily is one row of the keyword_daily view: keyword Keyword was
// counted Count times on Day in Campaign (exact, or noisy when the day was
// released with ε > 0), and Confidence is that day's share of active
// clients whose data the count covers.
type KeywordDaily struct {
	Campaign   string
	Day        time.Time // 00:00 UTC
	Keyword    string
	Count      int64
	Confidence float64
}

// maxDateDay is the last day a ClickHouse Date holds (UInt16 days since
// 1970-01-01).
const maxDateDay = math.MaxUint16

const pddWhere = " WHERE campaign = ? AND day = toDate(?)"

func dayArg(day time.Time) string { return day.UTC().Format("2006-01-02") }

func pddKey(campaign string, day time.Time) string { return campaign + "/" + dayArg(day) }

// WritePDDRound writes one PDD day: its non-zero counts into
// pdd_keyword_counts, then LAST its row into pdd_rounds, at releasedAt
// truncated to the second (time.Now() when zero).
//
// Idempotent: if pdd_rounds already has the (campaign, day) row it does
// nothing and returns nil (a restarted stage never rewrites a released day,
// so noisy counts are drawn and published once). Otherwise rows of an
// interrupted earlier attempt are deleted first (ALTER TABLE ... DELETE,
// waited for), so a redo leaves exactly one copy; the keyword_daily view
// hides a day until its pdd_rounds row exists. Errors say what was
// invalid or which statement failed; ctx bounds the call (DefaultTimeout
// when it has no deadline).
func (w *Writer) WritePDDRound(ctx context.Context, r PDDRound, releasedAt time.Time) error {
	return w.writePDDRound(ctx, r, releasedAt, nil)
}

// writePDDRound is WritePDDRound; beforeRow, when set, runs just before
// the pdd_rounds row and aborts the write with its error.
func (w *Writer) writePDDRound(ctx context.Context, r PDDRound, releasedAt time.Time, beforeRow func(context.Context) error) error {
	day := r.Day.UTC().Truncate(24 * time.Hour)
	key := pddKey(r.Campaign, day)
	if r.Campaign == "" || len(r.Campaign) > 64 {
		return fmt.Errorf("pdd release %s: campaign name must be 1–64 bytes", key)
	}
	if d := day.Unix() / 86400; d < 0 || d > maxDateDay {
		return fmt.Errorf("pdd release %s: day outside the ClickHouse Date range 1970-01-01..2149-06-06", key)
	}
	if math.IsNaN(r.Confidence) || math.IsInf(r.Confidence, 0) || math.IsNaN(r.Epsilon) || math.IsInf(r.Epsilon, 0) || r.Epsilon < 0 {
		return fmt.Errorf("pdd release %s: confidence %v and epsilon %v must be finite (epsilon ≥ 0)", key, r.Confidence, r.Epsilon)
	}
	if r.Complete+r.Recovered+r.Lost != r.Groups {
		return fmt.Errorf("pdd release %s: %d complete + %d recovered + %d lost groups ≠ %d groups",
			key, r.Complete, r.Recovered, r.Lost, r.Groups)
	}
	seen := make(map[string]struct{}, len(r.Counts))
	rows := make([]KeywordCount, 0, len(r.Counts))
	for _, c := range r.Counts {
		if _, dup := seen[c.Keyword]; dup {
			return fmt.Errorf("pdd release %s: keyword %q appears twice; merge counts before releasing", key, c.Keyword)
		}
		seen[c.Keyword] = struct{}{}
		if c.Count != 0 {
			rows = append(rows, c)
		}
	}
	if releasedAt.IsZero() {
		releasedAt = time.Now()
	}
	releasedAt = releasedAt.UTC().Truncate(time.Second)

	ctx, cancel := withDeadline(ctx)
	defer cancel()
	done, err := w.IsPDDReleased(ctx, r.Campaign, day)
	if err != nil {
		return err
	}
	if done {
		w.Logger.Info("pdd day already written; skipping", "key", key)
		return nil
	}
	if err := w.deletePartial(ctx, "pdd_keyword_counts", "pdd release "+key, pddWhere, r.Campaign, dayArg(day)); err != nil {
		return err
	}
	size := w.BatchSize
	if size <= 0 {
		size = DefaultBatchSize
	}
	for start := 0; start < len(rows); start += size {
		end := min(start+size, len(rows))
		b, err := w.conn.PrepareBatch(ctx, "INSERT INTO pdd_keyword_counts (campaign, day, keyword, count, released_at)")
		if err != nil {
			return fmt.Errorf("pdd release %s: prepare pdd_keyword_counts insert: %w", key, err)
		}
		for _, c := range rows[start:end] {
			if err := b.Append(r.Campaign, day, c.Keyword, c.Count, releasedAt); err != nil {
				b.Abort()
				return fmt.Errorf("pdd release %s: append keyword count: %w", key, err)
			}
		}
		if err := b.Send(); err != nil {
			return fmt.Errorf("pdd release %s: insert pdd_keyword_counts rows %d..%d: %w", key, start, end, err)
		}
		if err := w.runHook("pdd-counts-batch"); err != nil {
			return err
		}
	}
	if err := w.runHook("before-pdd-rounds-row"); err != nil {
		return err
	}
	if beforeRow != nil {
		if err := beforeRow(ctx); err != nil {
			return err
		}
	}
	b, err := w.conn.PrepareBatch(ctx, "INSERT INTO pdd_rounds (campaign, day, active, grouped, decrypted, groups, "+
		"groups_complete, groups_recovered, groups_lost, confidence, epsilon, max_count, released_at)")
	if err != nil {
		return fmt.Errorf("pdd release %s: prepare pdd_rounds insert: %w", key, err)
	}
	if err := b.Append(r.Campaign, day, r.Active, r.Grouped, r.Decrypted, r.Groups, r.Complete, r.Recovered, r.Lost,
		r.Confidence, r.Epsilon, r.MaxCount, releasedAt); err != nil {
		b.Abort()
		return fmt.Errorf("pdd release %s: append pdd_rounds row: %w", key, err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("pdd release %s: insert pdd_rounds row (the day will be redone on the next call): %w", key, err)
	}
	w.Logger.Debug("pdd day written", "key", key, "keywords", len(rows), "groups", r.Groups,
		"lost", r.Lost, "confidence", r.Confidence, "epsilon", r.Epsilon)
	return nil
}

// IsPDDReleased reports whether pdd_rounds holds the row of (campaign, day),
// i.e. whether a WritePDDRound of that day has completed.
func (w *Writer) IsPDDReleased(ctx context.Context, campaign string, day time.Time) (bool, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	var n uint64
	if err := w.conn.QueryRow(ctx, "SELECT count() FROM pdd_rounds"+pddWhere, campaign, dayArg(day)).Scan(&n); err != nil {
		return false, fmt.Errorf("pdd release %s: read pdd_rounds: %w", pddKey(campaign, day), err)
	}
	return n > 0, nil
}

// ReadKeywordDaily reads the keyword_daily view of campaign (complete days
// only), ordered by day then keyword (byte order). It returns an empty
// slice when nothing was released.
func (w *Writer) ReadKeywordDaily(ctx context.Context, campaign string) ([]KeywordDaily, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	rows, err := w.conn.Query(ctx, "SELECT day, keyword, count, confidence FROM keyword_daily WHERE campaign = ? ORDER BY day, keyword", campaign)
	if err != nil {
		return nil, fmt.Errorf("pdd release %s: read keyword_daily: %w", campaign, err)
	}
	defer rows.Close()
	out := []KeywordDaily{}
	for rows.Next() {
		r := KeywordDaily{Campaign: campaign}
		if err := rows.Scan(&r.Day, &r.Keyword, &r.Count, &r.Confidence); err != nil {
			return nil, fmt.Errorf("pdd release %s: scan keyword_daily: %w", campaign, err)
		}
		r.Day = dateUTC(r.Day)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pdd release %s: read keyword_daily: %w", campaign, err)
	}
	return out, nil
}

// ReadPDDRounds reads the pdd_rounds rows of campaign with FINAL, ordered
// by day; Counts is nil (read them with ReadKeywordDaily).
func (w *Writer) ReadPDDRounds(ctx context.Context, campaign string) ([]PDDRound, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	rows, err := w.conn.Query(ctx, "SELECT day, active, grouped, decrypted, groups, groups_complete, groups_recovered, groups_lost, "+
		"confidence, epsilon, max_count FROM pdd_rounds FINAL WHERE campaign = ? ORDER BY day", campaign)
	if err != nil {
		return nil, fmt.Errorf("pdd release %s: read pdd_rounds: %w", campaign, err)
	}
	defer rows.Close()
	out := []PDDRound{}
	for rows.Next() {
		r := PDDRound{Campaign: campaign}
		if err := rows.Scan(&r.Day, &r.Active, &r.Grouped, &r.Decrypted, &r.Groups, &r.Complete, &r.Recovered, &r.Lost,
			&r.Confidence, &r.Epsilon, &r.MaxCount); err != nil {
			return nil, fmt.Errorf("pdd release %s: scan pdd_rounds: %w", campaign, err)
		}
		r.Day = dateUTC(r.Day)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pdd release %s: read pdd_rounds: %w", campaign, err)
	}
	return out, nil
}

// dateUTC returns the calendar date of t as 00:00 UTC (a Date column may be
// scanned in the server's or the local time zone).
func dateUTC(t time.Time) time.Time {
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// KeywordDailyTSVHeader is the header line WriteKeywordDailyTSV writes
// (without the newline).
const KeywordDailyTSVHeader = "campaign\tday\tkeyword\tcount\tconfidence"

// WriteKeywordDailyTSV writes rows as tab-separated values: the line
// KeywordDailyTSVHeader, then one line per row ordered by day, then keyword,
// then campaign (the caller's slice is not modified). day is YYYY-MM-DD,
// count a signed integer, confidence the shortest decimal that reads back
// as the same float64. Fields are escaped as WriteTSV does. Errors are
// those of out, wrapped.
func WriteKeywordDailyTSV(out io.Writer, rows []KeywordDaily) error {
	sorted := append([]KeywordDaily(nil), rows...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if !a.Day.Equal(b.Day) {
			return a.Day.Before(b.Day)
		}
		if a.Keyword != b.Keyword {
			return a.Keyword < b.Keyword
		}
		return a.Campaign < b.Campaign
	})
	bw := bufio.NewWriterSize(out, 64<<10)
	bw.WriteString(KeywordDailyTSVHeader)
	bw.WriteByte('\n')
	var num [32]byte
	for _, r := range sorted {
		bw.WriteString(escapeTSV(r.Campaign))
		bw.WriteByte('\t')
		bw.WriteString(r.Day.UTC().Format("2006-01-02"))
		bw.WriteByte('\t')
		bw.WriteString(escapeTSV(r.Keyword))
		bw.WriteByte('\t')
		bw.Write(strconv.AppendInt(num[:0], r.Count, 10))
		bw.WriteByte('\t')
		bw.Write(strconv.AppendFloat(num[:0], r.Confidence, 'g', -1, 64))
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("pdd release: write TSV export (is the output file writable?): %w", err)
	}
	return nil
}
