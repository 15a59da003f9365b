package pipeline

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol/pipelinespec"
	"github.com/crowdlog/crowdlog/release/policy"
)

// TestDigestCanonical: the digest is SHA-256 of the documented canonical
// text, written out here by hand (not by the code it checks).
func TestDigestCanonical(t *testing.T) {
	p, err := Parse([]byte("name: q\napp: {name: query}\npolicy: {kind: ft-u, k: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256([]byte("crowdlog-v1 pipeline\napp=query\noptions=\npolicy=ft-u\nshamir_k=5\n"))
	if d, err := p.Digest(); err != nil || d != want {
		t.Fatalf("ft-u k=5: digest %x, %v; want SHA-256 of the canonical text %x", d, err, want)
	}
	c, err := Parse([]byte("name: c\napp: {name: click, url_level: dir}\npolicy: {kind: dp-u, epsilon: 1, users: 9, shamir_k: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join([]string{"crowdlog-v1 pipeline", "app=click", "options=url-level=dir", "policy=dp-u", "shamir_k=2",
		"epsilon=1", "delta=0.1", "d=1", "users=9", "count_share=0.5", "slack=3", "lambda=0", ""}, "\n")
	if d, err := c.Digest(); err != nil || d != sha256.Sum256([]byte(text)) {
		got, _ := Canonical("click", apps.Options{URLLevel: "dir"}, mustPolicy(t, func() policy.Params { d := c.Defaults(); return d.PolicyParams() }()))
		t.Fatalf("dp-u: digest %x, %v; canonical text\n%q\nwant\n%q", d, err, got, text)
	}
}

func mustPolicy(t *testing.T, p policy.Params) *policy.Policy {
	t.Helper()
	pol, err := policy.New(p)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// TestDigestSameDefinition: a file that leaves defaults out and one that
// spells them have one digest; changing ε, U, the policy, the app option
// or k changes it; the name, budget, summary, epoch, tokens and topics do
// not.
func TestDigestSameDefinition(t *testing.T) {
	digest := func(y string) [32]byte {
		t.Helper()
		p, err := Parse([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		d, err := p.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	base := digest("name: a\napp: {name: query}\npolicy: {kind: dp-u, epsilon: 2.302585092994046, users: 1000}\n")
	same := []string{
		"name: b\napp: {name: query}\npolicy: {kind: dp-u, epsilon: 2.302585092994046, users: 1000, d: 1, count_share: 0.5, slack: 3}\n",
		"name: c\napp: {name: query}\npolicy: {kind: dp-u, epsilon: 2.302585092994046, users: 1000, summary: none, budget: {dataset: x, epsilon: 9}}\nepoch: {name: w1}\ntokens: {mode: off}\ntopics: {partitions: 2}\n",
	}
	for _, y := range same {
		if digest(y) != base {
			t.Errorf("digest changed by a field that does not change what a report means:\n%s", y)
		}
	}
	other := []string{
		"name: a\napp: {name: query}\npolicy: {kind: dp-u, epsilon: 1, users: 1000}\n",
		"name: a\napp: {name: query}\npolicy: {kind: dp-u, epsilon: 2.302585092994046, users: 2000}\n",
		"name: a\napp: {name: query}\npolicy: {kind: dp-a, epsilon: 2.302585092994046, users: 1000}\n",
		"name: a\napp: {name: keyword}\npolicy: {kind: dp-u, epsilon: 2.302585092994046, users: 1000}\n",
	}
	for _, y := range other {
		if digest(y) == base {
			t.Errorf("digest unchanged by a change of meaning:\n%s", y)
		}
	}
	if digest("name: a\napp: {name: click, url_level: full}\npolicy: {kind: ft-u, k: 5}\n") == digest("name: a\napp: {name: click}\npolicy: {kind: ft-u, k: 5}\n") {
		t.Error("the URL level does not change the digest")
	}
	if digest("name: a\napp: {name: click, url_level: domain}\npolicy: {kind: ft-u, k: 5}\n") != digest("name: a\napp: {name: click}\npolicy: {kind: ft-u, k: 5}\n") {
		t.Error("the default URL level spelled out changes the digest")
	}
	// a DP pipeline without users is invalid, so it is never digested: U
	// is part of it, and configuration (never counted from the input)
	if _, err := Parse([]byte("name: a\napp: {name: query}\npolicy: {kind: dp-u, epsilon: 1}\n")); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "policy.users") {
		t.Errorf("dp-u without users: %v, want ErrInvalid naming policy.users", err)
	}
}

// TestSpecSealing: the client-side sealing of each policy kind
// (pipelinespec.Sealing, which the device compares with Config.Policy)
// is the release policy's own (policy.Policy.Sealing), and a pipeline's
// Spec round-trips through its canonical text.
func TestSpecSealing(t *testing.T) {
	for _, y := range []string{
		"name: a\napp: {name: query}\npolicy: {kind: ft-a, k: 3}\n",
		"name: b\napp: {name: query}\npolicy: {kind: ft-u, k: 5}\n",
		"name: c\napp: {name: click, url_level: dir}\npolicy: {kind: dp-u, epsilon: 1, users: 9, shamir_k: 2}\n",
		"name: d\napp: {name: query}\npolicy: {kind: dp-a, epsilon: 1, users: 9}\n",
		"name: e\napp: {name: query}\npolicy: {kind: zealous, epsilon: 1, users: 9}\n",
	} {
		p, err := Parse([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		s, err := p.Spec()
		if err != nil {
			t.Fatal(err)
		}
		pol := mustPolicy(t, func() policy.Params { d := p.Defaults(); return d.PolicyParams() }())
		if s.Sealing() != pol.Sealing() {
			t.Errorf("%s: pipelinespec sealing %v, release policy %v", s.Policy, s.Sealing(), pol.Sealing())
		}
		d, _ := p.Digest()
		back, err := pipelinespec.Parse(s.Canonical())
		if err != nil || back.Digest() != d {
			t.Errorf("%s: canonical text does not round-trip: %v", s.Policy, err)
		}
	}
}
