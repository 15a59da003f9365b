package release

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// Every ```sql block of every page of docs/ runs in a test. docs/sql.md's
// blocks run on its own sample and must return their tsv blocks
// (sqldoc_test.go). The blocks of the other pages run here, as the
// read-only analyst in crowdlog_analyst, on docsSample: rows of the shape
// the documented commands write (crowdlog run's epoch "all" and k = 5,
// crowdlog pdd's campaign "pdd", a noisy PDD day with its ledger row), so
// each block must return at least one row. A block that cannot run
// everywhere says why on the line before its fence:
//
//	<!-- sql-test: not on 18.16: REASON -->  runs on chDB only; on the
//	                                         18.16 server it must fail
//	<!-- sql-test: no run: REASON -->        runs on no engine (REASON
//	                                         says why)
//
// A block whose rows the sample cannot make non-empty is a bug of the
// sample or of the block.

// Marker kinds of <!-- sql-test: KIND: REASON -->.
const (
	markerNot1816 = "not on 18.16"
	markerNoRun   = "no run"
)

// docsSQLBlocks returns the sql blocks of every page of docs/ except
// docs/sql.md, checking their markers.
func docsSQLBlocks(t *testing.T) []sqlBlock {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []sqlBlock
	for _, f := range files {
		if filepath.Base(f) == "sql.md" {
			continue
		}
		md, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range docBlocks(t, "docs/"+filepath.Base(f), string(md)) {
			if b.expected != nil {
				t.Errorf("%s:%d: a tsv block outside docs/sql.md is not checked; drop it or move the recipe there", b.file, b.line)
			}
			if b.marker != "" {
				kind, reason, _ := strings.Cut(b.marker, ":")
				if (kind != markerNot1816 && kind != markerNoRun) || strings.TrimSpace(reason) == "" {
					t.Errorf("%s:%d: marker %q: want %q or %q followed by \": REASON\"", b.file, b.line, b.marker, markerNot1816, markerNoRun)
				}
			}
			out = append(out, b)
		}
	}
	if len(out) < 9 {
		t.Fatalf("%d sql blocks outside docs/sql.md; want ≥ 9 (applications, policies, pdd, pdd-release)", len(out))
	}
	return out
}

// markerKind is the kind of b's marker ("" without one).
func (b sqlBlock) markerKind() string {
	kind, _, _ := strings.Cut(b.marker, ":")
	return kind
}

// docsSample is the sample of the blocks outside docs/sql.md: docs/sql.md's
// sample, plus one release per application as `crowdlog run --app APP`
// writes it with its defaults (epoch "all", k = 5; ltr under ft-a as
// docs/applications.md runs it), and PDD days as `crowdlog pdd` writes
// them (campaign "pdd", exact) and as a noisy campaign with its ledger
// rows ("flu-2006", docs/pdd-release.md).
func docsSample() sampleData {
	s := sample()
	it := func(app, pol, item string, imp, users uint64) Item {
		return Item{App: app, Epoch: "all", Policy: pol, K: 5, Item: item, Impressions: imp, Users: users}
	}
	s.items = append(s.items,
		it("query", "ft-u", "dog", 40, 12),
		it("reformulation", "ft-u", "dog → puppy", 9, 6),
		it("reformulation", "ft-u", "dog → dog food", 7, 5),
		it("click", "ft-u", "dog → www.example.com", 11, 7),
		it("url", "ft-u", "www.example.com", 13, 8),
		it("keyword", "ft-u", "dog", 30, 10),
		it("ltr", "ft-a", "dog → www.example.com → dwell → 1m-5m", 6, 5),
	)
	day := func(d int) time.Time { return time.Date(2006, 3, d, 0, 0, 0, 0, time.UTC) }
	for d := 1; d <= 2; d++ {
		s.pdd = append(s.pdd, samplePDD{round: PDDRound{Campaign: "pdd", Day: day(d), Active: 10, Grouped: 10, Decrypted: 9,
			Groups: 2, Complete: 1, Recovered: 1, Confidence: 0.9,
			Counts: []KeywordCount{{"google", int64(d + 2)}, {"free", 5}}}})
		r := PDDRound{Campaign: "flu-2006", Day: day(d), Active: 20, Grouped: 20, Decrypted: 20, Groups: 2, Complete: 2,
			Confidence: 1, Epsilon: 0.5, MaxCount: 10, Counts: []KeywordCount{{"flu", int64(7 - d)}, {"cough", -1}}}
		sp := Spend{Dataset: "default", Epoch: dayArg(r.Day), App: r.Campaign, Policy: PDDPolicy, Epsilon: 2 * r.Epsilon,
			Params: "mechanism=laplace keywords=2 epsilon_per_keyword=0.5 max_count=10"}
		s.pdd = append(s.pdd, samplePDD{round: r, spend: &sp})
	}
	return s
}

// checkDocsBlocks runs every block on one engine (on18 says whether it is
// the 18.16 server) and returns how many ran and returned rows.
func checkDocsBlocks(t *testing.T, engine string, on18 bool, blocks []sqlBlock, run func(sql string) (string, error)) (ran int) {
	t.Helper()
	for _, b := range blocks {
		switch b.markerKind() {
		case markerNoRun:
			t.Logf("%s: %s:%d not run: %s", engine, b.file, b.line, b.marker)
			continue
		case markerNot1816:
			if on18 {
				if _, err := run(b.sql); err == nil {
					t.Errorf("%s: %s:%d runs on 18.16; drop its marker %q", engine, b.file, b.line, b.marker)
				}
				continue
			}
		}
		got, err := run(b.sql)
		if err != nil {
			t.Errorf("%s: %s:%d: %v\n%s", engine, b.file, b.line, err, b.sql)
			continue
		}
		if strings.TrimSpace(got) == "" {
			t.Errorf("%s: %s:%d returned no rows on the docs sample (what the documented command writes)\n%s", engine, b.file, b.line, b.sql)
			continue
		}
		ran++
	}
	return ran
}

// TestSQLDocs runs every sql block of docs/ outside docs/sql.md with
// clickhouse-client as the read-only analyst (made by Init after the
// sample is written, so the sample reaches crowdlog_analyst through the
// backfill, as after `crowdlog clickhouse init` on a run's server) on the
// ClickHouse 18.16 server: each must return rows on docsSample, or carry a
// marker that says why not.
func TestSQLDocs(t *testing.T) {
	blocks := docsSQLBlocks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	writeSampleData(t, ctx, docsSample())
	a := Analyst{Name: "crowdlog_doc_analyst", Password: "doc-test-password"}
	if _, err := Init(ctx, InitOptions{Addr: srv.TCPAddr, AllowPasswordlessDefault: true, Analyst: a, UsersDir: clickhouse.UsersDir(srv.Dir)}); err != nil {
		t.Fatal(err)
	}
	run, err := analystClient(ctx, a, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n := checkDocsBlocks(t, "ClickHouse 18.16", true, blocks, run)
	t.Logf("ClickHouse 18.16: %d of %d sql blocks outside docs/sql.md returned rows", n, len(blocks))
}

// analystClient returns a function that runs SQL (several statements
// allowed) with clickhouse-client as analyst a in crowdlog_analyst of the
// 18.16 test server and returns its TabSeparated output. The login goes
// through a client config file (mode 0600) written into dir, as
// scripts/demo.sh does: a password on the command line is visible to
// every local user (ps), and 18.16's client reads no password from the
// environment.
func analystClient(ctx context.Context, a Analyst, dir string) (func(sql string) (string, error), error) {
	client, err := clickhouse.ClientBinary()
	if err != nil {
		return nil, err
	}
	var x bytes.Buffer
	x.WriteString("<config><user>")
	_ = xml.EscapeText(&x, []byte(a.Name))
	x.WriteString("</user><password>")
	_ = xml.EscapeText(&x, []byte(a.Password))
	x.WriteString("</password></config>\n")
	conf := filepath.Join(dir, "analyst-client.xml")
	if err := os.WriteFile(conf, x.Bytes(), 0o600); err != nil {
		return nil, err
	}
	port, err := port(srv.TCPAddr)
	if err != nil {
		return nil, err
	}
	return func(sql string) (string, error) {
		qctx, qcancel := context.WithTimeout(ctx, 30*time.Second)
		defer qcancel()
		args := append(client[1:], "--config-file", conf, "--host", "127.0.0.1", "--port", port,
			"--database", AnalystDatabase(DefaultDatabase), "--multiquery", "--query", sql)
		cmd := exec.CommandContext(qctx, client[0], args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("%w: %s", err, stderr.String())
		}
		return stdout.String(), nil
	}, nil
}
