package apps

import "github.com/spf13/pflag"

// AddFlags adds the application options (docs/applications.md) to f,
// filling o; every command that mines (run, ingest, simulate) and the
// release, whose pipeline digest covers them, take the same flags.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.URLLevel, "url-level", URLDomain, "apps click, url, ltr: how much of a clicked URL to keep: full, domain or dir")
	f.DurationVar(&o.SessionGap, "session-gap", DefaultSessionGap, "app reformulation: an idle time longer than this starts a new session")
	f.StringVar(&o.PairOrder, "pair-order", PairTime, "app reformulation: time (q1 → q2 as searched) or sorted (one artifact for both directions)")
	f.IntSliceVar(&o.Buckets.Rank, "rank-buckets", DefaultRankBuckets, "app ltr: upper bounds of the click-rank buckets")
	f.DurationSliceVar(&o.Buckets.Dwell, "dwell-buckets", DefaultDwellBuckets, "app ltr: upper bounds of the dwell-time buckets")
	f.IntSliceVar(&o.Buckets.Length, "length-buckets", DefaultLengthBuckets, "app ltr: upper bounds of the query-length buckets (tokens)")
}
