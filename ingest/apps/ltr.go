package apps

import (
	"github.com/crowdlog/crowdlog/ingest/aol"
)

// LTRAppName is the name of the learning-to-rank features application.
const LTRAppName = "ltr"

// Feature names of the ltr application (the third field of its artifacts).
const (
	FeatureRank   = "rank"   // click rank
	FeatureDwell  = "dwell"  // dwell-time proxy
	FeatureLength = "length" // query length in tokens
)

// NoNextQuery is the dwell bucket of a click after which the user issued no
// further query in the log.
const NoNextQuery = "none"

// LTRApp is the "ltr" mining application: learning-to-rank features
// (CrowdLogging §3.3 "features for learning to rank"), one artifact per
// (query, URL, feature name, bucketed value).
//
// For every click of ClickApp (one per query instance and distinct
// canonical URL at Level) it emits three artifacts, in this order:
//
//   - "rank": the ItemRank of the instance's first record that clicked the
//     URL; when ItemRank is empty (as everywhere in the bundled AOL subset)
//     the URL's 1-based position among the instance's distinct clicked
//     URLs. Bucketed by IntBucket with Buckets.Rank.
//   - "dwell": dwell-time proxy — the time from that record's QueryTime to
//     the QueryTime of the first record of the user's next query instance
//     (AOL logs no click times), bucketed by DurationBucket with
//     Buckets.Dwell; "none" when the user has no later query instance.
//   - "length": the number of tokens of the normalized query (split on
//     " "), bucketed by IntBucket with Buckets.Length.
//
// Primary is Join(query, url, feature, bucket), e.g.
// "dog → www.example.com → rank → 1"; Secondary is Join(original query,
// url, feature, bucket); Time is the click's Time (see ClickApp).
type LTRApp struct {
	Level   string  // URLFull, URLDomain or URLDir
	Buckets Buckets // nil lists: the defaults
}

// Name returns "ltr".
func (LTRApp) Name() string { return LTRAppName }

// Mine returns the feature instances of one user's records, in record order.
func (a LTRApp) Mine(records []aol.Record) []Artifact {
	b := a.Buckets
	if b.Rank == nil {
		b.Rank = DefaultRankBuckets
	}
	if b.Dwell == nil {
		b.Dwell = DefaultDwellBuckets
	}
	if b.Length == nil {
		b.Length = DefaultLengthBuckets
	}
	clicks := mineClicks(records, a.Level)
	out := make([]Artifact, 0, 3*len(clicks))
	for _, c := range clicks {
		dwell := NoNextQuery
		if c.hasNext {
			dwell = DurationBucket(max(c.next.Sub(c.time), 0), b.Dwell)
		}
		for _, f := range [...][2]string{
			{FeatureRank, IntBucket(c.rank, b.Rank)},
			{FeatureDwell, dwell},
			{FeatureLength, IntBucket(c.tokens, b.Length)},
		} {
			out = append(out, Artifact{Primary: Join(c.query, c.url, f[0], f[1]),
				Secondary: Join(c.original, c.url, f[0], f[1]), Time: c.time})
		}
	}
	return out
}
