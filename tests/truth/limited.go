package truth

import "sort"

// RecentDistinctUsers returns, for the query application, how many users
// have each normalized query among their d most recent distinct queries
// (the DP_u / ZEALOUS client limit, docs/policies.md), from the first
// maxUsers AnonIDs of the raw log at path (0 = all). A query instance's time
// is its first row's QueryTime; ties go to the later instance in the log.
// Written independently of ingest.LimitArtifacts.
func RecentDistinctUsers(path string, d, maxUsers int) (map[string]int, error) {
	users, order, err := readLog(path, maxUsers)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, u := range order {
		type inst struct {
			q   string
			pos int
			t   int64
		}
		var insts []inst
		prev := ""
		for i, r := range users[u] {
			q := r.q // normalized by readLog; "" when dropped
			if q == "" {
				continue
			}
			if q != prev {
				insts = append(insts, inst{q, i, r.t.Unix()})
			}
			prev = q
		}
		sort.Slice(insts, func(i, j int) bool {
			if insts[i].t != insts[j].t {
				return insts[i].t > insts[j].t
			}
			return insts[i].pos > insts[j].pos
		})
		got := map[string]bool{}
		for _, in := range insts {
			if len(got) == d {
				break
			}
			got[in.q] = true
		}
		for q := range got {
			out[q]++
		}
	}
	return out, nil
}

// FrequentRecentUsers returns, for the query application, how many users
// chose each normalized query under dp-su's client rule
// (docs/policies.md): among the user's window most recent distinct queries
// (recency as in RecentDistinctUsers), the one with the most instances in
// the user's whole log, ties to the more recent. Written independently of
// ingest.LimitFrequent.
func FrequentRecentUsers(path string, window, maxUsers int) (map[string]int, error) {
	users, order, err := readLog(path, maxUsers)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, u := range order {
		type inst struct {
			q   string
			pos int
			t   int64
		}
		var insts []inst
		count := map[string]int{}
		prev := ""
		for i, r := range users[u] {
			q := r.q
			if q == "" {
				continue
			}
			if q != prev {
				insts = append(insts, inst{q, i, r.t.Unix()})
				count[q]++
			}
			prev = q
		}
		sort.Slice(insts, func(i, j int) bool {
			if insts[i].t != insts[j].t {
				return insts[i].t > insts[j].t
			}
			return insts[i].pos > insts[j].pos
		})
		best, bestN, seen := "", 0, map[string]bool{}
		for _, in := range insts {
			if len(seen) == window {
				break
			}
			if seen[in.q] {
				continue
			}
			seen[in.q] = true
			if count[in.q] > bestN { // strictly more: ties stay with the more recent
				best, bestN = in.q, count[in.q]
			}
		}
		if best != "" {
			out[best]++
		}
	}
	return out, nil
}
