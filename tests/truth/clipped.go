package truth

import (
	"sort"
)

// DailyClients is the raw log read per client and day, for PDD's Prio3
// mode, where each client's count of a keyword on a day is clipped before
// it is summed. Counts: day (YYYY-MM-DD) → AnonID → keyword → the number of
// the user's query instances that day containing the keyword, as PDD mode
// reads them (pdd.go: runs end at midnight, keywords at word boundaries,
// each once per instance). Active: day → the AnonIDs with any row that day
// (empty queries included): the clients that upload a report that day.
type DailyClients struct {
	Counts map[string]map[string]map[string]int
	Active map[string]map[string]bool
}

// KeywordClients reads the first maxUsers users (0 = all) of the log at
// path per client and day, for the keywords of the list file listPath (one
// per line) less blacklist; days after lastDay (YYYY-MM-DD, "" = none) are
// left out. Computed from the raw rows with this package's own reader, not
// the pipeline's code.
func KeywordClients(path string, maxUsers int, listPath, lastDay string, blacklist []string) (*DailyClients, error) {
	monitored, err := monitoredList(listPath, blacklist)
	if err != nil {
		return nil, err
	}
	users, _, err := readLog(path, maxUsers)
	if err != nil {
		return nil, err
	}
	out := &DailyClients{Counts: map[string]map[string]map[string]int{}, Active: map[string]map[string]bool{}}
	for user, rows := range users {
		for _, r := range rows {
			day := r.t.Format("2006-01-02")
			if lastDay != "" && day > lastDay {
				continue
			}
			if out.Active[day] == nil {
				out.Active[day] = map[string]bool{}
			}
			out.Active[day][user] = true
		}
		for _, run := range dailyRuns(rows) {
			day := run[0].t.Format("2006-01-02")
			if lastDay != "" && day > lastDay {
				continue
			}
			for _, w := range containedKeywords(run[0].q, monitored) {
				if out.Counts[day] == nil {
					out.Counts[day] = map[string]map[string]int{}
				}
				if out.Counts[day][user] == nil {
					out.Counts[day][user] = map[string]int{}
				}
				out.Counts[day][user][w]++
			}
		}
	}
	return out, nil
}

// Clipped returns day → keyword → the sum over clients of min(count, max)
// (max = 2^b − 1 for a SumVec measurement of b bits), leaving out the
// clients for which skip(day, user) is true (skip may be nil). Keywords no
// kept client searched that day are absent (their total is 0).
func (d *DailyClients) Clipped(max int, skip func(day, user string) bool) map[string]map[string]int {
	out := map[string]map[string]int{}
	for day, users := range d.Counts {
		for user, kw := range users {
			if skip != nil && skip(day, user) {
				continue
			}
			for w, n := range kw {
				if out[day] == nil {
					out[day] = map[string]int{}
				}
				out[day][w] += min(n, max)
			}
		}
	}
	return out
}

// ClippedL1 is Clipped for a campaign whose clients also bound their daily
// sum of clipped counts by l1 (> 0; SumVec's L1 bound S): per client and
// day the keywords are taken by raw count, highest first (ties: the
// earlier in words, the campaign's list order), each adding min(count,
// max) while the sum stays within l1; the first that does not fit whole
// adds what is left of l1, the rest nothing.
func (d *DailyClients) ClippedL1(max, l1 int, words []string, skip func(day, user string) bool) map[string]map[string]int {
	pos := map[string]int{}
	for i, w := range words {
		if _, ok := pos[w]; !ok {
			pos[w] = i
		}
	}
	out := map[string]map[string]int{}
	for day, users := range d.Counts {
		for user, kw := range users {
			if skip != nil && skip(day, user) {
				continue
			}
			var ws []string
			for w := range kw {
				ws = append(ws, w)
			}
			sort.Slice(ws, func(i, j int) bool {
				if kw[ws[i]] != kw[ws[j]] {
					return kw[ws[i]] > kw[ws[j]]
				}
				return pos[ws[i]] < pos[ws[j]]
			})
			left := l1
			for _, w := range ws {
				n := min(kw[w], max, left)
				if n == 0 {
					continue
				}
				left -= n
				if out[day] == nil {
					out[day] = map[string]int{}
				}
				out[day][w] += n
			}
		}
	}
	return out
}
