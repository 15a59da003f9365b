package attack

import (
	"encoding/hex"
	"sort"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// Count is an artifact's frequency in an auxiliary log: distinct users and
// instances (impressions).
type Count struct {
	Artifact    string
	Users, Hits int
}

// SortCounts orders counts by users, then hits, descending, then artifact
// (a deterministic rank).
func SortCounts(c []Count) {
	sort.Slice(c, func(i, j int) bool {
		if c[i].Users != c[j].Users {
			return c[i].Users > c[j].Users
		}
		if c[i].Hits != c[j].Hits {
			return c[i].Hits > c[j].Hits
		}
		return c[i].Artifact < c[j].Artifact
	})
}

// MatchResult is the outcome of a frequency-matching attack: Guesses
// tag→artifact pairs were made, Correct of them were right (checked
// against Truth, the auditor's ground truth tag→artifact).
type MatchResult struct {
	Tags, Guesses, Correct int
	// CorrectTop is the number of correct guesses among the TopN most
	// frequent pending groups (where frequency attacks work best).
	TopN, CorrectTop int
}

// RankMatch is the frequency attack of Kumar et al. (WWW 2007) on the
// pending state: the attacker sorts pending groups by (shares, reports)
// and the auxiliary artifacts by (users, hits), and guesses that the i-th
// group is the i-th artifact. aux should exclude what was released
// (analysts know it). truth maps tag hex → artifact for scoring (an
// auditor gets it by probing with the epoch key, KeyOmega).
func RankMatch(groups []aggregator.PendingGroup, aux []Count, truth map[string]string, topN int) MatchResult {
	gs := append([]aggregator.PendingGroup(nil), groups...)
	sort.Slice(gs, func(i, j int) bool {
		if gs[i].Shares != gs[j].Shares {
			return gs[i].Shares > gs[j].Shares
		}
		if gs[i].Reports != gs[j].Reports {
			return gs[i].Reports > gs[j].Reports
		}
		return gs[i].Tag < gs[j].Tag
	})
	a := append([]Count(nil), aux...)
	SortCounts(a)
	res := MatchResult{Tags: len(gs), TopN: topN}
	for i := 0; i < len(gs) && i < len(a); i++ {
		res.Guesses++
		if truth[gs[i].Tag] == a[i].Artifact {
			res.Correct++
			if i < topN {
				res.CorrectTop++
			}
		}
	}
	return res
}

// SummaryLeak measures the counts-only summary an analyst reads
// (protocol.SummaryRow per (reports, shares)): IdentifyingRows is the
// number of rows with Tags == 1, i.e. a single undecrypted artifact with a
// unique frequency; Matched is how many of those a frequency-matching
// analyst pins to the right artifact by guessing, for each such row, the
// auxiliary artifact (not released) whose hits, scaled by scale (target
// size / aux size), fall in the row's report range and whose users are
// closest to the row's shares — correct when it is the group's artifact.
// With coarse rows (protocol.SummaryBucket) a row covers [Reports,
// 2·Reports).
func SummaryLeak(groups []aggregator.PendingGroup, coarse bool, aux []Count, scale float64, truth map[string]string) (rows, identifying, matched int) {
	type rk struct{ r, s int }
	byRow := map[rk][]aggregator.PendingGroup{}
	for _, g := range groups {
		r := g.Reports
		if coarse {
			r = int(protocol.SummaryBucket(uint64(r)))
		}
		byRow[rk{r, g.Shares}] = append(byRow[rk{r, g.Shares}], g)
	}
	rows = len(byRow)
	for k, gs := range byRow {
		if len(gs) != 1 {
			continue
		}
		identifying++
		hi := k.r
		if coarse {
			hi = 2*k.r - 1
		}
		best, bestD := "", 1<<30
		for _, c := range aux {
			h := int(float64(c.Hits)*scale + 0.5)
			if h < k.r || h > hi {
				continue
			}
			d := abs(c.Users - k.s)
			if d < bestD || d == bestD && c.Artifact < best {
				best, bestD = c.Artifact, d
			}
		}
		if best != "" && truth[gs[0].Tag] == best {
			matched++
		}
	}
	return rows, identifying, matched
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TagHex is the hex tag a pending group of (app, epoch, policy, k) would
// carry for ω.
func TagHex(omega []byte, app, epoch string, policy star.Policy, k int) string {
	t := star.TagFromOmega(omega, app, epoch, policy, k)
	return hex.EncodeToString(t[:])
}

// LogCounts mines every user of an AOL log with app and returns each
// artifact's distinct users and instances (the auxiliary log of a
// frequency attack, or a candidate list for a probe).
func LogCounts(path string, app apps.App) ([]Count, error) {
	users, hits := map[string]int{}, map[string]int{}
	_, err := aol.ReadUsers(path, func(u aol.User) error {
		seen := map[string]bool{}
		for _, a := range app.Mine(u.Records) {
			hits[a.Primary]++
			if !seen[a.Primary] {
				seen[a.Primary] = true
				users[a.Primary]++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Count, 0, len(users))
	for a, n := range users {
		out = append(out, Count{Artifact: a, Users: n, Hits: hits[a]})
	}
	SortCounts(out)
	return out, nil
}
