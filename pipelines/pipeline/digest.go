package pipeline

import (
	"encoding/hex"
	"fmt"

	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol/pipelinespec"
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
	s, err := SpecOf(app, opts, pol)
	if err != nil {
		return "", err
	}
	return s.Canonical(), nil
}

// SpecOf is the pipelinespec.Spec of (app, opts, pol): what Canonical
// encodes and an aggregator announces (pipelinespec.Announcement). Errors
// when the application or its options are invalid.
func SpecOf(app string, opts apps.Options, pol *policy.Policy) (pipelinespec.Spec, error) {
	a, err := apps.LookupWith(app, opts)
	if err != nil {
		return pipelinespec.Spec{}, fmt.Errorf("pipeline digest: %w", err)
	}
	s := pipelinespec.Spec{App: a.Name(), Options: apps.Meaning(a), Policy: string(pol.Kind), ShamirK: pol.ShamirK}
	if pol.Kind.IsDP() {
		p := pol.Params
		s.DP = &pipelinespec.DP{Epsilon: p.Epsilon, Delta: p.Delta, D: p.D, Users: p.Users,
			CountShare: p.CountShare, Slack: p.Slack, Lambda: p.Lambda}
	}
	return s, nil
}

// Digest is SHA-256 of Canonical(app, opts, pol): 32 bytes that enter
// every report's sealing derivation (star.Context.Pipeline) and travel
// with reports and decrypted items, so that roles given different
// definitions refuse each other's data instead of releasing it under
// parameters the clients did not use. Errors as Canonical.
func Digest(app string, opts apps.Options, pol *policy.Policy) ([32]byte, error) {
	s, err := SpecOf(app, opts, pol)
	if err != nil {
		return [32]byte{}, err
	}
	return s.Digest(), nil
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

// Spec is the pipeline's pipelinespec.Spec (its app, options and
// resolved policy), whose Digest is the pipeline's. Errors as Digest.
func (p *Pipeline) Spec() (pipelinespec.Spec, error) {
	d := p.Defaults()
	o, err := d.AppOptions()
	if err != nil {
		return pipelinespec.Spec{}, err
	}
	pol, err := policy.New(d.PolicyParams())
	if err != nil {
		return pipelinespec.Spec{}, fmt.Errorf("%w: policy: %v", ErrInvalid, err)
	}
	return SpecOf(d.App.Name, o, pol)
}

// DigestString is a digest as logs, errors and `crowdlog pipeline show`
// print it: 64 hex digits.
func DigestString(d [32]byte) string { return hex.EncodeToString(d[:]) }
