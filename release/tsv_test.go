package release_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/release"
)

func TestWriteTSVEscapingAndOrder(t *testing.T) {
	items := []release.Item{
		{App: "query", Epoch: "e1", Policy: "ft-u", K: 5, Item: "b", Impressions: 10, Users: 5},
		{App: "query", Epoch: "e1", Policy: "ft-u", K: 5, Item: "tab\there", Impressions: 3, Users: 3},
		{App: "query", Epoch: "e1", Policy: "ft-u", K: 5, Item: "a", Impressions: 10, Users: 7},
		{App: "query", Epoch: "e1", Policy: "ft-u", K: 5, Item: `back\slash` + "\nnew\rline", Impressions: 42, Users: 6},
		{App: "q\tapp", Epoch: "e\\1", Policy: "p\n", K: 5, Item: "ünïcode", Impressions: 1, Users: 1},
	}
	orig := append([]release.Item(nil), items...)
	var buf bytes.Buffer
	if err := release.WriteTSV(&buf, items); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"app\tepoch\tpolicy\titem\timpressions\tusers",
		"query\te1\tft-u\tback\\\\slash\\nnew\\rline\t42\t6",
		"query\te1\tft-u\ta\t10\t7",
		"query\te1\tft-u\tb\t10\t5",
		"query\te1\tft-u\ttab\\there\t3\t3",
		"q\\tapp\te\\\\1\tp\\n\tünïcode\t1\t1",
	}, "\n") + "\n"
	if got := buf.String(); got != want {
		t.Fatalf("WriteTSV:\n got %q\nwant %q", got, want)
	}
	// Every data line has exactly 6 fields: no raw tab or newline leaked.
	for i, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		if n := len(strings.Split(line, "\t")); n != 6 {
			t.Errorf("line %d has %d fields", i, n)
		}
	}
	for i := range items {
		if items[i] != orig[i] {
			t.Fatal("WriteTSV reordered the caller's slice")
		}
	}
}

func TestWriteTSVEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := release.WriteTSV(&buf, nil); err != nil {
		t.Fatal(err)
	}
	if buf.String() != release.TSVHeader+"\n" {
		t.Fatalf("empty export = %q", buf.String())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteTSVReportsWriteError(t *testing.T) {
	if err := release.WriteTSV(failWriter{}, []release.Item{{Item: "x"}}); err == nil {
		t.Fatal("want an error from a failing writer")
	}
}

func TestSchemaStatements(t *testing.T) {
	stmts := release.SchemaStatements()
	if len(stmts) != 9 {
		t.Fatalf("schema has %d statements, want 9", len(stmts))
	}
	for _, table := range []string{"released_items", "undecrypted_summary", "releases", "privacy_ledger", "release_draws", "pdd_keyword_counts", "pdd_rounds", "pdd_withheld", "pdd_campaigns"} {
		found := false
		for _, s := range stmts {
			if strings.HasPrefix(s, "CREATE TABLE IF NOT EXISTS "+table+" (") {
				found = true
			}
			if strings.Contains(s, "--") {
				t.Errorf("comment left in statement: %q", s)
			}
		}
		if !found {
			t.Errorf("no CREATE TABLE IF NOT EXISTS for %s", table)
		}
	}
}
