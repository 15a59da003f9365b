package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/release/policy"
)

// Canonical is the canonical encoding of the fields of a pipeline that
// change what a report means: the application and its options
// (apps.Meaning), the release policy and its parameters as resolved by
// policy.New (δ, Shamir k and λ derived when not given). One field per
// line, "name=value\n", in this order, after the line
// "crowdlog-v1 pipeline"; numbers in Go's shortest round-trip form
// (strconv.FormatFloat 'g', −1):
//
//	crowdlog-v1 pipeline
//	app=query
//	options=
//	policy=dp-u
//	shamir_k=…
//	epsilon=2.302585092994046
//	delta=… d=… users=… count_share=… slack=… lambda=…   (DP policies only, one per line)
//
// The name, the epoch, the budget, the summary mode, the token budgets and
// the topics are left out: they change what is published or how, not what
// a report means. Errors when the application or its options are invalid.
func Canonical(app string, opts apps.Options, pol *policy.Policy) (string, error) {
	a, err := apps.LookupWith(app, opts)
	if err != nil {
		return "", fmt.Errorf("pipeline digest: %w", err)
	}
	var b strings.Builder
	line := func(k, v string) { b.WriteString(k + "=" + v + "\n") }
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	b.WriteString("crowdlog-v1 pipeline\n")
	line("app", a.Name())
	line("options", apps.Meaning(a))
	line("policy", string(pol.Kind))
	line("shamir_k", strconv.Itoa(pol.ShamirK))
	if pol.Kind.IsDP() {
		p := pol.Params
		line("epsilon", f(p.Epsilon))
		line("delta", f(p.Delta))
		line("d", strconv.Itoa(p.D))
		line("users", strconv.Itoa(p.Users))
		line("count_share", f(p.CountShare))
		line("slack", f(p.Slack))
		line("lambda", f(p.Lambda))
	}
	return b.String(), nil
}

// Digest is SHA-256 of Canonical(app, opts, pol): 32 bytes that enter
// every report's sealing derivation (star.Context.Pipeline) and travel
// with reports and decrypted items, so that roles given different
// definitions refuse each other's data instead of releasing it under
// parameters the clients did not use. Errors as Canonical.
func Digest(app string, opts apps.Options, pol *policy.Policy) ([32]byte, error) {
	c, err := Canonical(app, opts, pol)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256([]byte(c)), nil
}

// Digest is the pipeline's digest (the package-level Digest of its app,
// options and resolved policy). Errors when the policy does not resolve:
// a DP policy needs policy.users (U is configuration, never counted from
// an input; Validate refuses a DP pipeline without it).
func (p *Pipeline) Digest() ([32]byte, error) {
	d := p.Defaults()
	o, err := d.AppOptions()
	if err != nil {
		return [32]byte{}, err
	}
	pol, err := policy.New(d.PolicyParams())
	if err != nil {
		return [32]byte{}, fmt.Errorf("%w: policy: %v", ErrInvalid, err)
	}
	return Digest(d.App.Name, o, pol)
}

// DigestString is a digest as logs, errors and `crowdlog pipeline show`
// print it: 64 hex digits.
func DigestString(d [32]byte) string { return hex.EncodeToString(d[:]) }
