package runner

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/tests/truth"
)

const keywordList = "../../ingest/keywords/google-10000-english.txt"

// readPDDExport reads `crowdlog pdd --export`: day → keyword → count
// (non-zero counts of released days), and day → confidence.
func readPDDExport(t *testing.T, path string) (map[string]map[string]int, map[string]float64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts := map[string]map[string]int{}
	conf := map[string]float64{}
	sc := bufio.NewScanner(f)
	sc.Scan()
	if h := sc.Text(); h != "campaign\tday\tkeyword\tcount\tconfidence\tepsilon\tstatus\treason" {
		t.Fatalf("export header %q", h)
	}
	for sc.Scan() {
		fl := strings.Split(sc.Text(), "\t")
		if len(fl) != 8 {
			t.Fatalf("export line %q", sc.Text())
		}
		if fl[6] != "released" {
			continue
		}
		n, _ := strconv.Atoi(fl[3])
		c, _ := strconv.ParseFloat(fl[4], 64)
		conf[fl[1]] = c
		if n == 0 {
			continue
		}
		if counts[fl[1]] == nil {
			counts[fl[1]] = map[string]int{}
		}
		counts[fl[1]][fl[2]] = n
	}
	return counts, conf
}

func runPDD(t *testing.T, cfg PDDConfig) (*PDDSummary, string) {
	t.Helper()
	dir := t.TempDir()
	cfg.Input = bundled
	cfg.Export = filepath.Join(dir, "pdd.tsv")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Partitions = 4
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	before := goroutineStacks()
	sum, err := RunPDD(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkNoLeaks(t, before)
	t.Logf("pdd: %d users, %d days, %d rounds released; groups %d (complete %d, recovered %d, lost %d); pings %d submitted %d answers %d; confidence %.3f",
		sum.Users, sum.Days, sum.RoundsReleased, sum.Groups, sum.Complete, sum.Recovered, sum.Lost,
		sum.Pings, sum.Submitted, sum.Answered, sum.MeanConfidence)
	return sum, cfg.Export
}

// With every client online, the released counts equal the exact keyword
// counts per day computed directly from the raw log,
// through embedded NATS, kfake and a real ClickHouse; the blacklisted
// keyword is never released.
func TestPDDAllOnlineExact(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole bundled log: the full suite (make test) runs it; -short (and so the race run) does not")
	}
	needClickHouse(t)
	const users, days = 60, 5
	sum, out := runPDD(t, PDDConfig{MaxUsers: users, MaxDays: days, GroupSize: 10, Delay: 1, Online: "all",
		Blacklist: []string{"free"}})
	if sum.Lost != 0 || sum.Recovered != 0 || sum.Complete != sum.Groups || sum.RoundsReleased != days {
		t.Fatalf("every group should complete: %+v", sum)
	}
	lastDay := ""
	for _, r := range sum.Released {
		lastDay = max(lastDay, r.Day.String())
	}
	want, err := truth.PDDKeywordDaily(bundled, users, keywordList, lastDay, []string{"free"})
	if err != nil {
		t.Fatal(err)
	}
	got, conf := readPDDExport(t, out)
	if len(want) == 0 {
		t.Fatal("empty ground truth")
	}
	rows := 0
	for day, kw := range want {
		for w, n := range kw {
			rows++
			if got[day][w] != n {
				t.Fatalf("%s %q: released %d, raw log %d", day, w, got[day][w], n)
			}
		}
	}
	for day, kw := range got {
		if conf[day] != 1 {
			t.Fatalf("%s: confidence %v, want 1 with every client online", day, conf[day])
		}
		for w, n := range kw {
			if want[day][w] != n {
				t.Fatalf("%s %q released %d, raw log %d", day, w, n, want[day][w])
			}
		}
		if _, ok := kw["free"]; ok {
			t.Fatal("blacklisted keyword released")
		}
	}
	t.Logf("%d (day, keyword) counts equal the raw log's", rows)
}

// With clients skipping pings at random, groups are recovered: the released
// counts never exceed the raw log's, the days whose groups all completed
// equal it, and confidence (clients decrypted / active) drops below 1.
func TestPDDDropoutRecovered(t *testing.T) {
	needClickHouse(t)
	if testing.Short() {
		t.Skip("dropout end-to-end run in -short mode")
	}
	const users, days = 60, 5
	sum, out := runPDD(t, PDDConfig{MaxUsers: users, MaxDays: days, GroupSize: 10, Delay: 1, Online: "all",
		Dropout: 0.25, Seed: 7})
	if sum.Recovered == 0 || sum.Answered == 0 {
		t.Fatalf("no group recovered: %+v", sum)
	}
	lastDay := ""
	for _, r := range sum.Released {
		lastDay = max(lastDay, r.Day.String())
	}
	want, err := truth.PDDKeywordDaily(bundled, users, keywordList, lastDay, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := readPDDExport(t, out)
	for _, r := range sum.Released {
		day := r.Day.String()
		for w, n := range got[day] {
			if n > want[day][w] {
				t.Fatalf("%s %q released %d > raw log %d", day, w, n, want[day][w])
			}
		}
		if r.Complete == r.Groups && r.Grouped == r.Active {
			for w, n := range want[day] {
				if got[day][w] != n {
					t.Fatalf("complete day %s %q: %d, raw log %d", day, w, got[day][w], n)
				}
			}
		}
		if r.Confidence > 1 || (r.Recovered > 0 && r.Confidence == 1) {
			t.Fatalf("%s: confidence %v with %d groups recovered", day, r.Confidence, r.Recovered)
		}
	}
}
