package release

import (
	"fmt"
	"sort"

	"github.com/crowdlog/crowdlog/protocol"
)

// SummaryMode says how much of the counts-only undecrypted summary
// (CrowdLogging §3.3) a release publishes.
type SummaryMode string

const (
	// SummaryExact publishes each line's exact Reports and Users.
	SummaryExact SummaryMode = "exact"
	// SummaryCoarse rounds Reports down to its power-of-two bucket
	// [2^i, 2^(i+1)) and merges equal lines, so a line says "Tags tags had
	// between Reports and 2·Reports−1 reports": a reader with an auxiliary
	// log can no longer pin a line with a rare exact count to one artifact
	// (pipelines/attack.TestFrequencySummary). Users (below k) stay exact.
	// The default for threshold policies.
	SummaryCoarse SummaryMode = "coarse"
	// SummaryNone publishes no summary lines.
	SummaryNone SummaryMode = "none"
)

// ParseSummaryMode parses "exact", "coarse" or "none"; "" is coarse.
func ParseSummaryMode(s string) (SummaryMode, error) {
	switch m := SummaryMode(s); m {
	case "":
		return SummaryCoarse, nil
	case SummaryExact, SummaryCoarse, SummaryNone:
		return m, nil
	}
	return "", fmt.Errorf("summary mode %q: use exact, coarse or none", s)
}

// ShapeSummary returns the summary lines a release publishes under mode:
// lines for which withhold(policy, k) is true are removed whatever the mode
// (the DP policies: an exact count of undecrypted tags is outside the
// recorded (ε, δ), so a DP release publishes none), then the rest are kept
// exact, coarsened (SummaryCoarse) or dropped (SummaryNone). Lines are
// sorted by Reports, largest first. withhold may be nil.
func ShapeSummary(lines []Undecrypted, mode SummaryMode, withhold func(policy string, k int) bool) []Undecrypted {
	if mode == SummaryNone {
		return []Undecrypted{}
	}
	merged := map[Undecrypted]uint64{}
	for _, u := range lines {
		if withhold != nil && withhold(u.Policy, u.K) {
			continue
		}
		tags := u.Tags
		u.Tags = 0
		if mode != SummaryExact {
			u.Reports = protocol.SummaryBucket(u.Reports)
		}
		merged[u] += tags
	}
	out := make([]Undecrypted, 0, len(merged))
	for u, tags := range merged {
		u.Tags = tags
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Reports != out[j].Reports {
			return out[i].Reports > out[j].Reports
		}
		return out[i].Users > out[j].Users
	})
	return out
}
