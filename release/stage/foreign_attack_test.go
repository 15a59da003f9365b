package stage

import (
	"fmt"
	"math"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/release/policy"
)

// TestAttackForeignPipeline: parameters that drift between roles. The
// clients of a dp-u pipeline (ε = ln 10, d = 1, U = 1,000) seal 40
// artifacts, each with 20–59 users, for FT_u at the pipeline's Shamir k.
// Release stages configured for another pipeline — dp-u at ε = 1, dp-a at
// ln 10, the release role's defaults ft-u k = 5, ft-a k = 3 — must publish
// none of them: an exact release of DP-sealed items (or noise under
// parameters the clients did not use) breaks the pipeline's (ε, δ). The
// stage given the right pipeline releases them with noise. Control: a
// stage that releases every (policy, k) it does not recognise exactly (the
// code before) publishes all 40 with exact counts.
func TestAttackForeignPipeline(t *testing.T) {
	mk := func(p policy.Params) *policy.Policy {
		t.Helper()
		pol, err := policy.New(p)
		if err != nil {
			t.Fatal(err)
		}
		return pol
	}
	right := mk(policy.Params{Kind: policy.DPu, Epsilon: math.Ln10, D: 1, Users: 1000})
	state := NewState()
	const artifacts = 40
	for i := range artifacts {
		for u := range 20 + i {
			state.Apply(msg(t, protocol.Decrypted{Kind: protocol.KindItem, App: "query", Epoch: "e1",
				Policy: right.Sealing().String(), K: right.ShamirK, Tag: fmt.Sprintf("t%02d", i),
				Report: fmt.Sprintf("r%02d-%02d", i, u), Unit: fmt.Sprintf("u%02d", u), Item: fmt.Sprintf("made up %02d", i)}))
		}
	}
	if _, _, done := state.Apply(msg(t, protocol.Decrypted{Kind: protocol.KindClosed, App: "query", Epoch: "e1", Partitions: 1})); !done {
		t.Fatal("epoch not complete")
	}
	wrong := map[string]*policy.Policy{
		"dp-u eps=1":    mk(policy.Params{Kind: policy.DPu, Epsilon: 1, D: 1, Users: 1000}),
		"dp-a eps=ln10": mk(policy.Params{Kind: policy.DPa, Epsilon: math.Ln10, D: 1, Users: 1000}),
		"ft-u k=5":      mk(policy.Params{Kind: policy.FTu, K: 5}),
		"ft-a k=3":      mk(policy.Params{Kind: policy.FTa, K: 3}),
	}
	published, foreign := 0, 0
	for name, pol := range wrong {
		items, _, _, err := state.ReleasePolicy("query", "e1", pol, "")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := state.Foreign("query", "e1", pol, "")
		published += len(items)
		foreign += n
		if len(items) != 0 || n != artifacts {
			t.Errorf("stage for %s published %d items of the dp-u pipeline (%d counted foreign)", name, len(items), n)
		}
	}
	items, _, dp, err := state.ReleasePolicy("query", "e1", right, "")
	if err != nil || !dp || len(items) == 0 {
		t.Fatalf("the right pipeline released %d items (dp %v, err %v)", len(items), dp, err)
	}
	ctl, _, _, _ := state.ReleasePolicy("query", "e1", nil, "")
	fmt.Printf("ATTACK foreign-pipeline: release stages given 4 other pipelines (dp-u at ε=1, dp-a, ft-u k=5, ft-a k=3) for a dp-u pipeline's %d items published %d (%d counted foreign); the right pipeline released %d with noise; control (every unrecognised (policy, k) released exactly, the code before): %d exact (a stage at the pipeline's own Shamir k is refused by the pipeline digest: ATTACK parameter-drift)\n",
		artifacts, published, foreign, len(items), len(ctl))
	if len(ctl) != artifacts {
		t.Fatalf("control: the exact fallback released %d of %d", len(ctl), artifacts)
	}
}
