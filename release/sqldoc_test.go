package release

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// sqlBlock is one ```sql block of docs/sql.md and the ```tsv block that
// follows it, if any: the rows it returns on the sample release.
type sqlBlock struct {
	line     int
	sql      string
	expected *string
}

// docBlocks returns the sql blocks of a Markdown text, each with the tsv
// block that comes next before any other sql block.
func docBlocks(t *testing.T, md string) []sqlBlock {
	t.Helper()
	var out []sqlBlock
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		lang, ok := strings.CutPrefix(lines[i], "```")
		if !ok || lang == "" {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && lines[i] != "```"; i++ {
		}
		if i == len(lines) {
			t.Fatalf("docs/sql.md:%d: unclosed ``` block", start)
		}
		body := strings.Join(lines[start:i], "\n")
		switch lang {
		case "sql":
			out = append(out, sqlBlock{line: start, sql: body})
		case "tsv":
			if len(out) == 0 || out[len(out)-1].expected != nil {
				t.Fatalf("docs/sql.md:%d: tsv block without a sql block before it", start)
			}
			out[len(out)-1].expected = &body
		}
	}
	return out
}

// writeSample writes the sample release that docs/sql.md describes into
// database crowdlog (dropped first, with its analyst database), through the
// Writer.
func writeSample(t *testing.T, ctx context.Context) {
	t.Helper()
	w0 := openTestWriter(t) // starts the server
	for _, db := range []string{AnalystDatabase(DefaultDatabase), DefaultDatabase} {
		if err := w0.conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
			t.Fatal(err)
		}
	}
	w, err := Open(ctx, srv.TCPAddr, DefaultDatabase)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	it := func(app, epoch, pol, item, variant string, imp, users uint64) Item {
		return Item{App: app, Epoch: epoch, Policy: pol, K: 2, Item: item, Variant: variant, Impressions: imp, Users: users}
	}
	un := func(epoch string, reports, users, tags uint64) Undecrypted {
		return Undecrypted{App: "query", Epoch: epoch, Policy: "ft-u", K: 2, Reports: reports, Users: users, Tags: tags}
	}
	at := time.Date(2006, 5, 1, 0, 0, 0, 0, time.UTC)
	if err := w.WriteRelease(ctx, []Item{
		it("query", "2006-03", "ft-u", "dog", "Dog", 10, 6),
		it("query", "2006-03", "ft-u", "cat", "", 4, 3),
		it("query", "2006-03", "ft-u", "fish", "", 2, 2),
		it("query", "2006-04", "ft-u", "dog", "", 6, 4),
		it("query", "2006-04", "ft-u", "cat", "", 8, 5),
		it("reformulation", "2006-03", "ft-u", "dog → puppy", "", 5, 4),
		it("reformulation", "2006-03", "ft-u", "dog → dog food", "", 2, 2),
		it("click", "2006-03", "ft-u", "dog → www.example.com", "", 4, 3),
		it("url", "2006-03", "ft-u", "www.example.com", "", 5, 4),
		it("ltr", "2006-03", "ft-u", "dog → www.example.com → dwell → 1m-5m", "", 3, 2),
		it("keyword", "2006-03", "ft-u", "dog", "", 12, 7),
	}, []Undecrypted{un("2006-03", 1, 1, 7), un("2006-03", 2, 2, 3), un("2006-04", 1, 1, 4)}, at); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		epoch string
		item  Item
		eps   float64
	}{
		{"2006-03", it("query", "2006-03", "dp-a", "dog", "", 9, 0), 1.5},
		{"2006-04", it("query", "2006-04", "dp-a", "dog", "", 5, 0), 0.5},
	} {
		spend := Spend{Dataset: "default", Epoch: s.epoch, App: "query", Policy: "dp-a", K: 2, Epsilon: s.eps, Delta: 0.001, Params: "d=1"}
		if err := w.WriteSpendingRelease(ctx, s.item.Key(), []Item{s.item}, nil, at, spend, Budget{}); err != nil {
			t.Fatal(err)
		}
	}
	// an interrupted release: rows without a releases row, which no view shows
	if err := w.insertItems(ctx, Key{"query", "2006-05", "ft-u", 2}, []Item{it("query", "2006-05", "ft-u", "dog", "", 99, 99)}, at); err != nil {
		t.Fatal(err)
	}
}

// TestSQLCookbook runs every sql block of docs/sql.md with
// clickhouse-client as the read-only analyst (made by Init, in its analyst
// database crowdlog_analyst) against the sample release, and compares the
// blocks followed by a tsv block with those rows, computed by hand from
// the sample in docs/sql.md. Init runs after the sample is written, so the
// sample reaches the analyst database through Init's backfill.
func TestSQLCookbook(t *testing.T) {
	md, err := os.ReadFile("../docs/sql.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := docBlocks(t, string(md))
	checked := 0
	for _, b := range blocks {
		if b.expected != nil {
			checked++
		}
	}
	if len(blocks) < 10 || checked < 2 {
		t.Fatalf("docs/sql.md has %d sql blocks, %d with expected rows; want ≥ 10 and ≥ 2", len(blocks), checked)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	writeSample(t, ctx)
	a := Analyst{Name: "crowdlog_doc_analyst", Password: "doc-test-password"}
	if _, err := Init(ctx, InitOptions{Addr: srv.TCPAddr, AllowPasswordlessDefault: true, Analyst: a, UsersDir: clickhouse.UsersDir(srv.Dir)}); err != nil {
		t.Fatal(err)
	}
	client, err := clickhouse.ClientBinary()
	if err != nil {
		t.Fatal(err)
	}
	port, err := port(srv.TCPAddr)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		qctx, qcancel := context.WithTimeout(ctx, 30*time.Second)
		args := append(client[1:], "--host", "127.0.0.1", "--port", port, "--user", a.Name, "--password", a.Password,
			"--database", AnalystDatabase(DefaultDatabase), "--multiquery", "--query", b.sql)
		cmd := exec.CommandContext(qctx, client[0], args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		qcancel()
		if err != nil {
			t.Errorf("docs/sql.md:%d: %v\n%s\n%s", b.line, err, b.sql, stderr.String())
			continue
		}
		if b.expected == nil {
			continue
		}
		if got := strings.TrimRight(stdout.String(), "\n"); got != strings.TrimRight(*b.expected, "\n") {
			t.Errorf("docs/sql.md:%d: rows\n%s\nwant (the tsv block after it)\n%s", b.line, got, *b.expected)
		}
	}
}

// port returns the port of a "host:port" address.
func port(addr string) (string, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", os.ErrInvalid
	}
	return addr[i+1:], nil
}
