package report

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/release"
)

// Defaults of the PDD section.
const (
	// DefaultPDDTop is the number of keywords followed per PDD campaign,
	// by released count summed over its days.
	DefaultPDDTop = 8
	// BandLevel is the coverage of the noise band drawn around noisy
	// counts: the band holds the noise of one released count with this
	// probability (its 97.5 % quantile on each side).
	BandLevel = 0.95
	// maxCampaigns bounds the campaigns shown (those with the most days
	// first); maxKeywords bounds the keywords of one campaign's plot.
	maxCampaigns = 8
	maxKeywords  = 16
)

// Campaign is one PDD campaign (groups or Prio3 mode) as the report shows
// it: every day with a pdd_rounds or pdd_withheld row, and the daily
// released counts of its top keywords and of the keywords the reader
// named.
type Campaign struct {
	Name string
	// Mode is "groups" or "prio3": from pdd_campaigns (every campaign a
	// current release stage wrote), else from the privacy ledger (its
	// mechanism: laplace or laplace-two-aggregators), else "" (a database
	// written before pdd_campaigns existed, exact days only).
	Mode string
	// Configs are the campaign's pdd_campaigns rows (mode, ε, sensitivity,
	// k, params), one per configuration it was released with; empty for a
	// database written before that table existed.
	Configs []release.PDDCampaign
	// Days are the campaign's days in order (release.PDDDays): released,
	// or withheld with the reason.
	Days []release.PDDDay
	// Noise is per day (same index as Days) the noise of one released
	// count; zero Scale for exact or withheld days.
	Noise []Noise
	// Keywords are the keywords followed: the top ones by released count
	// summed over the days, most first (ties by keyword), then the named
	// ones not among them, in the order given.
	Keywords []PDDKeyword
}

// PDDKeyword is one keyword of a Campaign: its released count per day
// (same index as Campaign.Days; 0 on days without a row, which are zeros or
// noisy zeros on released days and nothing on withheld days).
type PDDKeyword struct {
	Keyword string
	Named   bool // given with --keyword
	Counts  []int64
	Total   int64 // over the released days
}

// Noise is the Laplace noise of one released count of a day.
type Noise struct {
	// Epsilon is the day's ε (pdd_rounds.epsilon); 0 = exact.
	Epsilon float64
	// Scale is the Laplace scale b of one draw, Draws the independent
	// draws a count carries: groups mode one draw of b = max_count / ε
	// (sensitivity pdd_rounds.max_count); Prio3 mode two, one per
	// aggregator, of the scale S/ε its ledger row records.
	Scale float64
	Draws int
	// HalfWidth is the half-width of the BandLevel band: P(|noise| ≤
	// HalfWidth) = BandLevel.
	HalfWidth float64
	// Source says where Scale came from: "ledger" (the privacy ledger's
	// row of the day) or "pdd_rounds" (max_count / ε, no ledger row read).
	Source string
}

// bandHalfWidth returns h with P(|X₁ + … + X_draws| ≤ h) = level for iid
// Laplace(0, b) draws (1 or 2): one draw has P(|X| > h) = e^(−h/b); two
// have the density (1 + |z|/b) e^(−|z|/b) / (4b), so P(|X₁+X₂| > h) =
// (1 + h/(2b)) e^(−h/b), solved by bisection. The integer (geometric)
// noise crowdlog draws is this continuous law's discrete twin; the band
// is its continuous approximation.
func bandHalfWidth(b float64, draws int, level float64) float64 {
	if b <= 0 || draws <= 0 {
		return 0
	}
	tail := 1 - level
	if draws == 1 {
		return b * math.Log(1/tail)
	}
	lo, hi := 0.0, 100*b
	for i := 0; i < 200; i++ {
		m := (lo + hi) / 2
		if (1+m/(2*b))*math.Exp(-m/b) > tail {
			lo = m
		} else {
			hi = m
		}
	}
	return (lo + hi) / 2
}

// ledgerParam returns the value of key=value in a ledger row's params.
func ledgerParam(params, key string) (string, bool) {
	for _, f := range strings.Fields(params) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// dayNoise is the noise of one released count of day r of campaign,
// from its ledger rows when there is one (their mechanism and scale),
// else from r (max_count / ε, one draw).
func dayNoise(r *release.PDDRound, ledger []release.Spend) (Noise, string) {
	if r == nil || r.Epsilon <= 0 {
		return Noise{}, ""
	}
	day := r.Day.UTC().Format("2006-01-02")
	for _, s := range ledger {
		if s.App != r.Campaign || s.Epoch != day || s.Policy != release.PDDPolicy {
			continue
		}
		mech, _ := ledgerParam(s.Params, "mechanism")
		switch mech {
		case "laplace-two-aggregators":
			if v, ok := ledgerParam(s.Params, "scale"); ok {
				if b, err := strconv.ParseFloat(v, 64); err == nil && b > 0 {
					return Noise{Epsilon: r.Epsilon, Scale: b, Draws: 2, HalfWidth: bandHalfWidth(b, 2, BandLevel), Source: "ledger"}, "prio3"
				}
			}
		case "laplace":
			if v, ok := ledgerParam(s.Params, "max_count"); ok {
				if m, err := strconv.ParseFloat(v, 64); err == nil && m > 0 {
					b := m / r.Epsilon
					return Noise{Epsilon: r.Epsilon, Scale: b, Draws: 1, HalfWidth: bandHalfWidth(b, 1, BandLevel), Source: "ledger"}, "groups"
				}
			}
		}
	}
	b := float64(r.MaxCount) / r.Epsilon
	return Noise{Epsilon: r.Epsilon, Scale: b, Draws: 1, HalfWidth: bandHalfWidth(b, 1, BandLevel), Source: "pdd_rounds"}, ""
}

// pddTables reports which PDD tables the database read has.
func (r reader) pddTables(ctx context.Context, db string) (rounds, withheld, campaigns bool, err error) {
	rows, err := r.conn.Query(ctx, "SELECT name FROM system.tables WHERE database = ? AND name IN ('pdd_rounds', 'pdd_keyword_counts', 'pdd_withheld', 'pdd_campaigns')", db)
	if err != nil {
		return false, false, false, fmt.Errorf("report: list the PDD tables of %s: %w", db, err)
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return false, false, false, fmt.Errorf("report: list the PDD tables of %s: %w", db, err)
		}
		have[n] = true
	}
	if err := rows.Err(); err != nil {
		return false, false, false, fmt.Errorf("report: list the PDD tables of %s: %w", db, err)
	}
	return have["pdd_rounds"] && have["pdd_keyword_counts"], have["pdd_withheld"], have["pdd_campaigns"], nil
}

// campaignConfigs reads pdd_campaigns with FINAL: per campaign its
// configurations.
func (r reader) campaignConfigs(ctx context.Context) (map[string][]release.PDDCampaign, error) {
	rows, err := r.conn.Query(ctx, "SELECT campaign, mode, epsilon, sensitivity, k, params FROM "+r.db+"pdd_campaigns FINAL ORDER BY campaign, mode, epsilon, sensitivity, k, params")
	if err != nil {
		return nil, fmt.Errorf("report: read pdd_campaigns: %w", err)
	}
	defer rows.Close()
	out := map[string][]release.PDDCampaign{}
	for rows.Next() {
		var c release.PDDCampaign
		if err := rows.Scan(&c.Campaign, &c.Mode, &c.Epsilon, &c.Sensitivity, &c.K, &c.Params); err != nil {
			return nil, fmt.Errorf("report: scan pdd_campaigns: %w", err)
		}
		out[c.Campaign] = append(out[c.Campaign], c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("report: read pdd_campaigns: %w", err)
	}
	return out, nil
}

// campaigns reads every PDD campaign of the database: its days from
// pdd_rounds and pdd_withheld (when that table exists), and the daily
// counts of its top n keywords and of named, from pdd_keyword_counts of
// complete days (a pdd_rounds row). ledger gives the noise of noisy days.
func (r reader) campaigns(ctx context.Context, db string, n int, named []string, ledger []release.Spend) ([]Campaign, error) {
	hasRounds, hasWithheld, hasCampaigns, err := r.pddTables(ctx, db)
	if err != nil || !hasRounds {
		return nil, err
	}
	configs := map[string][]release.PDDCampaign{}
	if hasCampaigns {
		if configs, err = r.campaignConfigs(ctx); err != nil {
			return nil, err
		}
	}
	rounds := map[string][]release.PDDRound{}
	var names []string
	rows, err := r.conn.Query(ctx, "SELECT campaign, day, active, grouped, decrypted, groups, groups_complete, groups_recovered, "+
		"groups_lost, confidence, epsilon, max_count FROM "+r.db+"pdd_rounds FINAL ORDER BY campaign, day")
	if err != nil {
		return nil, fmt.Errorf("report: read pdd_rounds: %w", err)
	}
	for rows.Next() {
		var x release.PDDRound
		if err := rows.Scan(&x.Campaign, &x.Day, &x.Active, &x.Grouped, &x.Decrypted, &x.Groups, &x.Complete, &x.Recovered,
			&x.Lost, &x.Confidence, &x.Epsilon, &x.MaxCount); err != nil {
			rows.Close()
			return nil, fmt.Errorf("report: scan pdd_rounds: %w", err)
		}
		x.Day = dateOf(x.Day)
		if _, ok := rounds[x.Campaign]; !ok {
			names = append(names, x.Campaign)
		}
		rounds[x.Campaign] = append(rounds[x.Campaign], x)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, fmt.Errorf("report: read pdd_rounds: %w", err)
	}
	withheld := map[string][]release.PDDWithheld{}
	if hasWithheld {
		rows, err := r.conn.Query(ctx, "SELECT campaign, day, reason, detail FROM "+r.db+"pdd_withheld FINAL ORDER BY campaign, day, reason")
		if err != nil {
			return nil, fmt.Errorf("report: read pdd_withheld: %w", err)
		}
		for rows.Next() {
			var w release.PDDWithheld
			if err := rows.Scan(&w.Campaign, &w.Day, &w.Reason, &w.Detail); err != nil {
				rows.Close()
				return nil, fmt.Errorf("report: scan pdd_withheld: %w", err)
			}
			w.Day = dateOf(w.Day)
			if _, ok := rounds[w.Campaign]; !ok {
				if _, ok := withheld[w.Campaign]; !ok {
					names = append(names, w.Campaign)
				}
			}
			withheld[w.Campaign] = append(withheld[w.Campaign], w)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("report: read pdd_withheld: %w", err)
		}
	}
	sort.Strings(names)
	var out []Campaign
	for _, name := range names {
		c := Campaign{Name: name, Days: release.PDDDays(rounds[name], withheld[name]), Configs: configs[name]}
		for _, cf := range c.Configs {
			c.Mode = cf.Mode
		}
		for _, d := range c.Days {
			var nz Noise
			if d.Released {
				var mode string
				nz, mode = dayNoise(d.Round, ledger)
				if mode != "" {
					c.Mode = mode
				}
			}
			c.Noise = append(c.Noise, nz)
		}
		if err := r.keywords(ctx, &c, n, named); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Days) > len(out[j].Days) })
	if len(out) > maxCampaigns {
		out = out[:maxCampaigns]
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// keywords fills c.Keywords: the n keywords with the largest released
// count summed over c's complete days, then those of named not among
// them, with their counts per day. Strings are bound by the driver.
func (r reader) keywords(ctx context.Context, c *Campaign, n int, named []string) error {
	complete := " AND (campaign, day) IN (SELECT campaign, day FROM " + r.db + "pdd_rounds)"
	q := "SELECT keyword, sum(count) AS total FROM " + r.db + "pdd_keyword_counts FINAL WHERE campaign = ?" + complete +
		fmt.Sprintf(" GROUP BY keyword ORDER BY total DESC, keyword LIMIT %d", n)
	rows, err := r.conn.Query(ctx, q, c.Name)
	if err != nil {
		return fmt.Errorf("report: read the top keywords of PDD campaign %s: %w", c.Name, err)
	}
	var words []string
	seen := map[string]bool{}
	for rows.Next() {
		var w string
		var total int64
		if err := rows.Scan(&w, &total); err != nil {
			rows.Close()
			return fmt.Errorf("report: scan the top keywords of PDD campaign %s: %w", c.Name, err)
		}
		words = append(words, w)
		seen[w] = true
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return fmt.Errorf("report: read the top keywords of PDD campaign %s: %w", c.Name, err)
	}
	top := len(words)
	for _, w := range named {
		if !seen[w] {
			words = append(words, w)
			seen[w] = true
		}
	}
	if len(words) > maxKeywords {
		words = words[:maxKeywords]
	}
	at := map[time.Time]int{}
	for i, d := range c.Days {
		at[d.Day] = i
	}
	isNamed := map[string]bool{}
	for _, w := range named {
		isNamed[w] = true
	}
	byWord := map[string]*PDDKeyword{}
	for i, w := range words {
		k := &PDDKeyword{Keyword: w, Named: i >= top || isNamed[w], Counts: make([]int64, len(c.Days))}
		byWord[w] = k
	}
	if len(words) > 0 {
		rows, err := r.conn.Query(ctx, "SELECT day, keyword, sum(count) FROM "+r.db+"pdd_keyword_counts FINAL WHERE campaign = ? AND has(?, keyword)"+
			complete+" GROUP BY day, keyword", c.Name, words)
		if err != nil {
			return fmt.Errorf("report: read the daily counts of PDD campaign %s: %w", c.Name, err)
		}
		for rows.Next() {
			var day time.Time
			var w string
			var v int64
			if err := rows.Scan(&day, &w, &v); err != nil {
				rows.Close()
				return fmt.Errorf("report: scan the daily counts of PDD campaign %s: %w", c.Name, err)
			}
			i, ok := at[dateOf(day)]
			k := byWord[w]
			if !ok || k == nil || !c.Days[i].Released {
				continue
			}
			k.Counts[i] += v
			k.Total += v
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("report: read the daily counts of PDD campaign %s: %w", c.Name, err)
		}
	}
	for _, w := range words {
		c.Keywords = append(c.Keywords, *byWord[w])
	}
	return nil
}

// dateOf is the calendar date of a scanned Date as 00:00 UTC.
func dateOf(t time.Time) time.Time {
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// withheldText says in words why a day was withheld.
func withheldText(reason string) string {
	var out []string
	for _, r := range strings.Split(reason, ",") {
		switch r {
		case release.WithheldLost:
			out = append(out, "lost: every group lost (too few members submitted or answered)")
		case release.WithheldBudget:
			out = append(out, "budget: the release would have passed the privacy budget")
		case release.WithheldMinBatch:
			out = append(out, "below minimum batch: too few reports for the aggregators to reveal the batch")
		default:
			out = append(out, r)
		}
	}
	return strings.Join(out, "; ")
}
