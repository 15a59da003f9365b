package truth

import (
	"bufio"
	"os"
	"strings"
)

// KeywordDaily is the seed's reading of daily keyword counts (runs of
// repeated queries continue across days, keywords are space-separated
// tokens), which PDD mode no longer uses (PDDKeywordDaily is its ground
// truth); it stays for tests of aggregation alone: for the first
// maxUsers users (0 = all) of the log at path, the number of query instances
// per UTC day (YYYY-MM-DD) containing each keyword of the list file
// listPath (one per line) as a space-separated token, a token counted once
// per instance; days after lastDay (YYYY-MM-DD, "" = none) are left out, as
// are keywords in blacklist. Computed from the raw rows with this package's
// own reader, not the pipeline's code.
func KeywordDaily(path string, maxUsers int, listPath, lastDay string, blacklist []string) (map[string]map[string]int, error) {
	f, err := os.Open(listPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	monitored := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if w := strings.TrimSpace(sc.Text()); w != "" {
			monitored[strings.ToLower(w)] = true
		}
	}
	for _, b := range blacklist {
		delete(monitored, b)
	}
	users, _, err := readLog(path, maxUsers)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]int{}
	for _, rows := range users {
		for _, run := range runs(rows) {
			day := run[0].t.Format("2006-01-02")
			if lastDay != "" && day > lastDay {
				continue
			}
			seen := map[string]bool{}
			for _, tok := range strings.Split(run[0].q, " ") {
				if monitored[tok] && !seen[tok] {
					seen[tok] = true
					if out[day] == nil {
						out[day] = map[string]int{}
					}
					out[day][tok]++
				}
			}
		}
	}
	return out, nil
}
