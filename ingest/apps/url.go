package apps

import (
	"strings"

	"github.com/crowdlog/crowdlog/ingest/aol"
)

// URLAppName is the name of the URL-popularity application.
const URLAppName = "url"

// CanonicalURL reduces a clicked URL to the given level (URLFull, URLDomain
// or URLDir) and reports whether anything is left. Pure string operations,
// no URL parser, so every client maps the same bytes to the same artifact:
//
//  1. surrounding white space is trimmed; an empty URL gives ("", false);
//  2. if the URL contains "://", the part before it is the scheme
//     (lower-cased), the rest the remainder; otherwise there is no scheme;
//  3. the host is the remainder up to the first "/", "?" or "#",
//     lower-cased; an empty host gives ("", false);
//  4. the path is what follows the host up to the first "?" or "#".
//
// Levels: "full" = scheme "://" host and everything after the host, as
// written (host alone when there was no scheme);
// "domain" = host, e.g. "www.example.com";
// "dir" = host + the path up to and including its last "/" ("/" when the
// path is empty), e.g. "www.example.com/a/" for
// "http://www.example.com/a/b.html?x=1".
// An unknown level gives ("", false).
func CanonicalURL(raw, level string) (string, bool) {
	u := strings.TrimSpace(raw)
	if u == "" {
		return "", false
	}
	scheme := ""
	if i := strings.Index(u, "://"); i >= 0 {
		scheme, u = strings.ToLower(u[:i]), u[i+3:]
	}
	end := strings.IndexAny(u, "/?#")
	if end < 0 {
		end = len(u)
	}
	host, after := strings.ToLower(u[:end]), u[end:]
	if host == "" {
		return "", false
	}
	switch level {
	case URLFull:
		if scheme != "" {
			return scheme + "://" + host + after, true
		}
		return host + after, true
	case URLDomain:
		return host, true
	case URLDir:
		path := after
		if i := strings.IndexAny(path, "?#"); i >= 0 {
			path = path[:i]
		}
		if i := strings.LastIndexByte(path, '/'); i >= 0 {
			return host + path[:i+1], true
		}
		return host + "/", true
	}
	return "", false
}

// URLApp is the "url" mining application: URL popularity alone
// (CrowdLogging §3.3, the URL half of query→URL click mining). Its
// instances are exactly the click application's, without the query: one
// artifact per (query instance, distinct canonical URL clicked in it); see
// ClickApp for the definition. So for every URL, url impressions = the sum
// of click impressions over all queries (released or not). Records without
// a ClickURL, or whose query normalizes to nothing, produce nothing.
//
// Primary is the canonical URL (see CanonicalURL; Level "domain" by
// default), Secondary is empty (the full original URL could identify its
// clicker, so it is never sent), Time the QueryTime of the first record of
// the instance that clicked the URL.
type URLApp struct {
	Level string // URLFull, URLDomain or URLDir
}

// Name returns "url".
func (URLApp) Name() string { return URLAppName }

// Mine returns the URL instances of one user's records, in record order.
func (a URLApp) Mine(records []aol.Record) []Artifact {
	clicks := mineClicks(records, a.Level)
	out := make([]Artifact, 0, len(clicks))
	for _, c := range clicks {
		out = append(out, Artifact{Primary: c.url, Time: c.time})
	}
	return out
}
