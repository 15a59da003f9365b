package truth

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestExportEqualsClippedL1 compares a `crowdlog pdd --mode prio3
// --epsilon 0 --exact-shares --export FILE` export of the bundled log
// (all users, the default 10,000-keyword list, b = 4, S = 20) with the raw
// log's per-client counts clipped to 15 and L1-bounded by 20 (ClippedL1),
// on every (day, keyword) of the days the export holds, zeros included.
// CROWDLOG_TRUTH_EXPORT names the file; skipped without it.
func TestExportEqualsClippedL1(t *testing.T) {
	path := os.Getenv("CROWDLOG_TRUTH_EXPORT")
	if path == "" {
		t.Skip("CROWDLOG_TRUTH_EXPORT names a pdd --mode prio3 export")
	}
	const list = "../../ingest/keywords/google-10000-english.txt"
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Scan()
	for sc.Scan() {
		fl := strings.Split(sc.Text(), "\t")
		if len(fl) != 5 {
			t.Fatalf("export line %q", sc.Text())
		}
		n, _ := strconv.Atoi(fl[3])
		if got[fl[1]] == nil {
			got[fl[1]] = map[string]int{}
		}
		got[fl[1]][fl[2]] = n
	}
	d, err := KeywordClients("../../testdata/aol-top1000.tsv.gz", 0, list, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	lf, err := os.Open(list)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	var words []string
	ls := bufio.NewScanner(lf)
	for ls.Scan() {
		if w := strings.TrimSpace(ls.Text()); w != "" {
			words = append(words, strings.ToLower(w))
		}
	}
	want := d.ClippedL1(15, 20, words, nil)
	cells, nonzero, differ := 0, 0, 0
	for day := range got {
		for _, w := range words {
			cells++
			if want[day][w] != 0 {
				nonzero++
			}
			if got[day][w] != want[day][w] {
				differ++
			}
		}
	}
	t.Logf("%d days, %d (day, keyword) cells, %d non-zero, %d differ", len(got), cells, nonzero, differ)
	if differ != 0 || len(got) == 0 {
		t.Fatalf("%d of %d cells differ from the raw log's clipped, L1-bounded counts", differ, cells)
	}
}
