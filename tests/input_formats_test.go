package tests

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/unicode/norm"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// exciteSample is the made-up Excite-format log (testdata/README.md).
const exciteSample = "../testdata/excite-sample.tsv"

// exciteTruth computes the FT_u release of the query application directly
// from a raw Excite-format log (AnonID, QueryTime as yymmddHHMMSS, Query):
// lines of another shape are skipped and counted; queries normalized as in
// truth.Release (NFKC, lower case, white space collapsed), empty and "-"
// skipped, consecutive equal queries of a user one instance.
func exciteTruth(t *testing.T, path string, k int) (rows map[string]truth.Row, lines, bad, users int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inst, who := map[string]int{}, map[string]map[string]bool{}
	seen := map[string]bool{}
	prevUser, prevQ := "", ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines++
		fl := strings.Split(sc.Text(), "\t")
		if len(fl) != 3 || fl[0] == "" || len(fl[1]) != 12 {
			bad++
			continue
		}
		if _, err := time.Parse("060102150405", fl[1]); err != nil {
			bad++
			continue
		}
		seen[fl[0]] = true
		q := strings.Join(strings.Fields(strings.ToLower(norm.NFKC.String(fl[2]))), " ")
		if q == "" || q == "-" || fl[0] == prevUser && q == prevQ {
			continue
		}
		prevUser, prevQ = fl[0], q
		inst[q]++
		if who[q] == nil {
			who[q] = map[string]bool{}
		}
		who[q][fl[0]] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	rows = map[string]truth.Row{}
	for q, n := range inst {
		if len(who[q]) >= k {
			rows[q] = truth.Row{Item: q, Impressions: n, Users: len(who[q])}
		}
	}
	return rows, lines, bad, len(seen)
}

// TestExciteLogRelease runs the Excite-format sample through runner.Run
// (query application, FT_u, k = 3; embedded NATS, kfake and a real
// ClickHouse server), once from the file with the time format detected and
// once from stdin with --time-format excite (spooled), and compares each
// export with the release computed directly from the raw file.
func TestExciteLogRelease(t *testing.T) {
	if _, err := clickhouse.ServerBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ClickHouse is required in CI: %v", err)
		}
		t.Skipf("no ClickHouse: %v", err)
	}
	const k = 3
	want, lines, bad, users := exciteTruth(t, exciteSample, k)
	if len(want) < 5 || bad == 0 {
		t.Fatalf("test log too small to tell: %d items released at k=%d, %d bad lines", len(want), k, bad)
	}
	for _, c := range []struct{ name, input, format string }{
		{"file detected", exciteSample, ""},
		{"stdin given", "-", "excite"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.input == "-" {
				f, err := os.Open(exciteSample)
				if err != nil {
					t.Fatal(err)
				}
				old := os.Stdin
				os.Stdin = f
				defer func() { os.Stdin = old; f.Close() }()
			}
			dir := t.TempDir()
			out := filepath.Join(dir, "out.tsv")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			sum, err := runner.Run(ctx, runner.Config{Input: c.input, TimeFormat: c.format, App: "query", Policy: "ft-u", K: k,
				Epoch: "1997-09-16", Export: out, StateDir: filepath.Join(dir, "state"), Partitions: 2,
				StartTimeout: time.Minute, Timeout: 2 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := truth.ReadExport(out)
			if err != nil {
				t.Fatal(err)
			}
			if d := truth.Diff(want, got, 10); len(d) > 0 {
				t.Fatalf("export differs from the raw-log release (%d vs %d items):\n%v", len(got), len(want), d)
			}
			if sum.LogLines != lines || sum.BadLines != bad || sum.Users != users || sum.Released != len(want) {
				t.Errorf("summary: %d lines, %d bad, %d users, %d released; raw file: %d, %d, %d, %d",
					sum.LogLines, sum.BadLines, sum.Users, sum.Released, lines, bad, users, len(want))
			}
			if _, err := os.Stat(filepath.Join(dir, "state", runner.SpoolName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("spool left in the state directory: %v", err)
			}
			t.Logf("%s: %d items, %d impressions, %d reports sent", c.name, sum.Released, sum.ReleasedImpressions, sum.Sent)
		})
	}
}

// TestRunBinaryNoRecords: `crowdlog run` on an empty file and on a file of
// bad lines exits non-zero with an error naming the bad lines, before any
// server starts (the state directory stays without services).
func TestRunBinaryNoRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.tsv")
	bad := filepath.Join(dir, "bad.tsv")
	os.WriteFile(empty, nil, 0o600)
	os.WriteFile(bad, []byte("2A9E\t16.09.1997 10:54\tweather\n2A9E\tnews\n"), 0o600)
	for _, c := range []struct {
		input string
		want  []string
	}{
		{empty, []string{"no records in " + empty, "it is empty", "--time-format"}},
		{bad, []string{"all 2 lines are bad", "line 1: bad QueryTime", "line 2: wrong field count", "yymmddHHMMSS"}},
	} {
		state := filepath.Join(dir, "state-"+filepath.Base(c.input))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, bin, "run", "--input", c.input, "--k", "2", "--state", state).CombinedOutput()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("%s: err %v, want a non-zero exit\n%s", c.input, err, out)
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: output lacks %q:\n%s", c.input, w, out)
			}
		}
		if _, err := os.Stat(filepath.Join(state, "clickhouse")); err == nil {
			t.Errorf("%s: ClickHouse started", c.input)
		}
	}
}
