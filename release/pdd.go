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

// Reasons a PDD day is withheld: pdd_withheld.reason (WithheldBudget,
// WithheldMinBatch) and, derived from pdd_rounds, WithheldLost. The
// export's reason column and the report use the same words.
const (
	// WithheldBudget: the day's noisy release would have passed the
	// privacy budget of its (dataset, day); nothing of it was written.
	WithheldBudget = "budget"
	// WithheldMinBatch: Prio3 mode, fewer reports than the campaign's
	// minimum batch size; the aggregators never revealed the batch.
	WithheldMinBatch = "below_min_batch"
	// WithheldLost: groups mode, every group of the day was lost (fewer
	// than t members submitted or answered its unmasking request), so no
	// client's counts were decrypted. The day has a pdd_rounds row with
	// groups_lost = groups.
	WithheldLost = "lost"
)

// PDDWithheld is one pdd_withheld row: Campaign's Day was withheld for
// Reason (WithheldBudget, WithheldMinBatch); Detail says why in words
// (no counts of people).
type PDDWithheld struct {
	Campaign string
	Day      time.Time // 00:00 UTC
	Reason   string
	Detail   string
}

// WritePDDWithheld records that w.Day of w.Campaign was withheld, at
// recordedAt truncated to the second (time.Now() when zero). Idempotent
// per (campaign, day, reason) under FINAL (ReplacingMergeTree: the latest
// detail wins). Errors name the day; ctx bounds the call (DefaultTimeout
// when it has no deadline).
func (w *Writer) WritePDDWithheld(ctx context.Context, r PDDWithheld, recordedAt time.Time) error {
	day := r.Day.UTC().Truncate(24 * time.Hour)
	key := pddKey(r.Campaign, day)
	if r.Campaign == "" || len(r.Campaign) > 64 || r.Reason == "" {
		return fmt.Errorf("pdd withheld %s: campaign must be 1–64 bytes and the reason non-empty", key)
	}
	if d := day.Unix() / 86400; d < 0 || d > maxDateDay {
		return fmt.Errorf("pdd withheld %s: day outside the ClickHouse Date range 1970-01-01..2149-06-06", key)
	}
	if recordedAt.IsZero() {
		recordedAt = time.Now()
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	b, err := w.conn.PrepareBatch(ctx, "INSERT INTO pdd_withheld (campaign, day, reason, detail, recorded_at)")
	if err != nil {
		return fmt.Errorf("pdd withheld %s: prepare insert: %w", key, err)
	}
	if err := b.Append(r.Campaign, day, r.Reason, r.Detail, recordedAt.UTC().Truncate(time.Second)); err != nil {
		b.Abort()
		return fmt.Errorf("pdd withheld %s: append row: %w", key, err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("pdd withheld %s: insert row (is ClickHouse up? the release stage records it again on its next run): %w", key, err)
	}
	return nil
}

// ReadPDDWithheld reads the pdd_withheld rows of campaign with FINAL,
// ordered by day, then reason.
func (w *Writer) ReadPDDWithheld(ctx context.Context, campaign string) ([]PDDWithheld, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	rows, err := w.conn.Query(ctx, "SELECT day, reason, detail FROM pdd_withheld FINAL WHERE campaign = ? ORDER BY day, reason", campaign)
	if err != nil {
		return nil, fmt.Errorf("pdd withheld %s: read pdd_withheld: %w", campaign, err)
	}
	defer rows.Close()
	out := []PDDWithheld{}
	for rows.Next() {
		r := PDDWithheld{Campaign: campaign}
		if err := rows.Scan(&r.Day, &r.Reason, &r.Detail); err != nil {
			return nil, fmt.Errorf("pdd withheld %s: scan pdd_withheld: %w", campaign, err)
		}
		r.Day = dateUTC(r.Day)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pdd withheld %s: read pdd_withheld: %w", campaign, err)
	}
	return out, nil
}

// PDDDay is one day of a campaign as the export and `crowdlog report`
// show it: released (its pdd_rounds row, Round) or withheld (Reason,
// Detail).
type PDDDay struct {
	Day      time.Time // 00:00 UTC
	Released bool
	// Reason is "" for a released day, else the withheld reasons joined
	// by "," (WithheldLost, WithheldBudget, WithheldMinBatch).
	Reason, Detail string
	// Round is the day's pdd_rounds row when it has one (Counts nil).
	Round *PDDRound
}

// PDDDays merges a campaign's pdd_rounds rows and pdd_withheld rows into
// one PDDDay per day, by day: a day with a pdd_rounds row is released
// unless every one of its groups was lost (Groups > 0, Lost = Groups:
// WithheldLost); a day with only pdd_withheld rows is withheld for their
// reasons. A pdd_rounds row supersedes pdd_withheld rows of the same day
// (a day refused over the budget and released by a later run).
func PDDDays(rounds []PDDRound, withheld []PDDWithheld) []PDDDay {
	byDay := map[time.Time]*PDDDay{}
	var days []time.Time
	get := func(t time.Time) *PDDDay {
		t = dateUTC(t)
		d := byDay[t]
		if d == nil {
			d = &PDDDay{Day: t}
			byDay[t] = d
			days = append(days, t)
		}
		return d
	}
	for i := range rounds {
		r := rounds[i]
		r.Counts = nil
		d := get(r.Day)
		d.Round = &r
		if r.Groups > 0 && r.Lost == r.Groups {
			d.Reason = WithheldLost
			d.Detail = fmt.Sprintf("all %d groups lost: no group had enough members submit and answer its unmasking request", r.Groups)
		} else {
			d.Released = true
		}
	}
	for _, w := range withheld {
		d := get(w.Day)
		if d.Round != nil {
			continue
		}
		if d.Reason != "" {
			d.Reason += ","
			d.Detail += "; "
		}
		d.Reason += w.Reason
		d.Detail += w.Detail
	}
	sort.Slice(days, func(i, j int) bool { return days[i].Before(days[j]) })
	out := make([]PDDDay, len(days))
	for i, t := range days {
		out[i] = *byDay[t]
	}
	return out
}

// PDDExportHeader is the header line WritePDDExport writes (without the
// newline).
const PDDExportHeader = "campaign\tday\tkeyword\tcount\tconfidence\tepsilon\tstatus\treason"

// WritePDDExport writes the export of `crowdlog pdd --export`: the line
// PDDExportHeader, then per day of days (in day order) either one line per
// keyword (status released) or one line for the whole day (status
// withheld, keyword, count, confidence and epsilon empty, reason one of
// the Withheld reasons, comma-separated when several). A released day's
// lines are the keywords of words in list order with their released count
// from daily (0 when daily has no row: the count was 0, or a noisy 0),
// confidence and epsilon from its pdd_rounds row; with zeros false the
// zero counts are left out, and a released day with no non-zero count gets
// one line with an empty keyword so that it still shows. Keywords in daily
// that are not in words follow, in byte order. day is YYYY-MM-DD (UTC),
// count a signed integer, confidence and epsilon the shortest decimal that
// reads back as the same float64. Text fields are escaped as ClickHouse's
// TabSeparated format does (WriteTSV): backslash as \\, tab as \t,
// newline as \n, carriage return as \r. Errors are those of out, wrapped.
func WritePDDExport(out io.Writer, campaign string, words []string, days []PDDDay, daily []KeywordDaily, zeros bool) error {
	counts := map[time.Time]map[string]int64{}
	for _, r := range daily {
		d := dateUTC(r.Day)
		if counts[d] == nil {
			counts[d] = map[string]int64{}
		}
		counts[d][r.Keyword] += r.Count
	}
	inList := make(map[string]bool, len(words))
	for _, w := range words {
		inList[w] = true
	}
	bw := bufio.NewWriterSize(out, 64<<10)
	bw.WriteString(PDDExportHeader)
	bw.WriteByte('\n')
	camp := escapeTSV(campaign)
	var num [32]byte
	line := func(day, keyword string, count int64, r *PDDRound) {
		bw.WriteString(camp)
		bw.WriteByte('\t')
		bw.WriteString(day)
		bw.WriteByte('\t')
		bw.WriteString(escapeTSV(keyword))
		bw.WriteByte('\t')
		bw.Write(strconv.AppendInt(num[:0], count, 10))
		bw.WriteByte('\t')
		bw.Write(strconv.AppendFloat(num[:0], r.Confidence, 'g', -1, 64))
		bw.WriteByte('\t')
		bw.Write(strconv.AppendFloat(num[:0], r.Epsilon, 'g', -1, 64))
		bw.WriteString("\treleased\t\n")
	}
	for _, d := range days {
		day := d.Day.UTC().Format("2006-01-02")
		if !d.Released {
			bw.WriteString(camp + "\t" + day + "\t\t\t\t\twithheld\t" + escapeTSV(d.Reason) + "\n")
			continue
		}
		c := counts[d.Day]
		n := 0
		for _, w := range words {
			if v := c[w]; v != 0 || zeros {
				line(day, w, v, d.Round)
				n++
			}
		}
		var extra []string
		for k := range c {
			if !inList[k] {
				extra = append(extra, k)
			}
		}
		sort.Strings(extra)
		for _, k := range extra {
			if v := c[k]; v != 0 || zeros {
				line(day, k, v, d.Round)
				n++
			}
		}
		if n == 0 {
			line(day, "", 0, d.Round)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("pdd release: write TSV export (is the output file writable?): %w", err)
	}
	return nil
}

// PDD modes: pdd_campaigns.mode.
const (
	// PDDModeGroups: blinded group sums (release/pdd), one Laplace draw
	// of scale max_count/ε per released count.
	PDDModeGroups = "groups"
	// PDDModePrio3: two aggregators (release/prio3), each adding one
	// Laplace draw of scale S/ε per released count.
	PDDModePrio3 = "prio3"
)

// PDDCampaign is one pdd_campaigns row: how Campaign's days were
// released. Epsilon is the per-day ε (0 = exact); Sensitivity is
// max_count (groups) or S, one person's daily L1 bound (prio3); K is the
// minimum batch size (prio3) or the group size (groups; 0 when the
// release stage was not told it); Params is the measurement as key=value
// fields.
type PDDCampaign struct {
	Campaign    string
	Mode        string
	Epsilon     float64
	Sensitivity uint32
	K           uint64
	Params      string
}

// WritePDDCampaign records c at recordedAt truncated to the second
// (time.Now() when zero). Idempotent under FINAL (ReplacingMergeTree: one
// row per distinct configuration of a campaign). Errors name the campaign;
// ctx bounds the call (DefaultTimeout when it has no deadline).
func (w *Writer) WritePDDCampaign(ctx context.Context, c PDDCampaign, recordedAt time.Time) error {
	if c.Campaign == "" || len(c.Campaign) > 64 || c.Mode == "" {
		return fmt.Errorf("pdd campaign %q: campaign must be 1–64 bytes and the mode non-empty", c.Campaign)
	}
	if math.IsNaN(c.Epsilon) || math.IsInf(c.Epsilon, 0) || c.Epsilon < 0 {
		return fmt.Errorf("pdd campaign %s: epsilon %v must be finite and ≥ 0", c.Campaign, c.Epsilon)
	}
	if recordedAt.IsZero() {
		recordedAt = time.Now()
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	b, err := w.conn.PrepareBatch(ctx, "INSERT INTO pdd_campaigns (campaign, mode, epsilon, sensitivity, k, params, recorded_at)")
	if err != nil {
		return fmt.Errorf("pdd campaign %s: prepare insert: %w", c.Campaign, err)
	}
	if err := b.Append(c.Campaign, c.Mode, c.Epsilon, c.Sensitivity, c.K, c.Params, recordedAt.UTC().Truncate(time.Second)); err != nil {
		b.Abort()
		return fmt.Errorf("pdd campaign %s: append row: %w", c.Campaign, err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("pdd campaign %s: insert row (is ClickHouse up? the release stage records it again on its next run): %w", c.Campaign, err)
	}
	return nil
}

// ReadPDDCampaigns reads the pdd_campaigns rows of campaign with FINAL,
// ordered by the table's key.
func (w *Writer) ReadPDDCampaigns(ctx context.Context, campaign string) ([]PDDCampaign, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	rows, err := w.conn.Query(ctx, "SELECT mode, epsilon, sensitivity, k, params FROM pdd_campaigns FINAL WHERE campaign = ? ORDER BY mode, epsilon, sensitivity, k, params", campaign)
	if err != nil {
		return nil, fmt.Errorf("pdd campaign %s: read pdd_campaigns: %w", campaign, err)
	}
	defer rows.Close()
	out := []PDDCampaign{}
	for rows.Next() {
		c := PDDCampaign{Campaign: campaign}
		if err := rows.Scan(&c.Mode, &c.Epsilon, &c.Sensitivity, &c.K, &c.Params); err != nil {
			return nil, fmt.Errorf("pdd campaign %s: scan pdd_campaigns: %w", campaign, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pdd campaign %s: read pdd_campaigns: %w", campaign, err)
	}
	return out, nil
}
