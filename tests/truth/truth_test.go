package truth

import (
	"os"
	"path/filepath"
	"testing"
)

// The acceptance figure: ft-u k=5 on the bundled log releases 899 items.
func TestBundledFTu5(t *testing.T) {
	rows, err := Release("../../testdata/aol-top1000.tsv.gz", "ft-u", 5, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 899 {
		t.Fatalf("ft-u k=5: %d items, the issue states 899", len(rows))
	}
}

// AppRelease on a made-up log: hand-computed expectations.
func TestAppReleaseMadeUp(t *testing.T) {
	log := "AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n" +
		"1\tDog\t2006-03-01 10:00:00\t\thttp://A.com\n" +
		"1\tdog\t2006-03-01 10:00:00\t\thttp://b.com/x\n" +
		"1\tpuppy\t2006-03-01 10:02:00\t\t\n" +
		"1\tcat\t2006-03-01 11:00:00\t\t\n" +
		"2\tdog\t2006-03-02 09:00:00\t\thttp://a.com/y\n" +
		"2\tpuppy  \t2006-03-02 09:00:40\t\t\n"
	path := filepath.Join(t.TempDir(), "log.tsv")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(app, policy string, k int, o Options, want map[string]Row) {
		t.Helper()
		got, err := AppRelease(path, app, policy, k, 0, o)
		if err != nil {
			t.Fatal(err)
		}
		if d := Diff(want, got, 10); len(d) > 0 || len(got) != len(want) {
			t.Errorf("%s %s k=%d: %v (got %v)", app, policy, k, d, got)
		}
	}
	check("reformulation", "ft-u", 2, Options{}, map[string]Row{"dog → puppy": {"dog → puppy", 2, 2}})
	check("reformulation", "ft-a", 1, Options{}, map[string]Row{"dog → puppy": {"dog → puppy", 2, 2}})
	check("click", "ft-u", 2, Options{}, map[string]Row{"dog → a.com": {"dog → a.com", 2, 2}})
	check("url", "ft-a", 1, Options{URLLevel: "dir"}, map[string]Row{"a.com/": {"a.com/", 2, 2}, "b.com/": {"b.com/", 1, 1}})
	// user 1's dwell is 2m (1m-5m), user 2's 40s (30s-1m): only rank and length reach 2 users
	check("ltr", "ft-u", 2, Options{}, map[string]Row{
		"dog → a.com → rank → 1":   {"dog → a.com → rank → 1", 2, 2},
		"dog → a.com → length → 1": {"dog → a.com → length → 1", 2, 2},
	})
	check("keyword", "ft-u", 2, Options{}, map[string]Row{"dog": {"dog", 2, 2}, "puppy": {"puppy", 2, 2}})
}
