package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cjkLog is a hand-made log of 8 users over two days: Chinese queries
// (no spaces), runs of one query across UTC midnight and across
// Asia/Shanghai's (16:00 UTC), overlapping and nested keywords, a keyword
// repeated in one query, one mixing scripts.
var cjkLog = [][3]string{ // AnonID, Query, QueryTime (UTC)
	{"1", "北京天气", "2026-01-01 10:00:00"},
	{"1", "北京天气", "2026-01-01 23:50:00"},
	{"1", "北京天气", "2026-01-02 00:10:00"},
	{"2", "北京大学", "2026-01-01 12:00:00"},
	{"2", "北京大学", "2026-01-01 12:01:00"},
	{"2", "去北京", "2026-01-02 09:00:00"},
	{"3", "天气预报", "2026-01-01 15:50:00"},
	{"3", "天气预报", "2026-01-01 16:10:00"},
	{"3", "flu 天气", "2026-01-02 08:00:00"},
	{"4", "北京北京", "2026-01-01 08:00:00"},
	{"4", "京大学", "2026-01-02 08:00:00"},
	{"5", "大学生", "2026-01-01 09:00:00"},
	{"5", "大学生", "2026-01-02 09:00:00"},
	{"6", "mp3下载", "2026-01-01 09:00:00"},
	{"6", "免费mp3下载", "2026-01-02 09:00:00"},
	{"7", "天气", "2026-01-01 23:59:00"},
	{"7", "天气", "2026-01-02 00:01:00"},
	{"8", "新闻", "2026-01-01 10:00:00"},
	{"8", "新闻", "2026-01-02 10:00:00"},
}

var cjkKeywords = []string{"北京", "京大", "大学", "北京大学", "天气", "mp3下载", "新闻", "flu"}

// cjkTruth counts cjkLog without the pipeline's code: an instance is a run
// of one user's equal queries with one date in loc; a keyword counts once
// per instance when it is a substring of the query (in this log no
// keyword occurs inside a longer word of a spaced script, so substring and
// word-boundary containment agree). Day → keyword → count.
func cjkTruth(t *testing.T, loc *time.Location) map[string]map[string]int {
	out := map[string]map[string]int{}
	lastQ, lastD := map[string]string{}, map[string]string{}
	for _, r := range cjkLog {
		tm, err := time.Parse("2006-01-02 15:04:05", r[2])
		if err != nil {
			t.Fatal(err)
		}
		d := tm.In(loc).Format("2006-01-02")
		if lastQ[r[0]] == r[1] && lastD[r[0]] == d {
			continue
		}
		lastQ[r[0]], lastD[r[0]] = r[1], d
		for _, k := range cjkKeywords {
			if strings.Contains(r[1], k) {
				if out[d] == nil {
					out[d] = map[string]int{}
				}
				out[d][k]++
			}
		}
	}
	return out
}

// TestPDDCJKExact: the hand-made Chinese log through the whole groups
// pipeline (embedded NATS, kfake, a real ClickHouse), every client online:
// the released non-zero (day, keyword) counts equal the independent count,
// per UTC day and per Asia/Shanghai day (--timezone).
func TestPDDCJKExact(t *testing.T) {
	if testing.Short() {
		t.Skip("two whole PDD replays: the full suite runs them, -short does not")
	}
	needClickHouse(t)
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n")
	for _, r := range cjkLog {
		fmt.Fprintf(&b, "%s\t%s\t%s\t\t\n", r[0], r[1], r[2])
	}
	logPath, listPath := filepath.Join(dir, "cjk.tsv"), filepath.Join(dir, "zh.txt")
	if err := os.WriteFile(logPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(listPath, []byte(strings.Join(cjkKeywords, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	// Hand-checked: 天气 on 2026-01-01 is users 1, 3 and 7 by UTC days, 1
	// and 3 by Shanghai's (user 7's 23:59 UTC is 07:59 the next day there).
	if u, s := cjkTruth(t, time.UTC), cjkTruth(t, shanghai); u["2026-01-01"]["天气"] != 3 || s["2026-01-01"]["天气"] != 2 ||
		u["2026-01-02"]["北京"] != 2 || u["2026-01-01"]["北京"] != 3 {
		t.Fatalf("independent count: UTC %v, Shanghai %v", u, s)
	}
	for _, tz := range []string{"", "Asia/Shanghai"} {
		loc := time.UTC
		if tz != "" {
			loc = shanghai
		}
		cfg := PDDConfig{Input: logPath, Keywords: listPath, Timezone: tz, GroupSize: 4, Delay: 1, Online: "all",
			Export: filepath.Join(dir, "pdd"+tz[:min(len(tz), 4)]+".tsv"), StateDir: filepath.Join(dir, "state"+tz[:min(len(tz), 4)]), Partitions: 2}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		sum, err := RunPDD(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if sum.Lost != 0 || sum.Complete != sum.Groups {
			t.Fatalf("%q: every group should complete: %+v", tz, sum)
		}
		got, _ := readPDDExport(t, cfg.Export)
		want := cjkTruth(t, loc)
		cells, total := 0, 0
		for d, kw := range got {
			for w, n := range kw {
				if n != 0 {
					cells++
					total += n
					if want[d][w] != n {
						t.Errorf("%q %s %s: released %d, log %d", tz, d, w, n, want[d][w])
					}
				}
			}
		}
		wcells, wtotal := 0, 0
		for _, kw := range want {
			for _, n := range kw {
				wcells++
				wtotal += n
			}
		}
		if cells != wcells || total != wtotal {
			t.Errorf("%q: released %d cells, total %d; log %d cells, total %d", tz, cells, total, wcells, wtotal)
		}
		t.Logf("timezone %q: %d non-zero (day, keyword) cells, total %d, equal the independent count", tz, cells, total)
	}
}
