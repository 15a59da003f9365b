package runner

import (
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// TestPDDDocsSQL runs docs/pdd.md as a reader would: a one-process
// `crowdlog pdd --state DIR` (local ClickHouse), then, after the run has
// stopped its server, the same server again from DIR/clickhouse (what
// `crowdlog clickhouse --dir DIR/clickhouse` starts), and every sql block
// of docs/pdd.md with clickhouse-client in the analyst database the run
// created. Each block must return rows. (release TestSQLDocs runs every
// sql block of docs/ on both engines on a sample of the same tables.)
func TestPDDDocsSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("an end-to-end PDD run: the full suite (make test) runs it")
	}
	needClickHouse(t)
	md, err := os.ReadFile("../../docs/pdd.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := sqlFences(string(md))
	if len(blocks) == 0 {
		t.Fatal("docs/pdd.md has no sql block")
	}
	const users, days = 60, 3
	_, out := runPDD(t, PDDConfig{MaxUsers: users, MaxDays: days, GroupSize: 10, Delay: 1, Online: "all"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := clickhouse.Start(ctx, filepath.Join(filepath.Dir(out), "state", "clickhouse"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	client, err := clickhouse.ClientBinary()
	if err != nil {
		t.Fatal(err)
	}
	port := srv.TCPAddr[strings.LastIndexByte(srv.TCPAddr, ':')+1:]
	for _, sql := range blocks {
		args := append(client[1:], "--port", port, "--database", release.AnalystDatabase("crowdlog"), "--multiquery", "--query", sql)
		cmd := exec.CommandContext(ctx, client[0], args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("docs/pdd.md block\n%s\nafter crowdlog pdd: %v: %s", sql, err, stderr.String())
		}
		if strings.TrimSpace(stdout.String()) == "" {
			t.Fatalf("docs/pdd.md block\n%s\nreturned no rows after crowdlog pdd (%d users, %d days)", sql, users, days)
		}
		t.Logf("docs/pdd.md block: %d rows", strings.Count(stdout.String(), "\n"))
	}
}

// sqlFences returns the bodies of the ```sql blocks of a Markdown text.
func sqlFences(md string) []string {
	var out []string
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```sql" {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		out = append(out, strings.Join(lines[start:min(i, len(lines))], "\n"))
	}
	return out
}

// TestPDDPrio3Coverage: with --dropout in Prio3 mode the released
// confidence stays 1 (no server learns of a client that did not upload),
// and the summary's coverage says what is missing: per day, clients active
// in the log (counted from the raw rows by tests/truth, not the replay's
// code), reports released = reports sent, and the mean of released /
// active, below 1.
func TestPDDPrio3Coverage(t *testing.T) {
	if testing.Short() {
		t.Skip("a Prio3 replay: make test runs it, -short does not")
	}
	needClickHouse(t)
	const users, days, length = 60, 2, 100
	dir := t.TempDir()
	listPath := filepath.Join(dir, "keywords.txt")
	if err := os.WriteFile(listPath, []byte(strings.Join(keywords.Default().Words[:length], "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, out := runPDD(t, PDDConfig{Mode: ModePrio3, MaxUsers: users, MaxDays: days, Keywords: listPath, Bits: 1,
		Dropout: 0.3, Seed: 3, ExactShares: true, MinBatchSize: 5})
	ps := sum.Prio3
	if ps == nil || len(ps.Days) != days {
		t.Fatalf("want %d released days: %+v", days, sum)
	}
	dc, err := truth.KeywordClients(bundled, users, listPath, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, conf := readPDDExport(t, out)
	mean := 0.0
	for _, d := range ps.Days {
		day := d.Batch.Day.String()
		active := uint64(len(dc.Active[day]))
		if ps.Active[day] != active {
			t.Fatalf("%s: summary says %d clients active, the raw log %d", day, ps.Active[day], active)
		}
		if ps.Released[day] != ps.Sent[day] || ps.Sent[day] >= active {
			t.Fatalf("%s: %d sent, %d released, %d active: want released = sent < active under dropout", day, ps.Sent[day], ps.Released[day], active)
		}
		if c, ok := conf[day]; ok && c != 1 {
			t.Fatalf("%s: released confidence %v, want 1", day, c)
		}
		mean += float64(ps.Released[day]) / float64(active)
		t.Logf("%s: %d of %d active clients uploaded (coverage %.3f)", day, ps.Released[day], active, float64(ps.Released[day])/float64(active))
	}
	mean /= float64(days)
	if math.Abs(ps.MeanCoverage-mean) > 1e-12 || mean >= 1 || sum.MeanConfidence != 1 {
		t.Fatalf("mean coverage %v (want %v < 1), confidence %v (want 1)", ps.MeanCoverage, mean, sum.MeanConfidence)
	}
}
