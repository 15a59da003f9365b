package apps

import (
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/normalize"
)

// ReformulationAppName is the name of the query-reformulation application.
const ReformulationAppName = "reformulation"

// ReformulationApp is the "reformulation" mining application: ordered pairs
// of consecutive distinct queries of one user within a session
// (CrowdLogging §3.3, "query reformulation": "dog → puppy").
//
// Exactly:
//
//  1. records whose query normalizes to nothing (normalize.Query) are
//     skipped; they neither end a session nor separate two queries;
//  2. the kept records, in record order, are cut into sessions wherever the
//     QueryTime of a record is more than Gap after the previous kept
//     record's (Gap = DefaultSessionGap, 30 minutes, when zero);
//  3. within a session, consecutive records with the same normalized query
//     collapse into one (as in QueryApp), leaving a sequence q1, q2, … with
//     q_i ≠ q_{i+1};
//  4. every adjacent pair (q_i, q_{i+1}) is one artifact.
//
// Primary is Join(q_i, q_{i+1}), e.g. "dog → puppy"; Secondary is Join of
// the two original query strings (of the first record of each run); Time is
// the QueryTime of q_{i+1}'s first record (when the reformulation happened).
// A user's last query of a session has no pair, so the reformulations from
// q are at most the query instances of q.
//
// With Sorted (--pair-order sorted) each pair is written with its two
// queries in byte order (and Secondary in the same order), so both
// directions of a reformulation are one artifact.
type ReformulationApp struct {
	Gap    time.Duration // session gap; 0 = DefaultSessionGap
	Sorted bool          // unordered pairs: the two queries in byte order
}

// Name returns "reformulation".
func (ReformulationApp) Name() string { return ReformulationAppName }

// Mine returns the reformulation instances of one user's records, in record
// order.
func (a ReformulationApp) Mine(records []aol.Record) []Artifact {
	gap := a.Gap
	if gap <= 0 {
		gap = DefaultSessionGap
	}
	var out []Artifact
	var prevQ, prevOrig string
	var prevTime time.Time
	have := false // prevQ belongs to the current session
	for _, r := range records {
		q, ok := normalize.Query(r.Query)
		if !ok {
			continue
		}
		if have && r.QueryTime.Sub(prevTime) > gap {
			have = false // new session
		}
		prevTime = r.QueryTime
		if have && q == prevQ {
			continue
		}
		if have {
			q1, q2, o1, o2 := prevQ, q, prevOrig, r.Query
			if a.Sorted && q2 < q1 {
				q1, q2, o1, o2 = q2, q1, o2, o1
			}
			out = append(out, Artifact{Primary: Join(q1, q2), Secondary: Join(o1, o2), Time: r.QueryTime})
		}
		prevQ, prevOrig, have = q, r.Query, true
	}
	return out
}
