package keywords

import (
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
)

func TestDefaultList(t *testing.T) {
	l := Default()
	if l.Len() != 10000 || l.Words[0] != "the" || l.Index("the") != 0 || l.Index("no-such-word") != -1 {
		t.Fatalf("default list: L=%d first=%q", l.Len(), l.Words[0])
	}
	if l.Hash() != Default().Hash() {
		t.Fatal("hash not stable")
	}
	other, _ := Parse(strings.NewReader("the\nof\n"))
	if other.Hash() == l.Hash() {
		t.Fatal("different lists, same hash")
	}
}

func TestParse(t *testing.T) {
	l, err := Parse(strings.NewReader("# comment\nFlu\n\nfever\nflu\n"))
	if err != nil || len(l.Words) != 2 || l.Words[0] != "flu" || l.Words[1] != "fever" {
		t.Fatalf("%v %v", l, err)
	}
	if _, err := Parse(strings.NewReader("flu symptoms\n")); err == nil {
		t.Fatal("a two-token keyword was accepted")
	}
	if _, err := Parse(strings.NewReader("\n# only a comment\n")); err == nil {
		t.Fatal("an empty list was accepted")
	}
}

// Counts per day: an instance counts a keyword once; consecutive repeats of
// a query on one day (AOL's one row per click) are one instance, and a run
// that crosses midnight starts a new instance on the new day; the blacklist
// removes a keyword; days are UTC days.
func TestCounts(t *testing.T) {
	l, _ := Parse(strings.NewReader("flu\nfever\nshots\n"))
	day1 := time.Date(2006, 3, 1, 23, 58, 0, 0, time.UTC)
	day2 := day1.Add(3 * time.Minute)
	recs := []aol.Record{
		{Query: "flu flu fever", QueryTime: day1},
		{Query: "Flu  Flu fever", QueryTime: day1.Add(time.Minute)}, // same normalized query, same day: one instance
		{Query: "flu flu fever", QueryTime: day2},                   // the run crosses midnight: a new instance on day 2
		{Query: "flu shots", QueryTime: day2},
		{Query: "weather", QueryTime: day2},
		{Query: "flu shots", QueryTime: day2.Add(time.Hour)}, // after another query: a new instance
	}
	got := l.Counts(recs, map[string]bool{"shots": true})
	d1, d2 := DayOf(day1), DayOf(day2)
	if d2 != d1+1 || d1.String() != "2006-03-01" {
		t.Fatalf("days %v %v", d1, d2)
	}
	if got[d1][l.Index("flu")] != 1 || got[d1][l.Index("fever")] != 1 || len(got[d1]) != 2 {
		t.Fatalf("day 1: %v", got[d1])
	}
	if got[d2][l.Index("flu")] != 3 || got[d2][l.Index("fever")] != 1 || len(got[d2]) != 2 {
		t.Fatalf("day 2: %v (shots is blacklisted)", got[d2])
	}
	if v := got[d2].Dense(3); v[0] != 3 || v[1] != 1 || v[2] != 0 {
		t.Fatalf("dense %v", v)
	}
}

// TestLookup: a word as an operator types it (case, spaces) finds the
// list's normalized keyword; Index, which takes the normalized form only,
// does not.
func TestLookup(t *testing.T) {
	l, err := Parse(strings.NewReader("free\nmp3\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in   string
		want int
	}{{"free", 0}, {"Free", 0}, {" FREE ", 0}, {"MP3", 1}, {"flu", -1}, {"", -1}} {
		if got := l.Lookup(c.in); got != c.want {
			t.Errorf("Lookup(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	if l.Index("Free") != -1 {
		t.Error(`Index("Free") found a keyword: Lookup is the normalizing one`)
	}
}
