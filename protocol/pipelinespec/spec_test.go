package pipelinespec

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/star"
)

// TestCanonicalVector: the canonical text and digest of FT_u k = 5 on the
// query application, written out by hand (docs/wire.md's form), and
// Parse inverts Canonical for a threshold and a DP policy.
func TestCanonicalVector(t *testing.T) {
	s := Spec{App: "query", Policy: "ft-u", ShamirK: 5}
	text := "crowdlog-v1 pipeline\napp=query\noptions=\npolicy=ft-u\nshamir_k=5\n"
	if s.Canonical() != text || s.Digest() != sha256.Sum256([]byte(text)) {
		t.Fatalf("canonical %q", s.Canonical())
	}
	dp := Spec{App: "click", Options: "url-level=dir", Policy: "dp-u", ShamirK: 2,
		DP: &DP{Epsilon: 1, Delta: 0.1, D: 1, Users: 9, CountShare: 0.5, Slack: 3}}
	for _, want := range []Spec{s, dp} {
		got, err := Parse(want.Canonical())
		if err != nil || got.Canonical() != want.Canonical() {
			t.Fatalf("Parse(%q) = %+v, %v", want.Canonical(), got, err)
		}
	}
	if s.Sealing() != star.FTu || Sealing("dp-a") != star.FTa || Sealing("ft-a") != star.FTa || Sealing("zealous") != star.FTu {
		t.Fatal("sealing of the policy kinds")
	}
}

// TestParseMalformed: texts not in canonical form are refused with
// ErrMalformed.
func TestParseMalformed(t *testing.T) {
	good := "crowdlog-v1 pipeline\napp=query\noptions=\npolicy=ft-u\nshamir_k=5\n"
	for _, bad := range []string{
		"", good[:len(good)-1], strings.Replace(good, "v1", "v2", 1), strings.Replace(good, "shamir_k=5", "shamir_k=+5", 1),
		strings.Replace(good, "shamir_k=5", "shamir_k=x", 1), strings.Replace(good, "app=query\noptions=", "options=\napp=query", 1),
		good + "epsilon=1\n", strings.Replace(good, "app=query", "app=", 1), strings.Repeat("x", MaxCanonical+1),
	} {
		if _, err := Parse(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%.40q): %v, want ErrMalformed", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("crowdlog-v1 pipeline\napp=query\noptions=\npolicy=ft-u\nshamir_k=5\n")
	f.Add(Spec{App: "click", Policy: "dp-u", ShamirK: 2, DP: &DP{Epsilon: 1, Delta: 0.1, D: 1, Users: 9}}.Canonical())
	f.Fuzz(func(t *testing.T, text string) {
		s, err := Parse(text)
		if err == nil && s.Canonical() != text {
			t.Fatalf("Parse accepted %q, which is not the canonical %q", text, s.Canonical())
		}
	})
}

func FuzzParseAnnouncement(f *testing.F) {
	f.Add([]byte(`{"process":"p","pipelines":["crowdlog-v1 pipeline\napp=query\noptions=\npolicy=ft-u\nshamir_k=5\n"],"reports":{"none/query/e":{"admitted":1,"refused":{"late":2}}}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, specs, err := ParseAnnouncement(b)
		if err == nil && len(specs) != len(a.Pipelines) {
			t.Fatal("a spec per pipeline")
		}
	})
}

// FuzzParseRequest: the aggregator's decoding of a client's request and
// of the context key in it never panics, and a parsed key round-trips.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"context":"none/query/2026-11-24"}`))
	f.Add([]byte(`{"context":"450f96104df6cf7372a9670b7efdfa3c1260fefdbdf33187ddabb81ca3793de1/query/e"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := ParseRequest(b)
		if c, ok := ParseContextKey(r.Context); ok && c.Key() != r.Context {
			t.Fatalf("context key %q parsed as %+v, which prints %q", r.Context, c, c.Key())
		}
	})
}
