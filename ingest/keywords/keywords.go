// Package keywords is the keyword-count application of Private Data Donor
// mode (Primault et al., WWW 2019, §3.1 "monitored queries", §5.3
// "keywords"): a campaign monitors a list of L keywords, and one client's
// round-s vector V_s holds, for each monitored keyword ℓ, the number of its
// query instances on day s whose normalized query contains ℓ.
//
// A query instance (Instances) is a run of consecutive records of one user
// with the same normalized query on the same calendar day: the run of the
// seed's "duplicates in succession" (CrowdLogging §4) ends at the day
// boundary, so a query repeated once a day counts on every day. Days are
// calendar days of QueryTime in a time zone (UTC unless the caller names
// another, CountsIn). A keyword is contained in a query when it occurs at
// Unicode word boundaries (Match, UAX #29): whole words in scripts written
// with spaces, dictionary matching inside runs of ideographs; an instance
// counts a keyword once.
//
// The threshold applications (ingest/apps, "query" and "keyword") keep the
// seed's definitions: runs that continue across days, tokens split on " ".
package keywords

import (
	"bufio"
	"crypto/sha256"
	_ "embed"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/normalize"
)

//go:embed google-10000-english.txt
var google10000 string

// DefaultName names the default list: the 10,000 most common English words
// (first20hours/google-10000-english, commit d0736d4), the list PDD's pilot
// monitored (§5.3).
const DefaultName = "google-10000-english"

// List is an ordered list of monitored keywords: index ℓ of a count vector is
// keyword Words[ℓ]. Keywords are normalized (normalize.Query) and contain
// no space; duplicates are removed, keeping the first. Build one with Parse,
// Load or Default (Match needs their index).
type List struct {
	Words    []string
	index    map[string]int
	maxBytes int // the longest keyword, in bytes (Match)
}

// Default returns the embedded google-10000-english list (L = 10,000).
func Default() *List {
	l, err := Parse(strings.NewReader(google10000))
	if err != nil {
		panic(err) // the embedded file is checked by tests
	}
	return l
}

// Load reads a list from path, one keyword per line; "" or DefaultName
// return Default. Errors name the file and line.
func Load(path string) (*List, error) {
	if path == "" || path == DefaultName {
		return Default(), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("keyword list: %w", err)
	}
	defer f.Close()
	l, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("keyword list %s: %w", path, err)
	}
	return l, nil
}

// Parse reads one keyword per line. Blank lines and lines starting with '#'
// are skipped; each keyword is normalized; a keyword that still holds a
// space after normalization is an error (one keyword per line, matched by
// Match). Keywords may be in any script: "flu", "北京", "mp3下载".
func Parse(r io.Reader) (*List, error) {
	l := &List{index: map[string]int{}}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		w, ok := normalize.Query(s)
		if !ok {
			continue
		}
		if strings.Contains(w, " ") {
			return nil, fmt.Errorf("line %d: keyword %q has several tokens; monitor one token per line", line, s)
		}
		if _, dup := l.index[w]; dup {
			continue
		}
		l.index[w] = len(l.Words)
		l.Words = append(l.Words, w)
		l.maxBytes = max(l.maxBytes, len(w))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(l.Words) == 0 {
		return nil, fmt.Errorf("no keywords")
	}
	return l, nil
}

// Len is L, the vector length.
func (l *List) Len() int { return len(l.Words) }

// Index returns ℓ for keyword w, or -1 when w is not monitored.
func (l *List) Index(w string) int {
	if i, ok := l.index[w]; ok {
		return i
	}
	return -1
}

// Lookup returns ℓ for w as a user or operator writes it ("Free",
// " MP3 "), normalized as Parse normalizes the list's own lines, or -1
// when it is not monitored. Blacklists given on a command line go
// through it, so they match however they are cased or spaced.
func (l *List) Lookup(w string) int {
	n, ok := normalize.Query(strings.TrimSpace(w))
	if !ok {
		return -1
	}
	return l.Index(n)
}

// Day is a round: the number of days since 1970-01-01 of a calendar date
// (PDD §3.4: "the round number s becomes the number of days elapsed"). The
// date is UTC's unless the campaign names a time zone (DayIn).
type Day int32

// DayOf returns the UTC day of t.
func DayOf(t time.Time) Day { return Day(t.UTC().Unix() / 86400) }

// DayIn returns the calendar date of t in loc (nil = UTC) as a Day: the
// days from 1970-01-01 to that date, so DayIn(t, time.UTC) == DayOf(t)
// and Day.String names the local date. E.g. 2006-03-01 23:30 UTC is day
// 2006-03-02 in Asia/Shanghai (UTC+8).
func DayIn(t time.Time, loc *time.Location) Day {
	if loc == nil {
		loc = time.UTC
	}
	y, m, d := t.In(loc).Date()
	return Day(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400)
}

// Time returns the start (00:00 UTC) of day d.
func (d Day) Time() time.Time { return time.Unix(int64(d)*86400, 0).UTC() }

// String formats d as 2006-01-02.
func (d Day) String() string { return d.Time().Format("2006-01-02") }

// Sparse is one client's counts of one day: keyword index → count.
type Sparse map[int]uint64

// Instance is one query instance of the daily counts: a normalized query
// (normalize.Query) and the day of the first record of its run.
type Instance struct {
	// Query is the normalized query (normalize.Query) of the run.
	Query string
	// Day is the calendar day of the run's first record.
	Day Day
}

// Instances returns one user's query instances (records of that user in log
// order) with days in loc (nil = UTC): records whose query normalize.Query
// rejects are skipped; a record starts a new instance unless the previous
// kept record has the same normalized query on the same day. So
// "weather" at 23:50 and again at 00:10 (nothing in between) are two
// instances, one a day; the same pair at 10:00 and 10:05 is one.
func Instances(records []aol.Record, loc *time.Location) []Instance {
	var out []Instance
	for _, r := range records {
		q, ok := normalize.Query(r.Query)
		if !ok {
			continue
		}
		d := DayIn(r.QueryTime, loc)
		if n := len(out); n > 0 && out[n-1].Query == q && out[n-1].Day == d {
			continue
		}
		out = append(out, Instance{Query: q, Day: d})
	}
	return out
}

// Counts returns one user's keyword counts per UTC day from that user's
// records (all records of one user, in log order, as apps.App.Mine takes
// them): CountsIn with UTC.
func (l *List) Counts(records []aol.Record, blacklist map[string]bool) map[Day]Sparse {
	return l.CountsIn(records, blacklist, time.UTC)
}

// CountsIn returns one user's keyword counts per calendar day in loc (nil =
// UTC): for each day s and keyword ℓ, the number of the user's instances
// (Instances) on day s that contain ℓ (Match). Keywords in blacklist (PDD
// §6.1: words the user never shares; keys are list words) are left out.
func (l *List) CountsIn(records []aol.Record, blacklist map[string]bool, loc *time.Location) map[Day]Sparse {
	out := map[Day]Sparse{}
	for _, in := range Instances(records, loc) {
		for _, i := range l.Match(in.Query) {
			if blacklist[l.Words[i]] {
				continue
			}
			if out[in.Day] == nil {
				out[in.Day] = Sparse{}
			}
			out[in.Day][i]++
		}
	}
	return out
}

// Dense expands s into a vector of length L.
func (s Sparse) Dense(L int) []uint64 {
	v := make([]uint64, L)
	for i, c := range s {
		v[i] = c
	}
	return v
}

// Hash identifies the list (blind.Roster.ListHash): SHA-256 of
// "crowdlog-v1 pdd keyword list\n" followed by each keyword, in order, each
// followed by "\n" (keywords hold no newline, so the encoding is
// unambiguous). Coordinator, clients and release compare it so that vector
// slots mean the same keywords everywhere.
func (l *List) Hash() [32]byte {
	h := sha256.New()
	h.Write([]byte("crowdlog-v1 pdd keyword list\n"))
	for _, w := range l.Words {
		h.Write([]byte(w))
		h.Write([]byte{'\n'})
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}
