package release

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

func pddRound(campaign string, day time.Time, active, decrypted uint32, counts map[string]int64) PDDRound {
	r := PDDRound{Campaign: campaign, Day: day, Active: active, Grouped: active - 1, Decrypted: decrypted,
		Groups: 3, Complete: 1, Recovered: 1, Lost: 1, Confidence: float64(decrypted) / float64(active)}
	for k, c := range counts {
		r.Counts = append(r.Counts, KeywordCount{Keyword: k, Count: c})
	}
	return r
}

// wantDaily is the keyword_daily content the rounds should produce,
// computed directly: every non-zero count, with its day's confidence,
// ordered by day then keyword.
func wantDaily(rounds ...PDDRound) []KeywordDaily {
	var out []KeywordDaily
	for _, r := range rounds {
		for _, c := range r.Counts {
			if c.Count != 0 {
				out = append(out, KeywordDaily{r.Campaign, r.Day, c.Keyword, c.Count, r.Confidence})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Day.Equal(out[j].Day) {
			return out[i].Day.Before(out[j].Day)
		}
		return out[i].Keyword < out[j].Keyword
	})
	return out
}

func pddRawCount(t *testing.T, w *Writer, table, campaign string) uint64 {
	t.Helper()
	var n uint64
	if err := w.conn.QueryRow(ctx30(t), "SELECT count() FROM "+table+" WHERE campaign = ?", campaign).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func TestPDDRoundsWriteRewriteAndView(t *testing.T) {
	w := openTestWriter(t)
	ctx := ctx30(t)
	d1 := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	d2 := d1.AddDate(0, 0, 1)
	r1 := pddRound("flu-2006", d1, 40, 31, map[string]int64{"weather": 5, "flu": 2, "the": 0, "a\tb": 1})
	r2 := pddRound("flu-2006", d2, 50, 50, map[string]int64{"weather": 3, "news": -2 /* noisy */, "zero": 0})
	r2.Epsilon, r2.MaxCount = 0.5, 10
	other := pddRound("other", d1, 10, 5, map[string]int64{"weather": 99})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, r := range []PDDRound{r1, r2, other} {
		if err := w.WritePDDRound(ctx, r, at); err != nil {
			t.Fatalf("WritePDDRound %s: %v", r.Day.Format("2006-01-02"), err)
		}
	}
	// Rewrite day 2 with other counts: a written day is never rewritten.
	again := pddRound("flu-2006", d2, 50, 50, map[string]int64{"weather": 1000})
	if err := w.WritePDDRound(ctx, again, at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := w.ReadKeywordDaily(ctx, "flu-2006")
	if err != nil {
		t.Fatal(err)
	}
	if want := wantDaily(r1, r2); !reflect.DeepEqual(got, want) {
		t.Fatalf("keyword_daily =\n%v\nwant\n%v", got, want)
	}
	if n, want := pddRawCount(t, w, "pdd_keyword_counts", "flu-2006"), uint64(len(wantDaily(r1, r2))); n != want {
		t.Fatalf("pdd_keyword_counts holds %d physical rows, want %d", n, want)
	}
	if n := pddRawCount(t, w, "pdd_rounds", "flu-2006"); n != 2 {
		t.Fatalf("pdd_rounds holds %d rows, want 2", n)
	}
	wantAll := len(wantDaily(r1, r2, other))
	rounds, err := w.ReadPDDRounds(ctx, "flu-2006")
	if err != nil {
		t.Fatal(err)
	}
	r1.Counts, r2.Counts = nil, nil
	if !reflect.DeepEqual(rounds, []PDDRound{r1, r2}) {
		t.Fatalf("pdd_rounds = %+v, want %+v", rounds, []PDDRound{r1, r2})
	}
	if got, _ := w.ReadKeywordDaily(ctx, "other"); !reflect.DeepEqual(got, wantDaily(other)) {
		t.Fatalf("campaign other: %v", got)
	}
	if got, _ := w.ReadKeywordDaily(ctx, "absent"); got == nil || len(got) != 0 {
		t.Fatalf("absent campaign: %v, want an empty slice", got)
	}
	// Analysts query the view from another current database too.
	def, err := dial(ctx, srv.TCPAddr, "default")
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	var n uint64
	if err := def.QueryRow(ctx, "SELECT count() FROM "+w.Database()+".keyword_daily").Scan(&n); err != nil ||
		n != uint64(wantAll) {
		t.Fatalf("keyword_daily from database default: %d rows, %v; want %d", n, err, wantAll)
	}
}

func TestPDDRoundCrashThenRedo(t *testing.T) {
	w := openTestWriter(t)
	ctx := ctx30(t)
	w.BatchSize = 7
	day := time.Date(2006, 4, 2, 0, 0, 0, 0, time.UTC)
	counts := map[string]int64{}
	for i := 0; i < 30; i++ {
		counts[fmt.Sprintf("kw%02d", i)] = int64(i % 5) // some zeros
	}
	first := pddRound("c", day, 20, 15, counts)
	crash := errors.New("simulated crash")
	for _, stage := range []string{"pdd-counts-batch", "before-pdd-rounds-row"} {
		w.Hook = func(s string) error {
			if s == stage {
				return crash
			}
			return nil
		}
		if err := w.WritePDDRound(ctx, first, time.Time{}); !errors.Is(err, crash) {
			t.Fatalf("crash at %s: err %v", stage, err)
		}
		if got, _ := w.ReadKeywordDaily(ctx, "c"); len(got) != 0 {
			t.Fatalf("crash at %s: the incomplete day shows %d rows in keyword_daily", stage, len(got))
		}
		if done, _ := w.IsPDDReleased(ctx, "c", day); done {
			t.Fatalf("crash at %s: day marked released", stage)
		}
	}
	w.Hook = nil
	// The redo (e.g. fresh noise) replaces the partial rows entirely.
	redo := map[string]int64{"kw00": 7, "kw01": 0, "fresh": 3}
	second := pddRound("c", day, 20, 15, redo)
	if err := w.WritePDDRound(ctx, second, time.Time{}); err != nil {
		t.Fatal(err)
	}
	got, err := w.ReadKeywordDaily(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if want := wantDaily(second); !reflect.DeepEqual(got, want) {
		t.Fatalf("after redo keyword_daily = %v, want %v", got, want)
	}
	if n := pddRawCount(t, w, "pdd_keyword_counts", "c"); n != uint64(len(wantDaily(second))) {
		t.Fatalf("pdd_keyword_counts holds %d physical rows after the redo, want %d", n, len(wantDaily(second)))
	}
}

func TestWritePDDRoundValidates(t *testing.T) {
	w := &Writer{} // validation happens before any statement
	day := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	for name, r := range map[string]PDDRound{
		"duplicate keyword": {Campaign: "c", Day: day, Counts: []KeywordCount{{"a", 1}, {"a", 2}}},
		"before 1970":       {Campaign: "c", Day: time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)},
		"no campaign":       {Day: day},
		"groups":            {Campaign: "c", Day: day, Groups: 2, Complete: 1},
	} {
		if err := w.WritePDDRound(ctx30(t), r, time.Time{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestWriteKeywordDailyTSV(t *testing.T) {
	d1 := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	d2 := d1.AddDate(0, 0, 1)
	rows := []KeywordDaily{
		{"c", d2, "apple", 1, 1},
		{"c", d1, "zebra", -3, 0.775},
		{"c", d1, "tab\there", 2, 0.775},
		{"c", d1, "apple", 5, 0.775},
	}
	var buf bytes.Buffer
	if err := WriteKeywordDailyTSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"campaign\tday\tkeyword\tcount\tconfidence",
		"c\t2006-03-01\tapple\t5\t0.775",
		"c\t2006-03-01\ttab\\there\t2\t0.775",
		"c\t2006-03-01\tzebra\t-3\t0.775",
		"c\t2006-03-02\tapple\t1\t1",
	}, "\n") + "\n"
	if buf.String() != want {
		t.Fatalf("TSV =\n%s\nwant\n%s", buf.String(), want)
	}
	if rows[0].Keyword != "apple" || !rows[0].Day.Equal(d2) {
		t.Fatal("the caller's slice was reordered")
	}
}
