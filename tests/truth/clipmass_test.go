package truth

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestClipMass measures, on the bundled log (1,000 users, all days, the
// default 10,000-keyword list), the share of the L1-bounded (S = 20)
// count mass that each SumVec bit width b keeps (counts clipped to
// 2^b − 1): what a smaller upload (16 B × L × b) costs in counts. It prints
// one CLIPMASS line per b; docs/decisions.md ("Prio3 upload size") records
// the choice. Skipped with -short.
func TestClipMass(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the whole bundled log")
	}
	const list = "../../ingest/keywords/google-10000-english.txt"
	d, err := KeywordClients("../../testdata/aol-top1000.tsv.gz", 0, list, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(list)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var words []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if w := strings.TrimSpace(sc.Text()); w != "" {
			words = append(words, strings.ToLower(w))
		}
	}
	total := func(m map[string]map[string]int) int {
		n := 0
		for _, ws := range m {
			for _, c := range ws {
				n += c
			}
		}
		return n
	}
	base := total(d.ClippedL1(1<<16-1, 20, words, nil))
	for _, b := range []int{1, 2, 3, 4} {
		got := total(d.ClippedL1(1<<b-1, 20, words, nil))
		fmt.Printf("CLIPMASS b=%d clip=%d kept=%d of %d (%.4f)\n", b, 1<<b-1, got, base, float64(got)/float64(base))
	}
}
