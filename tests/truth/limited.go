package truth

import "sort"

// instance is one query instance of a user: consecutive rows with the same
// normalized query are one instance (clicks of one search), timed by its
// first row; pos is that row's place in the user's rows.
type instance struct {
	q   string
	pos int
	t   int64
}

// recentFirst returns rows' query instances, most recent first (ties: the
// later in the log first), and each query's number of instances.
func recentFirst(rows []logRow) ([]instance, map[string]int) {
	var insts []instance
	count := map[string]int{}
	prev := ""
	for i, r := range rows {
		q := r.q // normalized by readLog; "" when dropped
		if q == "" {
			continue
		}
		if q != prev {
			insts = append(insts, instance{q, i, r.t.Unix()})
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
	return insts, count
}

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
		insts, _ := recentFirst(users[u])
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
		insts, count := recentFirst(users[u])
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

// FrequentTopUsers returns, for the query application, how many users
// chose each normalized query under dp-gsu's client rule
// (docs/policies.md): the m distinct queries with the most instances in
// the user's whole log, ties to the more recent (recency as in
// RecentDistinctUsers). Written independently of ingest.LimitFrequent.
func FrequentTopUsers(path string, m, maxUsers int) (map[string]int, error) {
	users, order, err := readLog(path, maxUsers)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, u := range order {
		insts, count := recentFirst(users[u])
		rank := map[string]int{} // recency rank of each distinct query: 0 = most recent
		var distinct []string
		for _, in := range insts {
			if _, ok := rank[in.q]; !ok {
				rank[in.q] = len(distinct)
				distinct = append(distinct, in.q)
			}
		}
		sort.Slice(distinct, func(i, j int) bool {
			a, b := distinct[i], distinct[j]
			if count[a] != count[b] {
				return count[a] > count[b]
			}
			return rank[a] < rank[b]
		})
		for _, q := range distinct[:min(m, len(distinct))] {
			out[q]++
		}
	}
	return out, nil
}
