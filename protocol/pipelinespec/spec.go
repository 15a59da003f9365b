// Package pipelinespec is the part of a pipeline definition that changes
// what a report means, as clients and roles share it: its canonical text,
// the pipeline digest bound into every report's sealing (docs/wire.md,
// "Pipeline digest"), the parser of that text, and the aggregator's
// announcement of the definitions it serves (Announcement, on
// protocol.PipelineSubject), which a client verifies before it sends.
//
// The pipeline file itself (YAML, defaults, the policy's derived
// parameters) is read by pipelines/pipeline, which builds a Spec; a client
// gets the Spec from the announcement and checks it against its own
// configuration (ingest.Config.App, K, Policy, AppOptions, Pipelines).
package pipelinespec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/crowdlog/crowdlog/protocol/star"
)

// Header is the first line of the canonical text.
const Header = "crowdlog-v1 pipeline"

// MaxCanonical bounds the canonical text Parse accepts, in bytes.
const MaxCanonical = 4096

// ErrMalformed is wrapped by Parse's errors.
var ErrMalformed = errors.New("pipelinespec: malformed canonical text")

// DP are the resolved parameters of a DP policy (release/policy.Params
// after policy.New: δ, k and λ derived when not given).
type DP struct {
	Epsilon, Delta    float64
	D, Users          int
	CountShare, Slack float64
	Lambda            float64
}

// Spec is what a pipeline definition says a report means: the
// application's name, its meaning-changing options (apps.Meaning), the
// release policy's kind (release/policy.Kind: ft-a, ft-u, dp-a, dp-u,
// zealous, dp-su, dp-gsu), the Shamir threshold k of the sealing, and for
// DP policies their resolved parameters.
type Spec struct {
	App, Options, Policy string
	ShamirK              int
	DP                   *DP
}

// Canonical is the canonical encoding of s: one field per line,
// "name=value\n", in this order, after the line Header; numbers in Go's
// shortest round-trip form (strconv.FormatFloat 'g', −1):
//
//	crowdlog-v1 pipeline
//	app=query
//	options=
//	policy=dp-u
//	shamir_k=…
//	epsilon=2.302585092994046
//	delta=… d=… users=… count_share=… slack=… lambda=…   (DP policies only, one per line)
func (s Spec) Canonical() string {
	var b strings.Builder
	line := func(k, v string) { b.WriteString(k + "=" + v + "\n") }
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	b.WriteString(Header + "\n")
	line("app", s.App)
	line("options", s.Options)
	line("policy", s.Policy)
	line("shamir_k", strconv.Itoa(s.ShamirK))
	if p := s.DP; p != nil {
		line("epsilon", f(p.Epsilon))
		line("delta", f(p.Delta))
		line("d", strconv.Itoa(p.D))
		line("users", strconv.Itoa(p.Users))
		line("count_share", f(p.CountShare))
		line("slack", f(p.Slack))
		line("lambda", f(p.Lambda))
	}
	return b.String()
}

// Digest is SHA-256 of s.Canonical(): the 32 bytes of star.Context.Pipeline.
func (s Spec) Digest() [32]byte { return sha256.Sum256([]byte(s.Canonical())) }

// Sealing is the protocol policy clients seal s's reports with
// (release/policy.Policy.Sealing): star.FTa for ft-a and dp-a (the
// threshold counts reports), star.FTu for every other kind (it counts
// users).
func (s Spec) Sealing() star.Policy { return Sealing(s.Policy) }

// Sealing is Spec.Sealing of a policy kind.
func Sealing(kind string) star.Policy {
	if kind == "ft-a" || kind == "dp-a" {
		return star.FTa
	}
	return star.FTu
}

// Parse decodes a canonical text (as Canonical writes it, at most
// MaxCanonical bytes) into a Spec, so that Parse(s.Canonical()) == s.
// Errors wrap ErrMalformed and name the line: a missing or reordered
// field, an unknown one, a number that does not parse, trailing text.
func Parse(text string) (Spec, error) {
	if len(text) > MaxCanonical {
		return Spec{}, fmt.Errorf("%w: %d bytes, at most %d", ErrMalformed, len(text), MaxCanonical)
	}
	if !strings.HasSuffix(text, "\n") {
		return Spec{}, fmt.Errorf("%w: does not end with a newline", ErrMalformed)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if lines[0] != Header {
		return Spec{}, fmt.Errorf("%w: first line %q, want %q", ErrMalformed, lines[0], Header)
	}
	names := []string{"app", "options", "policy", "shamir_k"}
	dpNames := []string{"epsilon", "delta", "d", "users", "count_share", "slack", "lambda"}
	if len(lines) == 1+len(names)+len(dpNames) {
		names = append(names, dpNames...)
	} else if len(lines) != 1+len(names) {
		return Spec{}, fmt.Errorf("%w: %d lines, want %d or %d", ErrMalformed, len(lines), 1+len(names), 1+len(names)+len(dpNames))
	}
	v := make(map[string]string, len(names))
	for i, name := range names {
		val, ok := strings.CutPrefix(lines[1+i], name+"=")
		if !ok || strings.ContainsAny(val, "\r") {
			return Spec{}, fmt.Errorf("%w: line %d is %q, want %s=…", ErrMalformed, 2+i, lines[1+i], name)
		}
		v[name] = val
	}
	var s Spec
	var err error
	s.App, s.Options, s.Policy = v["app"], v["options"], v["policy"]
	if s.App == "" || s.Policy == "" {
		return Spec{}, fmt.Errorf("%w: empty app or policy", ErrMalformed)
	}
	atoi := func(name string) int {
		n, e := strconv.Atoi(v[name])
		if e != nil && err == nil {
			err = fmt.Errorf("%w: %s=%q: %v", ErrMalformed, name, v[name], e)
		}
		return n
	}
	atof := func(name string) float64 {
		n, e := strconv.ParseFloat(v[name], 64)
		if e != nil && err == nil {
			err = fmt.Errorf("%w: %s=%q: %v", ErrMalformed, name, v[name], e)
		}
		return n
	}
	s.ShamirK = atoi("shamir_k")
	if len(names) > 4 {
		s.DP = &DP{Epsilon: atof("epsilon"), Delta: atof("delta"), D: atoi("d"), Users: atoi("users"),
			CountShare: atof("count_share"), Slack: atof("slack"), Lambda: atof("lambda")}
	}
	if err != nil {
		return Spec{}, err
	}
	if s.Canonical() != text { // numbers not in their shortest form, "+1", …
		return Spec{}, fmt.Errorf("%w: not in canonical form (numbers in Go's shortest round-trip form)", ErrMalformed)
	}
	return s, nil
}

// DigestString is a digest as logs, errors and `crowdlog pipeline show`
// print it: 64 hex digits, or "none" for the zero digest (sealed without a
// pipeline).
func DigestString(d [32]byte) string {
	if d == ([32]byte{}) {
		return "none"
	}
	return hex.EncodeToString(d[:])
}
