package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestExamples: every example under testdata/pipelines loads, and its
// shown form (defaults filled) parses back to the same value.
func TestExamples(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/pipelines/*.yaml")
	if len(files) < 3 {
		t.Fatalf("%d example pipelines, want at least 3", len(files))
	}
	for _, f := range files {
		p, err := Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		b, err := p.Show()
		if err != nil {
			t.Fatal(err)
		}
		q, err := Parse(b)
		if err != nil {
			t.Fatalf("%s: shown form does not parse: %v\n%s", f, err, b)
		}
		if !reflect.DeepEqual(*q, p.Defaults()) {
			t.Fatalf("%s: shown form reads back as %+v, want %+v", f, *q, p.Defaults())
		}
	}
}

// TestShowFillsDefaults: the FT_u example shows epoch all, 8 partitions,
// tokens on, coarse summary and the query app's defaults.
func TestShowFillsDefaults(t *testing.T) {
	p, err := Load("../../testdata/pipelines/query-ftu-k5.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := p.Defaults()
	if d.Epoch.Name != "all" || d.Topics.Partitions != 8 || d.Tokens.Mode != "on" || d.Policy.Summary != "coarse" ||
		d.Policy.Budget.Dataset != "default" || d.App.URLLevel != "domain" || d.App.SessionGap.Minutes() != 30 {
		t.Fatalf("defaults %+v", d)
	}
}

// TestInvalid: each broken file is refused with ErrInvalid and a message
// that names the field (and, where there is a list, what it allows).
func TestInvalid(t *testing.T) {
	base := "name: t\napp:\n  name: query\npolicy:\n  kind: ft-u\n  k: 5\n"
	cases := []struct{ yaml, want string }{
		{"", "empty"},
		{base + "colour: blue\n", "colour"},
		{strings.Replace(base, "  k: 5", "  kk: 5", 1), "kk"},
		{strings.Replace(base, "name: t", "name: a/b", 1), "name"},
		{strings.Replace(base, "name: query", "name: quary", 1), "query"},
		{strings.Replace(base, "kind: ft-u", "kind: ft-x", 1), "policy.kind"},
		{strings.Replace(base, "kind: ft-u", "kind: ft-x", 1), "dp-u"},
		{strings.Replace(base, "  k: 5", "  k: 0", 1), "policy.k"},
		{base + "  epsilon: 1\n", "policy.epsilon"},
		{strings.Replace(base, "kind: ft-u\n  k: 5", "kind: dp-u", 1), "policy.epsilon"},
		{strings.Replace(base, "kind: ft-u\n  k: 5", "kind: dp-u\n  epsilon: 1\n  k: 5", 1), "policy.k"},
		{strings.Replace(base, "kind: ft-u\n  k: 5", "kind: dp-u\n  epsilon: 1\n  users: 10\n  delta: 0.5", 1), "delta"},
		{base + "  summary: loud\n", "policy.summary"},
		{base + "tokens:\n  mode: maybe\n", "tokens.mode"},
		{base + "tokens:\n  mode: off\n  report: 3\n", "tokens"},
		{base + "topics:\n  partitions: 5000\n", "topics.partitions"},
		{base + "epoch:\n  name: a/b\n", "epoch.name"},
		{base + "app:\n  name: click\n", "app"},
		{strings.Replace(base, "name: query", "name: click\n  url_level: host", 1), "url"},
		{strings.Replace(base, "  k: 5", "  k: five", 1), "five"},
		{base + "---\nname: u\n", "one pipeline"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.yaml))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err %v, want ErrInvalid naming %q", c.yaml, err, c.want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(base+"colour: blue\n"), 0o600)
	if _, err := Load(bad); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad file: %v (want the path named)", err)
	}
}
