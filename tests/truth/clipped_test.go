package truth

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// KeywordClients and Clipped on a made-up log: hand-computed per-client
// counts, active clients, clipping at 2 and a skipped client.
func TestClippedMadeUp(t *testing.T) {
	log := "AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n" +
		"1\tdog cat\t2006-03-01 10:00:00\t\t\n" +
		"1\tdog cat\t2006-03-01 10:00:10\t\t\n" + // the same instance
		"1\tdog\t2006-03-01 10:01:00\t\t\n" +
		"1\tdog dog\t2006-03-01 10:02:00\t\t\n" + // a token once per instance
		"2\tdog\t2006-03-01 09:00:00\t\t\n" +
		"2\tfish\t2006-03-02 09:00:00\t\t\n" +
		"3\t-\t2006-03-02 09:00:00\t\t\n" + // active, nothing counted
		"3\tdog\t2006-03-03 09:00:00\t\t\n" // after lastDay
	dir := t.TempDir()
	path, list := filepath.Join(dir, "log.tsv"), filepath.Join(dir, "list.txt")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(list, []byte("dog\ncat\nfish\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := KeywordClients(path, 0, list, "2006-03-02", []string{"fish"})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Counts["2006-03-01"]["1"]; !maps.Equal(got, map[string]int{"dog": 3, "cat": 1}) {
		t.Fatalf("user 1 on 03-01: %v", got)
	}
	if len(d.Active["2006-03-01"]) != 2 || len(d.Active["2006-03-02"]) != 2 || d.Active["2006-03-03"] != nil {
		t.Fatalf("active: %v", d.Active)
	}
	if got := d.Clipped(2, nil); !maps.Equal(got["2006-03-01"], map[string]int{"dog": 3, "cat": 1}) || len(got) != 1 {
		t.Fatalf("clipped at 2: %v", got)
	}
	skip2 := func(day, user string) bool { return user == "2" }
	if got := d.Clipped(15, skip2); !maps.Equal(got["2006-03-01"], map[string]int{"dog": 3, "cat": 1}) {
		t.Fatalf("clipped at 15 without user 2: %v", got)
	}
	if got := d.Clipped(1, nil); !maps.Equal(got["2006-03-01"], map[string]int{"dog": 2, "cat": 1}) {
		t.Fatalf("clipped at 1: %v", got)
	}
}

// Without clipping, the per-client counts of the bundled log's first 100
// users sum to PDDKeywordDaily's totals, day by day and keyword by keyword.
func TestClippedAgreesWithKeywordDaily(t *testing.T) {
	const log, list = "../../testdata/aol-top1000.tsv.gz", "../../ingest/keywords/google-10000-english.txt"
	want, err := PDDKeywordDaily(log, 100, list, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := KeywordClients(log, 100, list, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := d.Clipped(1<<30, nil)
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%d days, KeywordDaily %d", len(got), len(want))
	}
	for day, kw := range want {
		if !maps.Equal(got[day], kw) {
			t.Fatalf("%s: per-client sums differ from KeywordDaily", day)
		}
	}
}
