package truth

import (
	"bufio"
	"os"
	"strings"

	"github.com/rivo/uniseg"
)

// PDD mode's reading of a log (ingest/keywords), written out again here:
// a query instance is a run of one user's rows with the same normalized
// query on the same UTC day, and a keyword is in a query when it is a
// substring that begins and ends at a Unicode word boundary (UAX #29, the
// segmentation library itself, github.com/rivo/uniseg), each keyword once
// per instance.

// dailyRuns returns the instances of rows: maximal runs of kept rows with
// one q and one UTC date.
func dailyRuns(rows []logRow) [][]logRow {
	var out [][]logRow
	for _, r := range rows {
		if r.q == "" {
			continue
		}
		if n := len(out); n > 0 && out[n-1][0].q == r.q && out[n-1][0].t.Format("2006-01-02") == r.t.Format("2006-01-02") {
			out[n-1] = append(out[n-1], r)
		} else {
			out = append(out, []logRow{r})
		}
	}
	return out
}

// containedKeywords returns the monitored keywords in q, each once: every
// substring of q between two word boundaries that is monitored.
func containedKeywords(q string, monitored map[string]bool) []string {
	bounds := []int{0}
	for rest, state, at := q, -1, 0; len(rest) > 0; {
		var w string
		w, rest, state = uniseg.FirstWordInString(rest, state)
		at += len(w)
		bounds = append(bounds, at)
	}
	var out []string
	seen := map[string]bool{}
	for i, a := range bounds {
		for _, b := range bounds[i+1:] {
			if s := q[a:b]; monitored[s] && !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// monitoredList reads a keyword list file (one per line, lower-cased, blank
// lines skipped) less blacklist.
func monitoredList(listPath string, blacklist []string) (map[string]bool, error) {
	f, err := os.Open(listPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	monitored := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if w := strings.TrimSpace(sc.Text()); w != "" && !strings.HasPrefix(w, "#") {
			monitored[strings.ToLower(w)] = true
		}
	}
	for _, b := range blacklist {
		delete(monitored, b)
	}
	return monitored, sc.Err()
}

// PDDKeywordDaily is the ground truth of PDD mode's release: for the first
// maxUsers users (0 = all) of the log at path, day (YYYY-MM-DD, UTC) →
// keyword → the number of query instances that day (runs end at midnight)
// containing the keyword at word boundaries, each keyword once per
// instance; days after lastDay ("" = none) and keywords in blacklist are
// left out. Computed from the raw rows with this package's own reader, not
// the pipeline's code.
func PDDKeywordDaily(path string, maxUsers int, listPath, lastDay string, blacklist []string) (map[string]map[string]int, error) {
	monitored, err := monitoredList(listPath, blacklist)
	if err != nil {
		return nil, err
	}
	users, _, err := readLog(path, maxUsers)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]int{}
	for _, rows := range users {
		for _, run := range dailyRuns(rows) {
			day := run[0].t.Format("2006-01-02")
			if lastDay != "" && day > lastDay {
				continue
			}
			for _, w := range containedKeywords(run[0].q, monitored) {
				if out[day] == nil {
					out[day] = map[string]int{}
				}
				out[day][w]++
			}
		}
	}
	return out, nil
}
