package apps

import (
	"strings"

	"github.com/crowdlog/crowdlog/ingest/aol"
)

// KeywordAppName is the name of the keyword (token) frequency application.
const KeywordAppName = "keyword"

// KeywordApp is the "keyword" mining application: token frequency
// (CrowdLogging §3.3 lists keyword statistics among the artifacts). Each query instance of QueryApp (normalized query,
// consecutive repeats collapsed) is split on " " (normalized queries have
// single spaces and no leading or trailing ones), and every distinct token
// of the instance is one artifact, in order of first occurrence: an
// instance counts a token once, so "new york new" gives "new" and "york".
//
// Primary is the token; Secondary is empty; Time the instance's QueryTime.
// Tokens never contain a space, so Primary needs no escaping.
type KeywordApp struct{}

// Name returns "keyword".
func (KeywordApp) Name() string { return KeywordAppName }

// Mine returns the token instances of one user's records, in record order.
func (KeywordApp) Mine(records []aol.Record) []Artifact {
	var out []Artifact
	for _, q := range (QueryApp{}).Mine(records) {
		toks := strings.Split(q.Primary, " ")
		for i, t := range toks {
			dup := false
			for _, u := range toks[:i] {
				if u == t {
					dup = true
					break
				}
			}
			if !dup {
				out = append(out, Artifact{Primary: t, Time: q.Time})
			}
		}
	}
	return out
}
