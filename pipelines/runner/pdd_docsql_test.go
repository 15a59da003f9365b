package runner

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/release"
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
