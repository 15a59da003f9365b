package policy

import (
	"fmt"

	"github.com/spf13/pflag"
)

// AddFlags adds the DP policy parameters (docs/policies.md) to f, filling
// p; run, ingest and release must agree on them. Every flag's default is
// 0 = New's default, the default of the pipeline file's field too; ε and
// U have none.
func (p *Params) AddFlags(f *pflag.FlagSet) {
	f.Float64Var(&p.Epsilon, "epsilon", 0, "DP policies: privacy quota ε of one release, required (the paper uses ln 10 = 2.302585092994046); the pipeline file's policy.epsilon")
	f.Float64Var(&p.Delta, "delta", 0, "DP policies: δ, below 1/U (zealous: below 1); 0 = 1/(U+1)")
	f.IntVar(&p.D, "d", 0, "dp-a, dp-u: artifacts per user per epoch (the most recent d); zealous, dp-gsu: m; dp-su: the window of most recent distinct artifacts a client picks its most frequent one from; 0 = the policy's default as in a pipeline file (dp-gsu 20, the others 1)")
	f.IntVar(&p.Users, "users", 0, "DP policies: number of users U an epoch is planned for, required: public configuration, never counted from the input (the pipeline file's policy.users)")
	f.Float64Var(&p.CountShare, "count-share", 0, fmt.Sprintf("dp-a, dp-u: share of ε spent on the noisy released counts; 0 = %v", DefaultCountShare))
	f.IntVar(&p.ShamirK, "shamir-k", 0, "dp-a, dp-u: Shamir threshold; zealous: τ; dp-su, dp-gsu: 0 = 2, 1 = the aggregator decrypts every report; 0 = derived (docs/policies.md)")
	f.Float64Var(&p.Slack, "slack", 0, fmt.Sprintf("dp-a, dp-u: c in shamir-k = floor(k0 − c·b); 0 = %v", DefaultSlack))
	f.Float64Var(&p.Lambda, "lambda", 0, "zealous: noise scale λ ≥ 2m/ε; 0 = 2m/ε")
}
