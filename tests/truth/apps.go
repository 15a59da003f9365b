package truth

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/text/unicode/norm"
)

// Options are the application options the expected release is computed
// with; zero fields mean the same defaults as `crowdlog run` (url level
// domain, 30-minute sessions, rank buckets 1,2,3,5,10, dwell buckets
// 10s,30s,1m,5m,30m, length buckets 1,2,3,4,6). Written out again here on
// purpose: the truth shares no code with pipelines.
type Options struct {
	URLLevel      string
	SessionGap    time.Duration
	SortedPairs   bool // reformulation: the two queries of a pair in byte order
	RankBuckets   []int
	DwellBuckets  []time.Duration
	LengthBuckets []int
}

type logRow struct {
	q, url string // normalized query ("" when dropped), raw ClickURL
	t      time.Time
	rank   int // ItemRank, 0 when empty
}

// AppRelease returns the items an FT_u (users ≥ k) or FT_a (instances ≥ k)
// release of app ("query", "reformulation", "click", "url", "ltr",
// "keyword") must contain, computed straight from the raw log at path (the
// first maxUsers AnonIDs, 0 = all), keyed by item, following the
// definitions in docs/applications.md. Errors: unreadable file, unknown app
// or policy.
func AppRelease(path, app, policy string, k, maxUsers int, o Options) (map[string]Row, error) {
	if policy != "ft-u" && policy != "ft-a" {
		return nil, fmt.Errorf("truth: policy %q: only ft-u and ft-a", policy)
	}
	if o.URLLevel == "" {
		o.URLLevel = "domain"
	}
	if o.SessionGap == 0 {
		o.SessionGap = 30 * time.Minute
	}
	if o.RankBuckets == nil {
		o.RankBuckets = []int{1, 2, 3, 5, 10}
	}
	if o.DwellBuckets == nil {
		o.DwellBuckets = []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute}
	}
	if o.LengthBuckets == nil {
		o.LengthBuckets = []int{1, 2, 3, 4, 6}
	}
	mine := map[string]func([]logRow, Options) []string{
		"query": truthQuery, "reformulation": truthReformulation, "click": truthClick,
		"url": truthURL, "ltr": truthLTR, "keyword": truthKeyword,
	}[app]
	if mine == nil {
		return nil, fmt.Errorf("truth: unknown app %q", app)
	}
	users, order, err := readLog(path, maxUsers)
	if err != nil {
		return nil, err
	}
	inst := map[string]int{}
	distinct := map[string]int{}
	for _, u := range order {
		mine := mine(users[u], o)
		seen := map[string]bool{}
		for _, a := range mine {
			inst[a]++
			if !seen[a] {
				seen[a] = true
				distinct[a]++
			}
		}
	}
	out := map[string]Row{}
	for a, n := range inst {
		if (policy == "ft-u" && distinct[a] >= k) || (policy == "ft-a" && n >= k) {
			out[a] = Row{Item: a, Impressions: n, Users: distinct[a]}
		}
	}
	return out, nil
}

// readLog returns every user's rows in file order, and the users in order
// of first appearance, stopping at the (maxUsers+1)-th user (0 = all).
func readLog(path string, maxUsers int) (map[string][]logRow, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		if r, err = gzip.NewReader(f); err != nil {
			return nil, nil, err
		}
	}
	users := map[string][]logRow{}
	var order []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fl := strings.Split(sc.Text(), "\t")
		if len(fl) < 3 || fl[0] == "AnonID" {
			continue
		}
		if _, ok := users[fl[0]]; !ok {
			if maxUsers > 0 && len(order) == maxUsers {
				break
			}
			order = append(order, fl[0])
			users[fl[0]] = nil
		}
		t, err := time.Parse("2006-01-02 15:04:05", fl[2])
		if err != nil {
			return nil, nil, fmt.Errorf("truth: bad time on a line: %w", err)
		}
		q := strings.Join(strings.Fields(strings.ToLower(norm.NFKC.String(fl[1]))), " ")
		if q == "-" {
			q = ""
		}
		row := logRow{q: q, t: t}
		if len(fl) >= 5 {
			row.rank, _ = strconv.Atoi(strings.TrimSpace(fl[3]))
			row.url = fl[4]
		}
		users[fl[0]] = append(users[fl[0]], row)
	}
	return users, order, sc.Err()
}

var escaper = strings.NewReplacer(`\`, `\u005c`, "→", `\u2192`)

func field(s string) string { return escaper.Replace(s) }

func pair(fields ...string) string {
	for i := range fields {
		fields[i] = field(fields[i])
	}
	return strings.Join(fields, " → ")
}

// runs returns the query instances: maximal runs of kept rows with one q.
func runs(rows []logRow) [][]logRow {
	var out [][]logRow
	for _, r := range rows {
		if r.q == "" {
			continue
		}
		if n := len(out); n > 0 && out[n-1][0].q == r.q {
			out[n-1] = append(out[n-1], r)
		} else {
			out = append(out, []logRow{r})
		}
	}
	return out
}

func truthQuery(rows []logRow, _ Options) []string {
	var out []string
	for _, run := range runs(rows) {
		out = append(out, run[0].q)
	}
	return out
}

func truthReformulation(rows []logRow, o Options) []string {
	var out []string
	var last *logRow
	for i := range rows {
		r := &rows[i]
		if r.q == "" {
			continue
		}
		if last != nil && r.t.Sub(last.t) <= o.SessionGap && r.q != last.q {
			q1, q2 := last.q, r.q
			if o.SortedPairs && q2 < q1 {
				q1, q2 = q2, q1
			}
			out = append(out, pair(q1, q2))
		}
		last = r
	}
	return out
}

// canon is the URL at level, "" when there is none.
func canon(raw, level string) string {
	raw = strings.TrimSpace(raw)
	scheme, rest, found := strings.Cut(raw, "://")
	if !found {
		scheme, rest = "", raw
	}
	host, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		host, tail = rest[:i], rest[i:]
	}
	host = strings.ToLower(host)
	if host == "" {
		return ""
	}
	switch level {
	case "full":
		if found {
			return strings.ToLower(scheme) + "://" + host + tail
		}
		return host + tail
	case "dir":
		p, _, _ := strings.Cut(tail, "?")
		p, _, _ = strings.Cut(p, "#")
		if !strings.Contains(p, "/") {
			return host + "/"
		}
		return host + p[:strings.LastIndex(p, "/")+1]
	}
	return host
}

type clk struct {
	q, url string
	rank   int
	t      time.Time
	next   *time.Time
}

func clicks(rows []logRow, level string) []clk {
	var out []clk
	rs := runs(rows)
	for i, run := range rs {
		var next *time.Time
		if i+1 < len(rs) {
			next = &rs[i+1][0].t
		}
		seen := map[string]bool{}
		for _, r := range run {
			u := canon(r.url, level)
			if u == "" || seen[u] {
				continue
			}
			seen[u] = true
			rank := r.rank
			if rank == 0 {
				rank = len(seen)
			}
			out = append(out, clk{q: r.q, url: u, rank: rank, t: r.t, next: next})
		}
	}
	return out
}

func truthClick(rows []logRow, o Options) []string {
	var out []string
	for _, c := range clicks(rows, o.URLLevel) {
		out = append(out, pair(c.q, c.url))
	}
	return out
}

func truthURL(rows []logRow, o Options) []string {
	var out []string
	for _, c := range clicks(rows, o.URLLevel) {
		out = append(out, c.url)
	}
	return out
}

func intBucket(v int, bounds []int) string {
	prev := 0
	for _, b := range bounds {
		if v <= b {
			if b == prev+1 {
				return strconv.Itoa(b)
			}
			return fmt.Sprintf("%d-%d", prev+1, b)
		}
		prev = b
	}
	return fmt.Sprintf("%d+", prev+1)
}

func durName(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	for _, u := range []struct {
		d time.Duration
		s string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d%u.d == 0 {
			return fmt.Sprint(int64(d/u.d)) + u.s
		}
	}
	return d.String()
}

func durBucket(d time.Duration, bounds []time.Duration) string {
	prev := time.Duration(0)
	for _, b := range bounds {
		if d < b {
			return durName(prev) + "-" + durName(b)
		}
		prev = b
	}
	return durName(prev) + "+"
}

func truthLTR(rows []logRow, o Options) []string {
	var out []string
	for _, c := range clicks(rows, o.URLLevel) {
		dwell := "none"
		if c.next != nil {
			dwell = durBucket(max(c.next.Sub(c.t), 0), o.DwellBuckets)
		}
		out = append(out,
			pair(c.q, c.url, "rank", intBucket(c.rank, o.RankBuckets)),
			pair(c.q, c.url, "dwell", dwell),
			pair(c.q, c.url, "length", intBucket(len(strings.Split(c.q, " ")), o.LengthBuckets)))
	}
	return out
}

func truthKeyword(rows []logRow, _ Options) []string {
	var out []string
	for _, run := range runs(rows) {
		seen := map[string]bool{}
		for _, tok := range strings.Split(run[0].q, " ") {
			if !seen[tok] {
				seen[tok] = true
				out = append(out, tok)
			}
		}
	}
	return out
}
