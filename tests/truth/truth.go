// Package truth computes expected releases directly from a raw AOL log, in a
// few lines that share no code with the pipeline, for tests to compare the
// pipeline's export against (independent ground truth).
package truth

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Row is one expected released item.
type Row struct {
	Item        string
	Impressions int
	Users       int
}

// Release returns the items an FT_u (users ≥ k) or FT_a (instances ≥ k)
// release of the query application must contain, from the first maxUsers
// AnonIDs of the log (0 = all), keyed by item. Normalization: NFKC, lower
// case, Unicode white space collapsed (CrowdLogging §3.3); per user,
// consecutive equal normalized queries are one instance.
func Release(path, policy string, k, maxUsers int) (map[string]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		if r, err = gzip.NewReader(f); err != nil {
			return nil, err
		}
	}
	inst := map[string]int{}
	users := map[string]map[string]bool{}
	seenUsers := map[string]bool{}
	prevUser, prevQ := "", ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) < 3 || fields[0] == "AnonID" {
			continue
		}
		user := fields[0]
		if !seenUsers[user] {
			if maxUsers > 0 && len(seenUsers) == maxUsers {
				break
			}
			seenUsers[user] = true
		}
		q := strings.Join(strings.Fields(strings.ToLower(norm.NFKC.String(fields[1]))), " ")
		if q == "" || q == "-" {
			continue
		}
		if user == prevUser && q == prevQ {
			continue
		}
		prevUser, prevQ = user, q
		inst[q]++
		if users[q] == nil {
			users[q] = map[string]bool{}
		}
		users[q][user] = true
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := map[string]Row{}
	for q, n := range inst {
		if (policy == "ft-u" && len(users[q]) >= k) || (policy == "ft-a" && n >= k) {
			out[q] = Row{Item: q, Impressions: n, Users: len(users[q])}
		}
	}
	return out, nil
}

// ReadExport parses an export TSV (header app epoch policy item impressions
// users) into rows keyed by item, unescaping \t \n \\.
func ReadExport(path string) (map[string]Row, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	header := strings.Split(lines[0], "\t")
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, h := range []string{"app", "epoch", "policy", "item", "impressions", "users"} {
		if _, ok := col[h]; !ok {
			return nil, nil, fmt.Errorf("export header %q lacks column %s", lines[0], h)
		}
	}
	out := map[string]Row{}
	unesc := strings.NewReplacer(`\t`, "\t", `\n`, "\n", `\\`, `\`)
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		imp, _ := strconv.Atoi(f[col["impressions"]])
		us, _ := strconv.Atoi(f[col["users"]])
		item := unesc.Replace(f[col["item"]])
		if _, dup := out[item]; dup {
			return nil, nil, fmt.Errorf("item listed twice in export")
		}
		out[item] = Row{Item: item, Impressions: imp, Users: us}
	}
	return out, header, nil
}

// Diff returns up to max human-readable differences between want and got
// (empty when equal). Items are not printed, only their counts and a hash
// position, to keep real users' queries out of test logs.
func Diff(want, got map[string]Row, max int) []string {
	var d []string
	keys := make([]string, 0, len(want)+len(got))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for i, k := range keys {
		w, wok := want[k]
		g, gok := got[k]
		switch {
		case !gok:
			d = append(d, fmt.Sprintf("item #%d missing from export (want impressions=%d users=%d)", i, w.Impressions, w.Users))
		case !wok:
			d = append(d, fmt.Sprintf("item #%d released but not expected (impressions=%d users=%d)", i, g.Impressions, g.Users))
		case w != g:
			d = append(d, fmt.Sprintf("item #%d: want impressions=%d users=%d, got %d/%d", i, w.Impressions, w.Users, g.Impressions, g.Users))
		}
		if len(d) >= max {
			break
		}
	}
	return d
}
