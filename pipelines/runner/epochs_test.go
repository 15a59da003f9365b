package runner

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/tests/truth"
)

// weeksOf cuts the raw log at path into week files under dir, by hand:
// each line goes to the week floor(unix(QueryTime)/604800) of its third
// column, named START-168h with START in UTC as 20060102T150405Z. It
// returns the files by week name.
func weeksOf(t *testing.T, path, dir string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		if r, err = gzip.NewReader(f); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string]*os.File{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) < 3 || fields[0] == "AnonID" {
			continue
		}
		ts, err := time.Parse("2006-01-02 15:04:05", fields[2])
		if err != nil {
			continue
		}
		const week = 7 * 24 * 3600
		start := time.Unix(ts.Unix()/week*week, 0).UTC()
		name := start.Format("20060102T150405Z") + "-168h"
		w := out[name]
		if w == nil {
			if w, err = os.Create(filepath.Join(dir, name+".tsv")); err != nil {
				t.Fatal(err)
			}
			out[name] = w
		}
		fmt.Fprintln(w, sc.Text())
	}
	files := map[string]string{}
	for name, w := range out {
		w.Close()
		files[name] = w.Name()
	}
	return files
}

// exportByEpoch splits an export TSV into one export file per epoch
// column value under dir.
func exportByEpoch(t *testing.T, path, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	header := strings.Split(lines[0], "\t")
	col := -1
	for i, h := range header {
		if h == "epoch" {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("export header %q has no epoch column", lines[0])
	}
	by := map[string][]string{}
	for _, l := range lines[1:] {
		e := strings.Split(l, "\t")[col]
		by[e] = append(by[e], l)
	}
	files := map[string]string{}
	for e, ls := range by {
		p := filepath.Join(dir, "export-"+e+".tsv")
		if err := os.WriteFile(p, []byte(lines[0]+"\n"+strings.Join(ls, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		files[e] = p
	}
	return files
}

// firstUsers writes the lines of the first n AnonIDs of the gzipped log at
// path (in file order, header kept) to a plain file under dir.
func firstUsers(t *testing.T, path string, n int, dir string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "subset.tsv")
	w, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	users := map[string]bool{}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		user, _, _ := strings.Cut(sc.Text(), "\t")
		if user != "AnonID" && !users[user] {
			if len(users) == n {
				break
			}
			users[user] = true
		}
		fmt.Fprintln(w, sc.Text())
	}
	return out
}

// TestRunWeeklyEpochs: `crowdlog run --epoch-length 168h` on the bundled
// log's first 400 users (ft-u, k = 3, tokens off: the whole log takes
// four times as long for the same check) releases one histogram per week,
// each named as the randomness schedule names it, and each exactly the
// release of that week's records alone, computed from the raw log cut by
// hand.
func TestRunWeeklyEpochs(t *testing.T) {
	needClickHouse(t)
	if testing.Short() {
		t.Skip("full-log end-to-end run in -short mode")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.tsv")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	input := firstUsers(t, bundled, 400, dir)
	sum, err := Run(ctx, Config{Input: input, App: "query", Policy: "ft-u", K: 3, EpochLength: 168 * time.Hour,
		TokensOff: true, Export: out, StateDir: filepath.Join(dir, "state"), Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	weeks := weeksOf(t, input, t.TempDir())
	got := exportByEpoch(t, out, t.TempDir())
	if len(weeks) < 2 || len(sum.Epochs) != len(weeks) {
		t.Fatalf("%d epochs run, the raw log spans %d weeks", len(sum.Epochs), len(weeks))
	}
	names := make([]string, 0, len(weeks))
	for w := range weeks {
		names = append(names, w)
	}
	sort.Strings(names)
	total := 0
	for i, w := range names {
		if sum.Epochs[i].Name != w {
			t.Fatalf("epoch %d is named %s, want %s", i, sum.Epochs[i].Name, w)
		}
		want, err := truth.Release(weeks[w], "ft-u", 3, 0)
		if err != nil {
			t.Fatal(err)
		}
		var rel map[string]truth.Row
		if p, ok := got[w]; ok {
			if rel, _, err = truth.ReadExport(p); err != nil {
				t.Fatal(err)
			}
		}
		if d := truth.Diff(want, rel, 10); len(d) > 0 {
			t.Fatalf("week %s: export differs from the raw-log release of that week (%d vs %d items):\n%v", w, len(rel), len(want), d)
		}
		if sum.Epochs[i].Released != len(want) {
			t.Fatalf("week %s: summary says %d released, want %d", w, sum.Epochs[i].Released, len(want))
		}
		total += len(want)
		t.Logf("%s: %d items", w, len(want))
	}
	if total == 0 || sum.Released != total {
		t.Fatalf("%d items released over the weeks, want %d", sum.Released, total)
	}
}
