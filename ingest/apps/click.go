package apps

import (
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/normalize"
)

// ClickAppName is the name of the query→URL click application.
const ClickAppName = "click"

// ClickApp is the "click" mining application: query→URL pairs
// (CrowdLogging §3.3, "query→URL click" mining).
//
// Query instances are those of QueryApp: records whose query normalizes to
// nothing are skipped, and consecutive kept records with the same
// normalized query form one instance. Within an instance, every distinct
// canonical URL (CanonicalURL at Level, "domain" by default) among the
// records' ClickURLs gives exactly one artifact, in the order of its first
// click; records without a ClickURL add nothing. So a query instance with no
// click produces nothing, and two clicks on the same URL (or, at "domain",
// on two pages of one site) in one instance count once.
//
// Primary is Join(normalized query, canonical URL), e.g.
// "dog → www.example.com"; Secondary is Join(original query of the
// instance's first record, canonical URL) — never the full original URL;
// Time is the QueryTime of the first record of the instance that clicked
// the URL.
type ClickApp struct {
	Level string // URLFull, URLDomain or URLDir
}

// Name returns "click".
func (ClickApp) Name() string { return ClickAppName }

// Mine returns the click instances of one user's records, in record order.
func (a ClickApp) Mine(records []aol.Record) []Artifact {
	clicks := mineClicks(records, a.Level)
	out := make([]Artifact, 0, len(clicks))
	for _, c := range clicks {
		out = append(out, Artifact{Primary: Join(c.query, c.url), Secondary: Join(c.original, c.url), Time: c.time})
	}
	return out
}

// click is one (query instance, distinct canonical URL) of a user.
type click struct {
	query, original string    // normalized query; original query of the instance's first record
	url             string    // canonical URL
	time            time.Time // QueryTime of the instance's first record clicking url
	rank            int       // ItemRank of that record, else the URL's 1-based position among the instance's distinct URLs
	instance        int       // index of the query instance among the user's instances
	tokens          int       // tokens of the normalized query (split on " ")
	next            time.Time // QueryTime of the next instance's first record, if hasNext
	hasNext         bool      // the user has a later query instance
}

// mineClicks returns the user's clicks (see ClickApp) in record order.
func mineClicks(records []aol.Record, level string) []click {
	type kept struct {
		rec aol.Record
		q   string
	}
	var ks []kept
	for _, r := range records {
		if q, ok := normalize.Query(r.Query); ok {
			ks = append(ks, kept{r, q})
		}
	}
	var out []click
	var instStart []time.Time // first record time per instance
	firstOfInst := 0          // index in out of the current instance's first click
	seen := map[string]bool{}
	inst, original := -1, ""
	for i, k := range ks {
		if i == 0 || k.q != ks[i-1].q {
			inst++
			instStart = append(instStart, k.rec.QueryTime)
			original = k.rec.Query
			clear(seen)
			firstOfInst = len(out)
		}
		u, ok := CanonicalURL(k.rec.ClickURL, level)
		if !ok || seen[u] {
			continue
		}
		seen[u] = true
		rank := k.rec.ItemRank
		if rank <= 0 {
			rank = len(out) - firstOfInst + 1
		}
		out = append(out, click{query: k.q, original: original, url: u, time: k.rec.QueryTime,
			rank: rank, instance: inst, tokens: countTokens(k.q)})
	}
	for i := range out {
		if n := out[i].instance + 1; n < len(instStart) {
			out[i].next, out[i].hasNext = instStart[n], true
		}
	}
	return out
}

// countTokens is the number of " "-separated tokens of a normalized query.
func countTokens(q string) int {
	n := 1
	for i := 0; i < len(q); i++ {
		if q[i] == ' ' {
			n++
		}
	}
	return n
}
