package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// TestPDDPrio3Exact: `crowdlog pdd --mode prio3` in one process (embedded
// NATS with each role's own NKey, kfake, the relays, leader and helper with
// their own key directories, the release stage, a local ClickHouse) on the
// bundled log's first 60 users
// and 3 days, L = the embedded list's first 300 keywords, counts clipped
// to 3 (b = 2, so clipping happens): every (day, keyword) count of the
// export equals the raw log's per-client clipped counts summed
// (tests/truth), zeros included; confidence 1; each day's reports equal the
// clients active that day in the raw log; the blacklisted keyword is never
// released.
func TestPDDPrio3Exact(t *testing.T) {
	if testing.Short() {
		t.Skip("a whole Prio3 replay: make test runs it, -short does not")
	}
	needClickHouse(t)
	const users, days, length, bits = 60, 3, 300, 2
	dir := t.TempDir()
	listPath := filepath.Join(dir, "keywords.txt")
	words := keywords.Default().Words[:length]
	if err := os.WriteFile(listPath, []byte(strings.Join(words, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	sum, out := runPDD(t, PDDConfig{Mode: ModePrio3, MaxUsers: users, MaxDays: days, Keywords: listPath, Bits: bits,
		Blacklist: []string{"free"}, Progress: &progress})
	if sum.Prio3 == nil {
		t.Fatal("no Prio3 summary")
	}
	got, conf := readPDDExport(t, out)
	dc, err := truth.KeywordClients(bundled, users, listPath, "", []string{"free"})
	if err != nil {
		t.Fatal(err)
	}
	var dayList []string
	for d := range dc.Active {
		dayList = append(dayList, d)
	}
	if len(dayList) < days {
		t.Fatalf("%d days in the log", len(dayList))
	}
	want := dc.Clipped(1<<bits-1, nil)
	checked, nonzero := 0, 0
	for day := range got {
		if conf[day] != 1 {
			t.Fatalf("%s: confidence %v", day, conf[day])
		}
		if got[day]["free"] != 0 {
			t.Fatalf("%s: the blacklisted keyword released", day)
		}
		for i, w := range words {
			if got[day][w] != want[day][w] {
				t.Fatalf("%s keyword #%d: released %d, raw log clipped %d", day, i, got[day][w], want[day][w])
			}
			if want[day][w] != 0 {
				nonzero++
			}
		}
		if int(sum.Prio3.Released[day]) != len(dc.Active[day]) || int(sum.Prio3.Sent[day]) != len(dc.Active[day]) {
			t.Fatalf("%s: %d reports sent, %d released; %d clients active in the raw log", day, sum.Prio3.Sent[day], sum.Prio3.Released[day], len(dc.Active[day]))
		}
		checked++
	}
	if checked != days {
		t.Fatalf("%d days released, want %d", checked, days)
	}
	var b strings.Builder
	sum.Print(&b)
	t.Logf("%d days × %d keywords equal the raw log's clipped counts (%d non-zero), %d clipped by clients\n%s%s",
		days, length, nonzero, sum.Prio3.Clipped, progress.String(), b.String())
}
