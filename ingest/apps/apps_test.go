package apps

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
)

var t0 = time.Date(2006, 3, 1, 10, 0, 0, 0, time.UTC)

// r builds a made-up record at minute m (never real AOL data).
func r(q string, m float64, url string) aol.Record {
	return aol.Record{AnonID: "1", Query: q, QueryTime: t0.Add(time.Duration(m * float64(time.Minute))), ClickURL: url}
}

func primaries(as []Artifact) []string {
	var out []string
	for i, a := range as {
		if i > 0 && a.Time.Before(as[i-1].Time) {
			panic("artifacts out of time order")
		}
		out = append(out, a.Primary)
	}
	return out
}

func mustLookup(t *testing.T, name string, o Options) App {
	t.Helper()
	a, err := LookupWith(name, o)
	if err != nil {
		t.Fatal(err)
	}
	if a.Name() != name {
		t.Fatalf("Name() = %q, want %q", a.Name(), name)
	}
	return a
}

func TestReformulation(t *testing.T) {
	recs := []aol.Record{
		r("Dog", 0, "http://a.com"),
		r("dog", 0, "http://b.com"), // repeat row: same run
		r("-", 1, ""),               // placeholder: ignored, does not break the run
		r("puppy", 2, ""),           // dog → puppy
		r("dog  food", 10, ""),      // puppy → dog food
		r("dog food", 45, ""),       // 35 min later: new session, no pair
		r("dog", 46, ""),            // dog food → dog
		r("dog", 47, ""),            // collapse
		r("dog", 90, ""),            // new session, same query: nothing
		r("cat", 91, ""),            // dog → cat
	}
	got := primaries(mustLookup(t, "reformulation", Options{}).Mine(recs))
	want := []string{"dog → puppy", "puppy → dog food", "dog food → dog", "dog → cat"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	arts := ReformulationApp{}.Mine(recs)
	if arts[0].Secondary != "Dog → puppy" || !arts[0].Time.Equal(recs[3].QueryTime) {
		t.Errorf("first pair: secondary %q time %v", arts[0].Secondary, arts[0].Time)
	}
	// a 60-minute gap keeps "dog food" in one session with puppy: no new pairs, but
	// "dog → cat" still crosses the 43-minute gap
	got = primaries(mustLookup(t, "reformulation", Options{SessionGap: time.Hour}).Mine(recs))
	want = []string{"dog → puppy", "puppy → dog food", "dog food → dog", "dog → cat"}
	if !slices.Equal(got, want) {
		t.Fatalf("gap 1h: got %q, want %q", got, want)
	}
	got = primaries(mustLookup(t, "reformulation", Options{SessionGap: 5 * time.Minute}).Mine(recs))
	want = []string{"dog → puppy", "dog food → dog", "dog → cat"}
	if !slices.Equal(got, want) {
		t.Fatalf("gap 5m: got %q, want %q", got, want)
	}
	// an arrow inside a query is escaped, so the pair splits back exactly
	arts = ReformulationApp{}.Mine([]aol.Record{r(`a → b\c`, 0, ""), r("d", 1, "")})
	if f, err := Split(arts[0].Primary, 2); err != nil || f[0] != `a → b\c` || f[1] != "d" {
		t.Fatalf("Split(%q) = %q, %v", arts[0].Primary, f, err)
	}
}

func TestCanonicalURL(t *testing.T) {
	cases := []struct{ in, full, domain, dir string }{
		{"http://www.Example.com", "http://www.example.com", "www.example.com", "www.example.com/"},
		{" HTTPS://Ex.org/A/b.html?x=1#f ", "https://ex.org/A/b.html?x=1#f", "ex.org", "ex.org/A/"},
		{"ex.org/a/b/", "ex.org/a/b/", "ex.org", "ex.org/a/b/"},
		{"http://ex.org?q=/x", "http://ex.org?q=/x", "ex.org", "ex.org/"},
	}
	for _, c := range cases {
		for lvl, want := range map[string]string{URLFull: c.full, URLDomain: c.domain, URLDir: c.dir} {
			if got, ok := CanonicalURL(c.in, lvl); !ok || got != want {
				t.Errorf("CanonicalURL(%q, %s) = %q, %v; want %q", c.in, lvl, got, ok, want)
			}
		}
	}
	for _, bad := range []string{"", "  ", "http://", "http:///path"} {
		if _, ok := CanonicalURL(bad, URLDomain); ok {
			t.Errorf("CanonicalURL(%q) accepted", bad)
		}
	}
}

func TestClickAndURL(t *testing.T) {
	recs := []aol.Record{
		r("dog", 0, "http://a.com/x/1"),
		r("dog", 0, "http://a.com/x/2"), // same domain: counted once at domain level
		r("dog", 0, "http://b.com"),
		r("dog", 1, ""),               // no click: nothing
		r("Puppy", 3, ""),             // query without click: nothing
		r("dog", 5, "http://a.com/y"), // new instance of dog
		r("-", 6, "http://c.com"),     // no query: nothing
	}
	click := mustLookup(t, "click", Options{})
	if got, want := primaries(click.Mine(recs)), []string{"dog → a.com", "dog → b.com", "dog → a.com"}; !slices.Equal(got, want) {
		t.Errorf("click domain: got %q, want %q", got, want)
	}
	if got, want := primaries(mustLookup(t, "click", Options{URLLevel: "full"}).Mine(recs)),
		[]string{"dog → http://a.com/x/1", "dog → http://a.com/x/2", "dog → http://b.com", "dog → http://a.com/y"}; !slices.Equal(got, want) {
		t.Errorf("click full: got %q, want %q", got, want)
	}
	if got, want := primaries(mustLookup(t, "url", Options{URLLevel: "dir"}).Mine(recs)),
		[]string{"a.com/x/", "b.com/", "a.com/"}; !slices.Equal(got, want) {
		t.Errorf("url dir: got %q, want %q", got, want)
	}
	for _, a := range click.Mine(recs) {
		if strings.Contains(a.Secondary, "http") {
			t.Errorf("click secondary %q carries the full URL", a.Secondary)
		}
	}
}

func TestLTR(t *testing.T) {
	recs := []aol.Record{
		r("new york hotels", 0, "http://a.com"),
		r("new york hotels", 0, "http://b.com"),
		r("new york hotels", 0.5, "http://a.com"), // same URL again: nothing
		r("cheap flights", 2.25, "http://c.com"),  // next instance 2m15s after
	}
	got := primaries(mustLookup(t, "ltr", Options{}).Mine(recs))
	want := []string{
		"new york hotels → a.com → rank → 1", "new york hotels → a.com → dwell → 1m-5m", "new york hotels → a.com → length → 3",
		"new york hotels → b.com → rank → 2", "new york hotels → b.com → dwell → 1m-5m", "new york hotels → b.com → length → 3",
		"cheap flights → c.com → rank → 1", "cheap flights → c.com → dwell → none", "cheap flights → c.com → length → 2",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	o := Options{Buckets: Buckets{Rank: []int{1}, Dwell: []time.Duration{time.Minute, 3 * time.Minute}, Length: []int{2}}}
	got = primaries(mustLookup(t, "ltr", o).Mine(recs[:2]))
	want = []string{
		"new york hotels → a.com → rank → 1", "new york hotels → a.com → dwell → none", "new york hotels → a.com → length → 3+",
		"new york hotels → b.com → rank → 2+", "new york hotels → b.com → dwell → none", "new york hotels → b.com → length → 3+",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("custom buckets: got %q\nwant %q", got, want)
	}
	// an explicit ItemRank wins over the click position
	rr := r("q", 0, "http://z.com")
	rr.ItemRank = 7
	if got := primaries(LTRApp{Level: URLDomain}.Mine([]aol.Record{rr}))[0]; got != "q → z.com → rank → 6-10" {
		t.Errorf("ItemRank 7: %q", got)
	}
}

func TestBuckets(t *testing.T) {
	b := []int{1, 2, 3, 5, 10}
	for v, want := range map[int]string{1: "1", 2: "2", 3: "3", 4: "4-5", 5: "4-5", 6: "6-10", 10: "6-10", 11: "11+", 500: "11+"} {
		if got := IntBucket(v, b); got != want {
			t.Errorf("IntBucket(%d) = %q, want %q", v, got, want)
		}
	}
	d := DefaultDwellBuckets
	for v, want := range map[time.Duration]string{0: "0s-10s", 9 * time.Second: "0s-10s", 10 * time.Second: "10s-30s",
		59 * time.Second: "30s-1m", time.Minute: "1m-5m", 30 * time.Minute: "30m+", 90 * time.Second: "1m-5m"} {
		if got := DurationBucket(v, d); got != want {
			t.Errorf("DurationBucket(%v) = %q, want %q", v, got, want)
		}
	}
	if got := FormatDuration(1500 * time.Millisecond); got != "1.5s" {
		t.Errorf("FormatDuration(1.5s) = %q", got)
	}
	if got := FormatDuration(2 * time.Hour); got != "2h" {
		t.Errorf("FormatDuration(2h) = %q", got)
	}
}

func TestKeyword(t *testing.T) {
	recs := []aol.Record{r("New York new", 0, ""), r("new york new", 1, ""), r("york", 2, ""), r("new  york NEW", 3, "")}
	got := primaries(mustLookup(t, "keyword", Options{}).Mine(recs))
	want := []string{"new", "york", "york", "new", "york"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestLookupWithErrors(t *testing.T) {
	for _, o := range []Options{
		{URLLevel: "path"},
		{SessionGap: -time.Second},
		{Buckets: Buckets{Rank: []int{3, 2}}},
		{Buckets: Buckets{Rank: []int{0}}},
		{Buckets: Buckets{Length: []int{1, 1}}},
		{Buckets: Buckets{Dwell: []time.Duration{time.Minute, time.Second}}},
	} {
		if _, err := LookupWith("ltr", o); err == nil {
			t.Errorf("LookupWith(ltr, %+v) accepted", o)
		}
	}
	if len(Apps()) != 6 {
		t.Errorf("Apps() = %v, want 6 applications", Apps())
	}
}

func TestJoinSplit(t *testing.T) {
	for _, fields := range [][]string{{"dog", "puppy"}, {"a → b", `c\d`}, {`\u2192`, `\u005c→`}, {" x ", "  "}, {"", ""}} {
		j := Join(fields...)
		if strings.Count(j, "→") != len(fields)-1 {
			t.Errorf("Join(%q) = %q holds extra arrows", fields, j)
		}
		got, err := Split(j, len(fields))
		if err != nil || !slices.Equal(got, fields) {
			t.Errorf("Split(Join(%q)) = %q, %v", fields, got, err)
		}
		// the two plain replace-alls the ClickHouse views use decode each field too
		for i, f := range strings.Split(j, Sep) {
			if d := strings.ReplaceAll(strings.ReplaceAll(f, `\u2192`, "→"), `\u005c`, `\`); d != fields[i] {
				t.Errorf("replace-all decoding of %q = %q, want %q", f, d, fields[i])
			}
		}
	}
	for _, bad := range []string{`a\b → c`, `a\u20 → c`} {
		if _, err := Split(bad, 2); err == nil {
			t.Errorf("Split(%q) accepted", bad)
		}
	}
	if _, err := Split("a → b → c", 2); err == nil {
		t.Error("Split accepted 3 fields for 2")
	}
}

// FuzzSplit: Split never panics on released items (network input) and, when
// it accepts, Join restores the input exactly.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"dog → puppy", `a\u2192b → c\u005c`, `\`, "→", " → ", `\u005`, ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fields, err := Split(s, 0)
		if err != nil {
			return
		}
		if j := Join(fields...); j != s {
			t.Fatalf("Join(Split(%q)) = %q", s, j)
		}
	})
}
