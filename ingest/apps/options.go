package apps

import (
	"fmt"
	"strconv"
	"time"
)

// URL levels for the click, url and ltr applications (--url-level); see
// CanonicalURL.
const (
	URLFull   = "full"
	URLDomain = "domain"
	URLDir    = "dir"
)

// DefaultSessionGap is the idle time that ends a session for the
// reformulation application: 30 minutes, the usual search-session cut-off
// (CrowdLogging §3.3 mines reformulations within sessions).
const DefaultSessionGap = 30 * time.Minute

// Options parameterizes the applications. The zero value means the
// defaults; LookupWith validates and fills it. Options are not part of the
// release key (app, epoch, policy, k): releasing one app twice with other
// options needs another --epoch or --database.
type Options struct {
	// URLLevel is how much of a clicked URL the click, url and ltr apps keep:
	// "full", "domain" (default) or "dir"; see CanonicalURL.
	URLLevel string
	// SessionGap: a gap longer than this between two consecutive kept
	// records' QueryTimes starts a new session (reformulation app).
	// 0 means DefaultSessionGap; negative is an error.
	SessionGap time.Duration
	// PairOrder is how the reformulation app orders a pair: "time"
	// (default: q1 → q2 as searched) or "sorted" (the two queries in byte
	// order, so "dog → puppy" and "puppy → dog" are one artifact: related
	// queries regardless of direction).
	PairOrder string
	// Buckets are the ltr app's feature buckets.
	Buckets Buckets
}

// Pair orders of the reformulation application (--pair-order).
const (
	PairTime   = "time"
	PairSorted = "sorted"
)

// Buckets are the upper bounds of the ltr features' buckets, each list
// strictly increasing. A value v falls in the first bucket whose bound is
// ≥ v (integers) or > v (durations); values beyond the last bound fall in
// an open-ended last bucket. Nil lists mean the defaults; see the Label
// functions for the bucket names.
type Buckets struct {
	// Rank: click rank, 1-based (default 1,2,3,5,10 → "1" "2" "3" "4-5"
	// "6-10" "11+").
	Rank []int
	// Dwell: time from the click to the user's next query (default 10s,
	// 30s, 1m, 5m, 30m → "0s-10s" "10s-30s" "30s-1m" "1m-5m" "5m-30m"
	// "30m+"; "none" when there is no next query).
	Dwell []time.Duration
	// Length: query length in tokens (default 1,2,3,4,6 → "1" "2" "3" "4"
	// "5-6" "7+").
	Length []int
}

// Default bucket bounds of the ltr features.
var (
	DefaultRankBuckets   = []int{1, 2, 3, 5, 10}
	DefaultDwellBuckets  = []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute}
	DefaultLengthBuckets = []int{1, 2, 3, 4, 6}
)

// WithDefaults validates o and returns it with every zero field set to its
// default (the options an application runs with). Errors name the
// offending option and what is allowed.
func (o Options) WithDefaults() (Options, error) { return o.withDefaults() }

// withDefaults validates o and returns it with defaults filled in.
// Errors name the offending option and what is allowed.
func (o Options) withDefaults() (Options, error) {
	switch o.PairOrder {
	case "":
		o.PairOrder = PairTime
	case PairTime, PairSorted:
	default:
		return o, fmt.Errorf("apps: Options.PairOrder %q (--pair-order): use %s or %s", o.PairOrder, PairTime, PairSorted)
	}
	switch o.URLLevel {
	case "":
		o.URLLevel = URLDomain
	case URLFull, URLDomain, URLDir:
	default:
		return o, fmt.Errorf("apps: Options.URLLevel %q (--url-level): use full, domain or dir", o.URLLevel)
	}
	if o.SessionGap < 0 {
		return o, fmt.Errorf("apps: Options.SessionGap %s (--session-gap) is negative", o.SessionGap)
	}
	if o.SessionGap == 0 {
		o.SessionGap = DefaultSessionGap
	}
	if o.Buckets.Rank == nil {
		o.Buckets.Rank = DefaultRankBuckets
	}
	if o.Buckets.Dwell == nil {
		o.Buckets.Dwell = DefaultDwellBuckets
	}
	if o.Buckets.Length == nil {
		o.Buckets.Length = DefaultLengthBuckets
	}
	if err := increasingInts("Options.Buckets.Rank (--rank-buckets)", o.Buckets.Rank, 1); err != nil {
		return o, err
	}
	if err := increasingInts("Options.Buckets.Length (--length-buckets)", o.Buckets.Length, 1); err != nil {
		return o, err
	}
	for i, d := range o.Buckets.Dwell {
		if d <= 0 || (i > 0 && d <= o.Buckets.Dwell[i-1]) {
			return o, fmt.Errorf("apps: Options.Buckets.Dwell %v (--dwell-buckets): want positive, strictly increasing durations", o.Buckets.Dwell)
		}
	}
	return o, nil
}

func increasingInts(flag string, b []int, min int) error {
	for i, v := range b {
		if v < min || (i > 0 && v <= b[i-1]) {
			return fmt.Errorf("apps: %s %v: want integers ≥ %d, strictly increasing", flag, b, min)
		}
	}
	return nil
}

// IntBucket names the bucket of v for upper bounds b (strictly increasing,
// ≥ 1; values v ≥ 1): bucket i covers (b[i-1], b[i]], named "b[i]" when it
// holds one value and "lo-b[i]" otherwise; values above the last bound are
// "last+1" followed by "+". With no bounds every value is "1+".
// Example with 1,2,3,5,10: 1→"1", 4→"4-5", 7→"6-10", 12→"11+".
func IntBucket(v int, b []int) string {
	lo := 1
	for _, hi := range b {
		if v <= hi {
			if lo == hi {
				return strconv.Itoa(hi)
			}
			return strconv.Itoa(lo) + "-" + strconv.Itoa(hi)
		}
		lo = hi + 1
	}
	return strconv.Itoa(lo) + "+"
}

// DurationBucket names the bucket of d ≥ 0 for upper bounds b (strictly
// increasing, positive): bucket i covers [b[i-1], b[i]) (from 0s for the
// first), named "lo-hi"; d ≥ the last bound is "last+". Durations are
// written by FormatDuration. Example with 10s,30s,1m: 5s→"0s-10s",
// 30s→"30s-1m", 2m→"1m+".
func DurationBucket(d time.Duration, b []time.Duration) string {
	var lo time.Duration
	for _, hi := range b {
		if d < hi {
			return FormatDuration(lo) + "-" + FormatDuration(hi)
		}
		lo = hi
	}
	return FormatDuration(lo) + "+"
}

// FormatDuration writes d compactly for bucket names: whole hours as "2h",
// whole minutes as "5m", whole seconds as "30s", anything else as
// time.Duration.String.
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}
