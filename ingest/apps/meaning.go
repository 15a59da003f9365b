package apps

import "fmt"

// Meaning returns the canonical text of app's options that change what an
// artifact string means, "" when none do (query, keyword): e.g.
// "url-level=domain" for click, "gap=30m0s order=time" for reformulation.
// Clients bind it into the sealing context (protocol/star.Context.Meaning),
// so clients mining with different options never combine shares of one
// artifact string. Defaults are written out, so an option left at its
// default and the same value given explicitly mean the same.
func Meaning(app App) string {
	level := func(l string) string {
		if l == "" {
			l = URLDomain
		}
		return "url-level=" + l
	}
	switch a := app.(type) {
	case ClickApp:
		return level(a.Level)
	case URLApp:
		return level(a.Level)
	case LTRApp:
		b := a.Buckets
		rank, dwell, length := b.Rank, b.Dwell, b.Length
		if rank == nil {
			rank = DefaultRankBuckets
		}
		if dwell == nil {
			dwell = DefaultDwellBuckets
		}
		if length == nil {
			length = DefaultLengthBuckets
		}
		return fmt.Sprintf("%s rank=%v dwell=%v length=%v", level(a.Level), rank, dwell, length)
	case ReformulationApp:
		gap, order := a.Gap, PairTime
		if gap == 0 {
			gap = DefaultSessionGap
		}
		if a.Sorted {
			order = PairSorted
		}
		return fmt.Sprintf("gap=%s order=%s", gap, order)
	}
	return ""
}
