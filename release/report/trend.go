package report

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"time"
)

// Defaults of the trend section.
const (
	// DefaultTrendTop is the number of artifacts a trend follows.
	DefaultTrendTop = 8
	// maxTrends bounds the trends shown: the series with the most
	// impressions are kept.
	maxTrends = 8
)

// Trend is one release series across its epochs: the releases of one
// (app, policy, k) whose epochs have the same period (Period), at least
// two of them, in time order, and the artifacts with the most released
// impressions summed over those epochs.
type Trend struct {
	App, Policy string
	K           int
	// Period says how the epoch names read as time: "168h" (or any
	// LENGTH) for scheduled epochs START-LENGTH (`crowdlog run
	// --epoch-length 168h`, randomness --epoch-length), "day", "month" or
	// "year" for YYYY-MM-DD, YYYY-MM and YYYY, "" for names that carry no
	// time (such as "all"), which are ordered by name.
	Period string
	// Epochs are the series' epochs in time order (by start, then name).
	Epochs []string
	// Impressions is the sum of the series' releases' impressions.
	Impressions uint64
	// Artifacts are the Options.TrendTop artifacts with the most
	// impressions summed over Epochs, most first (ties by artifact).
	Artifacts []TrendArtifact
}

// TrendArtifact is one artifact (released_items.item, its variants
// summed) of a Trend.
type TrendArtifact struct {
	Item string
	// Total is the sum of Impressions.
	Total uint64
	// Impressions and Released are per epoch of the Trend (same index):
	// the impressions released, and whether the artifact was released at
	// all. Not released (Impressions 0) means it stayed below the
	// policy's threshold that epoch (fewer than k users under ft-u), not
	// that nobody searched for it.
	Impressions []uint64
	Released    []bool
}

var (
	scheduledRE = regexp.MustCompile(`^([0-9]{8}T[0-9]{6}Z)-([0-9]+)([hms])$`)
	dayRE       = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)
	monthRE     = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}$`)
	yearRE      = regexp.MustCompile(`^[0-9]{4}$`)
)

// epochTime reads an epoch name as the analyst views do
// (release/views.sql, completed_releases): START-LENGTH (START as
// 20060102T150405Z, LENGTH as 168h, 90m or 45s), YYYY-MM-DD, YYYY-MM or
// YYYY give the epoch's start and its period ("168h", "day", "month",
// "year"); every other name, and a name of those shapes that is no real
// date, gives ok false.
func epochTime(name string) (start time.Time, period string, ok bool) {
	var layout string
	switch {
	case scheduledRE.MatchString(name):
		m := scheduledRE.FindStringSubmatch(name)
		t, err := time.Parse("20060102T150405Z", m[1])
		if err != nil || t.Format("20060102T150405Z") != m[1] {
			return time.Time{}, "", false
		}
		if n, err := strconv.ParseUint(m[2], 10, 32); err != nil || n == 0 {
			return time.Time{}, "", false
		}
		return t, m[2] + m[3], true
	case dayRE.MatchString(name):
		layout, period = "2006-01-02", "day"
	case monthRE.MatchString(name):
		layout, period = "2006-01", "month"
	case yearRE.MatchString(name):
		layout, period = "2006", "year"
	default:
		return time.Time{}, "", false
	}
	t, err := time.Parse(layout, name)
	if err != nil || t.Format(layout) != name {
		return time.Time{}, "", false
	}
	return t, period, true
}

// epochTick is a short x tick label of an epoch: the start of a scheduled
// epoch (its date when it starts at midnight UTC), the name otherwise.
func epochTick(name string) string {
	t, _, ok := epochTime(name)
	switch {
	case !ok || !scheduledRE.MatchString(name):
		return label(name)
	case t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0:
		return t.Format("2006-01-02")
	case t.Second() == 0:
		return t.Format("2006-01-02 15:04")
	}
	return t.Format("2006-01-02 15:04:05")
}

// trendSeries groups the releases into series by (app, policy, k, period
// of the epoch name) and returns those with at least two epochs, their
// epochs in time order, the maxTrends with the most impressions (sorted
// by app, policy, k, period), and the number of series left out. A
// weekly replay and a release of the whole log ("all") under the same
// (app, policy, k) are two series, so "all" never lands on a weekly axis.
func trendSeries(rels []Release) (ts []Trend, dropped int) {
	type key struct {
		app, policy string
		k           int
		period      string
	}
	type epoch struct {
		name  string
		start time.Time
	}
	epochs := map[key][]epoch{}
	imps := map[key]uint64{}
	var keys []key
	for _, r := range rels {
		start, period, _ := epochTime(r.Epoch)
		k := key{r.App, r.Policy, r.K, period}
		if _, ok := epochs[k]; !ok {
			keys = append(keys, k)
		}
		epochs[k] = append(epochs[k], epoch{r.Epoch, start})
		imps[k] += r.Impressions
	}
	for _, k := range keys {
		es := epochs[k]
		if len(es) < 2 {
			continue
		}
		sort.Slice(es, func(i, j int) bool {
			if !es[i].start.Equal(es[j].start) {
				return es[i].start.Before(es[j].start)
			}
			return es[i].name < es[j].name
		})
		t := Trend{App: k.app, Policy: k.policy, K: k.k, Period: k.period, Impressions: imps[k]}
		for _, e := range es {
			t.Epochs = append(t.Epochs, e.name)
		}
		ts = append(ts, t)
	}
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Impressions > ts[j].Impressions })
	if len(ts) > maxTrends {
		dropped = len(ts) - maxTrends
		ts = ts[:maxTrends]
	}
	sort.SliceStable(ts, func(i, j int) bool {
		a, b := ts[i], ts[j]
		if a.App != b.App {
			return a.App < b.App
		}
		if a.Policy != b.Policy {
			return a.Policy < b.Policy
		}
		if a.K != b.K {
			return a.K < b.K
		}
		return a.Period < b.Period
	})
	return ts, dropped
}

// trends fills the Artifacts of each trend: its n artifacts with the most
// impressions summed over its epochs (ties by artifact), and their
// impressions per epoch. The epochs come from the releases table, so
// every key read is a completed release. The strings are bound by the
// driver (quoted and escaped), never pasted into the query.
func (r reader) trends(ctx context.Context, ts []Trend, n int) error {
	for i := range ts {
		t := &ts[i]
		q := "SELECT item, epoch, sum(impressions) FROM " + r.db + "released_items FINAL" +
			" WHERE app = ? AND policy = ? AND k = ? AND has(?, epoch) AND item IN (" +
			"SELECT item FROM (SELECT item, sum(impressions) AS total FROM " + r.db + "released_items FINAL" +
			" WHERE app = ? AND policy = ? AND k = ? AND has(?, epoch)" +
			fmt.Sprintf(" GROUP BY item ORDER BY total DESC, item LIMIT %d)", n) +
			") GROUP BY item, epoch"
		k := uint32(t.K)
		rows, err := r.conn.Query(ctx, q, t.App, t.Policy, k, t.Epochs, t.App, t.Policy, k, t.Epochs)
		if err != nil {
			return fmt.Errorf("report: read released_items for the trend of %s %s k=%d: %w", t.App, t.Policy, t.K, err)
		}
		at := map[string]int{}
		for j, e := range t.Epochs {
			at[e] = j
		}
		byItem := map[string]*TrendArtifact{}
		for rows.Next() {
			var item, epoch string
			var imp uint64
			if err := rows.Scan(&item, &epoch, &imp); err != nil {
				rows.Close()
				return fmt.Errorf("report: scan released_items for the trend of %s %s k=%d: %w", t.App, t.Policy, t.K, err)
			}
			a := byItem[item]
			if a == nil {
				a = &TrendArtifact{Item: item, Impressions: make([]uint64, len(t.Epochs)), Released: make([]bool, len(t.Epochs))}
				byItem[item] = a
			}
			j := at[epoch]
			a.Impressions[j] += imp
			a.Released[j] = true
			a.Total += imp
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("report: read released_items for the trend of %s %s k=%d: %w", t.App, t.Policy, t.K, err)
		}
		t.Artifacts = t.Artifacts[:0]
		for _, a := range byItem {
			t.Artifacts = append(t.Artifacts, *a)
		}
		sort.Slice(t.Artifacts, func(a, b int) bool {
			x, y := t.Artifacts[a], t.Artifacts[b]
			if x.Total != y.Total {
				return x.Total > y.Total
			}
			return x.Item < y.Item
		})
	}
	return nil
}

// absentReason says what an artifact missing from a release of policy
// with threshold k means.
func absentReason(policy string, k int) string {
	switch policy {
	case "ft-u":
		return fmt.Sprintf("fewer than k = %d distinct users sent it that epoch", k)
	case "ft-a":
		return fmt.Sprintf("it had fewer than k = %d reports that epoch", k)
	}
	return fmt.Sprintf("it stayed below the %s release threshold that epoch (k = %d)", policy, k)
}
