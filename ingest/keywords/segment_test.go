package keywords

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
)

func words(l *List, idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, l.Words[i])
	}
	return out
}

// TestBoundaries: UAX #29 word boundaries as the docs describe them.
func TestBoundaries(t *testing.T) {
	for s, want := range map[string][]int{
		"":          {0},
		"new-york":  {0, 3, 4, 8},
		"don't":     {0, 5},
		"yahoo.com": {0, 9},
		"北京大学":      {0, 3, 6, 9, 12},
		"mp3下载":     {0, 3, 6, 9},
		"カタカナ語":     {0, 12, 15},
	} {
		if got := Boundaries(s); !slices.Equal(got, want) {
			t.Errorf("Boundaries(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestMatch: whole words in scripts with spaces, every (overlapping,
// nested) occurrence inside a run of ideographs, each keyword once, in
// order of first occurrence.
func TestMatch(t *testing.T) {
	l, err := Parse(strings.NewReader("flu\nyork\nnew\n北京\n京大\n大学\n北京大学\n天气\nmp3下载\nカタカナ\n"))
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string][]string{
		"flu shots":    {"flu"},
		"bird-flu":     {"flu"},
		"(flu)":        {"flu"},
		"influenza":    nil,
		"flu.com":      nil, // one UAX #29 word
		"newyork":      nil,
		"new york new": {"new", "york"},
		"北京大学":         {"北京", "北京大学", "京大", "大学"},
		"去北京":          {"北京"},
		"北京北京":         {"北京"},
		"北京天气 flu":     {"北京", "天气", "flu"},
		"免费mp3下载":      {"mp3下载"},
		"mp3下载":        {"mp3下载"},
		"mp3下":         nil,
		"カタカナ語":        {"カタカナ"},
		"カタカナゴ":        nil, // a Katakana run is one word
		"天":            nil,
	} {
		if got := words(l, l.Match(q)); !slices.Equal(got, want) {
			t.Errorf("Match(%q) = %q, want %q", q, got, want)
		}
	}
}

// independentCounts counts a hand-made log without the package's code:
// queries are already normalized; an instance is a run of equal queries
// with the same date in loc; an ASCII keyword counts when it is a field of
// the query split at every non-letter, non-digit; a Han keyword when it is
// a substring. Keys are "date keyword".
func independentCounts(recs []aol.Record, list []string, loc *time.Location) map[string]int {
	out := map[string]int{}
	prevQ, prevD := "", ""
	for _, r := range recs {
		d := r.QueryTime.In(loc).Format("2006-01-02")
		if r.Query == prevQ && d == prevD {
			continue
		}
		prevQ, prevD = r.Query, d
		fields := strings.FieldsFunc(r.Query, func(c rune) bool { return !unicode.IsLetter(c) && !unicode.IsDigit(c) || unicode.Is(unicode.Han, c) })
		for _, k := range list {
			han := unicode.Is(unicode.Han, []rune(k)[0])
			if han && strings.Contains(r.Query, k) || !han && slices.Contains(fields, k) {
				out[d+" "+k]++
			}
		}
	}
	return out
}

// TestCountsAcrossMidnight: a hand-made log with runs across midnight, in
// Latin and Han script, counted per UTC day and per Asia/Shanghai day,
// equals the independent count; the threshold application keeps the
// seed's instances (a run across midnight is one).
func TestCountsAcrossMidnight(t *testing.T) {
	list := []string{"weather", "flu", "天气", "北京", "京大", "大学"}
	l, err := Parse(strings.NewReader(strings.Join(list, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	at := func(day, h, m int) time.Time { return time.Date(2026, 1, day, h, m, 0, 0, time.UTC) }
	recs := []aol.Record{
		{Query: "weather", QueryTime: at(1, 9, 0)},
		{Query: "weather", QueryTime: at(1, 23, 50)}, // same day, same run
		{Query: "weather", QueryTime: at(2, 0, 10)},  // crosses UTC midnight: new instance
		{Query: "weather", QueryTime: at(3, 8, 0)},   // once a day, nothing in between
		{Query: "北京天气", QueryTime: at(3, 15, 59)},    // 23:59 in Shanghai
		{Query: "北京天气", QueryTime: at(3, 16, 1)},     // 00:01 next day in Shanghai, same UTC day
		{Query: "北京大学 flu", QueryTime: at(3, 17, 0)},
		{Query: "北京大学 flu", QueryTime: at(4, 1, 0)},
		{Query: "bird-flu", QueryTime: at(4, 2, 0)},
		{Query: "flu", QueryTime: at(4, 3, 0)},
		{Query: "flu", QueryTime: at(5, 3, 0)},
	}
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	for _, loc := range []*time.Location{time.UTC, shanghai} {
		want := independentCounts(recs, list, loc)
		got := map[string]int{}
		for d, s := range l.CountsIn(recs, nil, loc) {
			for i, c := range s {
				got[d.String()+" "+l.Words[i]] += int(c)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: counts\n got %v\nwant %v", loc, got, want)
		}
		t.Logf("%s: %v", loc, got)
	}
	// Hand-checked figures for UTC: weather on 01-01, 01-02, 01-03 once each;
	// 北京 twice on 01-03 and once on 01-04.
	utc := l.Counts(recs, nil)
	d := DayOf(at(3, 0, 0))
	if utc[d-2][l.Index("weather")] != 1 || utc[d-1][l.Index("weather")] != 1 || utc[d][l.Index("weather")] != 1 ||
		utc[d][l.Index("北京")] != 2 || utc[d+1][l.Index("北京")] != 1 || utc[d+1][l.Index("flu")] != 3 {
		t.Fatalf("UTC counts %v", utc)
	}
	if DayIn(at(3, 16, 1), shanghai) != d+1 || DayIn(at(3, 16, 1), nil) != d {
		t.Fatal("DayIn")
	}
	// The threshold "query" application keeps runs across days: the first
	// four weather records are one instance there, four here.
	q := (apps.QueryApp{}).Mine(recs[:4])
	if len(q) != 1 || len(Instances(recs[:4], nil)) != 3 {
		t.Fatalf("threshold instances %d, daily %d", len(q), len(Instances(recs[:4], nil)))
	}
}

// BenchmarkMatch: one query against the default list (L = 10,000): a
// spaced query and a run of ideographs.
func BenchmarkMatch(b *testing.B) {
	l := Default()
	for name, q := range map[string]string{"spaced": "cheap flights to new york city", "ideographs": "北京大学天气预报查询"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				l.Match(q)
			}
		})
	}
}

// FuzzMatch: boundaries ascend from 0 to len(q); every keyword Match
// returns is a substring of q, reported once.
func FuzzMatch(f *testing.F) {
	l, err := Parse(strings.NewReader("flu\n北京\n京大\n大学\nmp3下载\n"))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"北京大学", "bird-flu", "免费mp3下载", "", "\xff北京"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		b := Boundaries(q)
		if b[0] != 0 || b[len(b)-1] != len(q) || !slices.IsSorted(b) {
			t.Fatalf("boundaries %v of %q", b, q)
		}
		seen := map[int]bool{}
		for _, i := range l.Match(q) {
			if seen[i] || !strings.Contains(q, l.Words[i]) {
				t.Fatalf("Match(%q) gave %q", q, l.Words[i])
			}
			seen[i] = true
		}
	})
}
