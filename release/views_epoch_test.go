package release

import (
	"context"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// epochRangeNames are epoch names whose time range completed_releases
// derives, or refuses, at the edges where ClickHouse 18.16 and current
// releases compute dates differently: 1970-01-01 00:00:00 (no date on
// 18.16), DateTime's end (2105 on 18.16, 2106-02-07 on current releases),
// lengths whose seconds overflow 32 bits, impossible dates, and names of
// no known shape.
var epochRangeNames = []string{
	"all", "2006-13", "2006", "2006-02-30", "2006-02-28", "2006-03-01", "2006-3", "x2006", "2006-03-01x", "0000",
	"9999-12-31", "1969-12", "1970-01", "1970-01-01", "1971-01", "2104-12", "2105", "2105-12", "2106", "2106-01", "2106-02-07",
	"20060301T000000Z-24h", "20060302T000000Z-168h", "20060301T000000Z-90m", "20060301T000000Z-45s",
	"20061301T000000Z-24h", "20060301T250000Z-1h", "20060301T000000Z-0h", "19710101T000000Z-1s",
	"21041231T000000Z-24h", "21041231T000000Z-25h", "21040101T000000Z-999999h", "20060301T000000Z-876000h",
	"20060301T000000Z-999999h", "20060301T000000Z-1193047h", "20060301T000000Z-4294967296s", "20060301T000000Z-99999999999h",
}

var (
	epochScheduledRE = regexp.MustCompile(`^([0-9]{8}T[0-9]{6}Z)-([0-9]{1,6})([hms])$`)
	epochUnits       = map[string]time.Duration{"h": time.Hour, "m": time.Minute, "s": time.Second}
)

// wantEpochRange is the documented rule (views.sql, docs/sql.md) in Go:
// the epoch_start and epoch_end of name as TabSeparated text, \N for NULL.
func wantEpochRange(name string) (start, end string) {
	var s, e time.Time
	if m := epochScheduledRE.FindStringSubmatch(name); m != nil {
		t, err := time.Parse("20060102T150405Z", m[1])
		if err != nil || t.Format("20060102T150405Z") != m[1] {
			return `\N`, `\N`
		}
		n, _ := strconv.Atoi(m[2])
		s, e = t, t.Add(time.Duration(n)*epochUnits[m[3]])
	} else {
		shapes := []struct {
			re     *regexp.Regexp
			layout string
			years  int
			months int
			days   int
		}{
			{regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`), "2006-01-02", 0, 0, 1},
			{regexp.MustCompile(`^[0-9]{4}-[0-9]{2}$`), "2006-01", 0, 1, 0},
			{regexp.MustCompile(`^[0-9]{4}$`), "2006", 1, 0, 0},
		}
		found := false
		for _, sh := range shapes {
			if !sh.re.MatchString(name) {
				continue
			}
			t, err := time.Parse(sh.layout, name)
			if err != nil || t.Format(sh.layout) != name {
				return `\N`, `\N`
			}
			s, e, found = t, t.AddDate(sh.years, sh.months, sh.days), true
		}
		if !found {
			return `\N`, `\N`
		}
	}
	lo, hi := time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2105, 1, 1, 0, 0, 0, 0, time.UTC)
	if s.Before(lo) || !e.After(s) || e.After(hi) {
		return `\N`, `\N`
	}
	return s.Format(tsvTime), e.Format(tsvTime)
}

// checkEpochRanges writes one completed release per name of
// epochRangeNames through w and compares completed_releases' epoch_start
// and epoch_end with wantEpochRange. It returns the number of names
// checked and how many of them have a range.
func checkEpochRanges(t *testing.T, ctx context.Context, engine string, w *Writer) (checked, ranged int) {
	t.Helper()
	var items []Item
	for _, name := range epochRangeNames {
		items = append(items, Item{App: "query", Epoch: name, Policy: "ft-u", K: 2, Item: "dog", Impressions: 1, Users: 1})
	}
	if err := w.WriteRelease(ctx, items, nil, time.Date(2006, 5, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	rows, err := w.conn.Query(ctx, `SELECT epoch, ifNull(toString(epoch_start), '\\N'), ifNull(toString(epoch_end), '\\N'),
		toTypeName(epoch_start), toTypeName(epoch_end) FROM completed_releases`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var name, start, end, ts, te string
		if err := rows.Scan(&name, &start, &end, &ts, &te); err != nil {
			t.Fatal(err)
		}
		if want := "Nullable(DateTime('UTC'))"; ts != want || te != want {
			t.Errorf("%s: epoch_start %s, epoch_end %s; want %s", engine, ts, te, want)
		}
		got[name] = start + " – " + end
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	names := append([]string(nil), epochRangeNames...)
	sort.Strings(names)
	for _, name := range names {
		s, e := wantEpochRange(name)
		if want := s + " – " + e; got[name] != want {
			t.Errorf("%s: epoch %q: range %q, want %q", engine, name, got[name], want)
		}
		checked++
		if !strings.HasPrefix(s, `\N`) {
			ranged++
		}
	}
	return checked, ranged
}

// TestEpochRanges checks completed_releases' epoch range on the 18.16
// server against the rule computed in Go (wantEpochRange), at the edges
// where 18.16 and current releases differ (TestEpochRangesChDB is the same
// on chDB 26.7).
func TestEpochRanges(t *testing.T) {
	w := openTestWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, ranged := checkEpochRanges(t, ctx, "ClickHouse 18.16", w)
	if ranged < 10 || n-ranged < 10 {
		t.Errorf("%d names, %d with a range: want ≥ 10 of each", n, ranged)
	}
	if !t.Failed() {
		t.Logf("ClickHouse 18.16: %d epoch names, %d with a range, all as computed in Go", n, ranged)
	}
}
