package prio3

import (
	"testing"
	"time"

	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// TestBundledLogTruth: the bundled log's 1,000 users (200 with -short, 10
// under the race detector), the first 7 days, one batch per day through leader, helper and collector:
// every (day, keyword) total equals the sum over clients of the raw log's
// counts clipped to 15 (SumVec, b = 4), computed here from the raw rows;
// the unclipped sums are checked against tests/truth.KeywordDaily first.
// The campaign monitors the list's first 1,000 keywords (10,000 takes ~10×
// longer; BenchmarkPrep measures L = 10,000). Dropping one client's upload
// costs exactly its own clipped counts. The first day is run again at b = 1,
// where many counts are clipped.
func TestBundledLogTruth(t *testing.T) {
	users, length := 1000, 1000
	if testing.Short() {
		users = 200
	}
	if raceEnabled {
		users = 10
	}
	began := time.Now()
	days, counts, words := clientDays(t, users, 7, length)
	if len(days) != 7 {
		t.Fatalf("%d days in the log", len(days))
	}
	// the raw reading agrees with tests/truth before any clipping
	want, err := truth.KeywordDaily(bundledLog, users, keywordList, days[len(days)-1], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range days {
		sum := make([]uint64, length)
		for _, c := range counts[d] {
			for i, x := range c {
				sum[i] += x
			}
		}
		for i, w := range words {
			if int(sum[i]) != want[d][w] {
				t.Fatalf("%s %q: raw reading %d, tests/truth %d", d, w, sum[i], want[d][w])
			}
		}
	}
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4}
	w := newWorld(t, m, min(10, uint64(users/4)))
	reports, clippedCells, nonzero, dropped := 0, 0, 0, 0
	for di, d := range days {
		day := dayOf(t, d)
		clients := counts[d]
		uploads := w.shardAll(t, day, clients)
		// on the last day one client's upload is lost
		drop := -1
		if di == len(days)-1 {
			drop = 0
			dropped++
		}
		var keep [][]byte
		for i, u := range uploads {
			if i != drop {
				keep = append(keep, u)
			}
		}
		w.upload(t, day.Start().Add(12*time.Hour), keep)
		res, err := w.collect(day)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if res.Count != uint64(len(keep)) {
			t.Fatalf("%s: collected %d reports, uploaded %d", d, res.Count, len(keep))
		}
		for i := range words {
			var exp int64
			for ci, c := range clients {
				if c[i] > 15 && ci != drop {
					clippedCells++
				}
				if ci != drop {
					exp += int64(min(c[i], 15))
				}
			}
			if res.Totals[i] != exp {
				t.Fatalf("%s %q: total %d, want %d", d, words[i], res.Totals[i], exp)
			}
			if exp != 0 {
				nonzero++
			}
		}
		reports += len(keep)
	}
	if len(w.l.Stats.Rejected)+len(w.h.Stats.Rejected) != 0 {
		t.Fatalf("rejections: leader %v helper %v", w.l.Stats.Rejected, w.h.Stats.Rejected)
	}
	if w.l.Stats.Prepared != uint64(reports) || w.h.Stats.Prepared != uint64(reports) {
		t.Fatalf("prepared leader %d helper %d, want %d", w.l.Stats.Prepared, w.h.Stats.Prepared, reports)
	}
	// the first day again with b = 1 (counts clipped to 1), where clipping
	// is common
	w1 := newWorld(t, p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 1}, min(10, uint64(users/4)))
	day0 := dayOf(t, days[0])
	w1.upload(t, day0.Start(), w1.shardAll(t, day0, counts[days[0]]))
	res1, err := w1.collect(day0)
	if err != nil {
		t.Fatal(err)
	}
	clipped1 := 0
	for i := range words {
		var exp int64
		for _, c := range counts[days[0]] {
			exp += int64(min(c[i], 1))
			if c[i] > 1 {
				clipped1++
			}
		}
		if res1.Totals[i] != exp {
			t.Fatalf("b = 1, %s %q: total %d, want %d", days[0], words[i], res1.Totals[i], exp)
		}
	}
	t.Logf("%d users, %d days, %d reports (%d dropped), L = %d: %d non-zero (day, keyword) totals equal, %d clipped cells at b = 4; first day at b = 1: %d reports, %d clipped cells, totals equal; %v",
		users, len(days), reports, dropped, length, nonzero, clippedCells, res1.Count, clipped1, time.Since(began).Round(time.Millisecond))
}
