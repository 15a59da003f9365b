package apps

import (
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/normalize"
)

// QueryAppName is the name of the query application.
const QueryAppName = "query"

// QueryApp is the "query" mining application: one artifact per query
// instance (CrowdLogging §3.3 "Query frequency mining", with §4's "remove
// duplicate queries that occurred in succession").
//
// Each record's query is normalized with normalize.Query; records it rejects
// (empty, or the AOL placeholder "-") are skipped. Then consecutive records
// with the same normalized query collapse into one instance, because AOL
// repeats the query row for every result clicked. "Consecutive" means
// adjacent among the kept records in the user's record order, whatever the
// time gap between them; the same query asked again after a different one is
// a new instance.
//
// For each instance, Primary is the normalized query, Secondary the original
// query string of the run's first row, and Time that row's QueryTime.
type QueryApp struct{}

// Name returns "query".
func (QueryApp) Name() string { return QueryAppName }

// Mine returns the query instances of one user's records, in record order.
func (QueryApp) Mine(records []aol.Record) []Artifact {
	var out []Artifact
	for _, r := range records {
		q, ok := normalize.Query(r.Query)
		if !ok {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Primary == q {
			continue
		}
		out = append(out, Artifact{Primary: q, Secondary: r.Query, Time: r.QueryTime})
	}
	return out
}
