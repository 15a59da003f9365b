package attack

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/release/policy"
	"github.com/crowdlog/crowdlog/release/stage"
)

// TestAttackParameterDrift: parameters that drift between roles, where
// (policy, k) cannot tell them apart. The clients of a dp-u pipeline (ε =
// ln 10, d = 1, U = 1,000) seal 40 artifacts, 20–59 users each, for FT_u
// at the pipeline's Shamir k with the pipeline's digest; a real aggregator
// partition decrypts them and the release stage's state reads its output.
// Release stages given another definition at the same Shamir k — dp-u at
// ε = 1, dp-u at U = 2,000, ft-u (exact counts) — each compute their own
// digest and must publish none of the items; the stage given the right
// file releases them with noise; an aggregator given another definition
// drops every report (pipeline-mismatch) and names both digests. Control:
// a stage that matches items by (policy, k) alone (the code before the
// digest) publishes them — under ft-u with exact counts.
func TestAttackParameterDrift(t *testing.T) {
	const app, epoch, artifacts = "query", "e1", 40
	mk := func(p policy.Params) (*policy.Policy, [32]byte) {
		t.Helper()
		pol, err := policy.New(p)
		if err != nil {
			t.Fatal(err)
		}
		d, err := pipeline.Digest(app, apps.Options{}, pol)
		if err != nil {
			t.Fatal(err)
		}
		return pol, d
	}
	right, rightD := mk(policy.Params{Kind: policy.DPu, Epsilon: math.Ln10, D: 1, Users: 1000})
	ks := right.ShamirK
	wrong := []struct {
		name string
		p    policy.Params
	}{
		{"dp-u ε=1", policy.Params{Kind: policy.DPu, Epsilon: 1, D: 1, Users: 1000, ShamirK: ks}},
		{"dp-u U=2000", policy.Params{Kind: policy.DPu, Epsilon: math.Ln10, D: 1, Users: 2000, ShamirK: ks}},
		{"ft-u k=shamir_k", policy.Params{Kind: policy.FTu, K: ks}},
	}

	// the clients: every report sealed with the right pipeline's digest
	var reports []*star.Report
	truth := map[string]uint64{}
	for i := range artifacts {
		q := fmt.Sprintf("made up drift %02d", i)
		s, err := star.DeriveSealingIn(star.LocalOmega(app, epoch, q), star.Context{App: app, Epoch: epoch,
			Policy: right.Sealing(), K: ks, Pipeline: rightD})
		if err != nil {
			t.Fatal(err)
		}
		for range 20 + i {
			u, _ := star.NewUserSecret()
			r, err := s.Seal(&u, q, q)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := r.MarshalBinary()
			if r, err = star.ParseReport(b); err != nil {
				t.Fatal(err)
			}
			reports = append(reports, r)
		}
		truth[q] = uint64(20 + i)
	}
	aggregate := func(p *aggregator.Partition) *stage.State {
		st := stage.NewState()
		for _, r := range reports {
			for _, d := range p.ApplyReport(r) {
				b, _ := json.Marshal(d)
				st.Apply(b)
			}
		}
		b, _ := json.Marshal(protocol.Decrypted{Kind: protocol.KindClosed, App: app, Epoch: epoch, Partitions: 1})
		if _, _, done := st.Apply(b); !done {
			t.Fatal("epoch not complete")
		}
		return st
	}
	state := aggregate(aggregator.NewPartition(0, 1, nil))

	published, foreign, ctlPublished, ctlExact := 0, 0, 0, 0
	for _, w := range wrong {
		pol, d := mk(w.p)
		if d == rightD {
			t.Fatalf("%s: the same digest as the pipeline's", w.name)
		}
		items, _, _, err := state.ReleasePolicy(app, epoch, pol, stage.DigestHex(d))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := state.Foreign(app, epoch, pol, stage.DigestHex(d))
		published += len(items)
		foreign += n
		if len(items) != 0 || n != artifacts {
			t.Errorf("stage for %s published %d of the dp-u pipeline's items (%d counted foreign)", w.name, len(items), n)
		}
		// control: matched by (policy, k) alone, as before the digest
		ctl, _, _, err := state.ReleasePolicy(app, epoch, pol, stage.DigestHex(rightD))
		if err != nil {
			t.Fatal(err)
		}
		ctlPublished += len(ctl)
		if !pol.Kind.IsDP() {
			for _, it := range ctl {
				if it.Users == truth[it.Item] {
					ctlExact++
				}
			}
		}
	}
	items, _, dp, err := state.ReleasePolicy(app, epoch, right, stage.DigestHex(rightD))
	if err != nil || !dp || len(items) == 0 {
		t.Fatalf("the right pipeline released %d items (dp %v, err %v)", len(items), dp, err)
	}

	// an aggregator given another definition refuses the reports
	_, ftD := mk(wrong[2].p)
	agg := aggregator.NewPartition(0, 1, nil)
	agg.Pipelines = map[[32]byte]bool{ftD: true}
	var named [][32]byte
	agg.OnPipelineMismatch = func(got [32]byte) { named = append(named, got) }
	refused := aggregate(agg)
	aggItems, _ := refused.Release(app, epoch)
	if len(aggItems) != 0 || agg.Stats.Dropped["pipeline-mismatch"] != int64(len(reports)) || len(named) == 0 || named[0] != rightD {
		t.Errorf("aggregator for another definition: %d items released, %d of %d reports dropped pipeline-mismatch",
			len(aggItems), agg.Stats.Dropped["pipeline-mismatch"], len(reports))
	}

	fmt.Printf("ATTACK parameter-drift: release stages given 3 other definitions at the same Shamir k=%d (dp-u at ε=1, dp-u at U=2000, ft-u) for a dp-u pipeline's %d items published %d (%d counted foreign, digest %s… ≠ theirs); the right pipeline released %d with noise; an aggregator given another definition dropped %d of %d reports (pipeline-mismatch); control (items matched by policy and k alone, the code before): %d published, %d of them with exact user counts\n",
		ks, artifacts, published, foreign, pipeline.DigestString(rightD)[:12], len(items),
		agg.Stats.Dropped["pipeline-mismatch"], len(reports), ctlPublished, ctlExact)
	if ctlPublished == 0 || ctlExact != artifacts {
		t.Fatalf("control: matching by (policy, k) published %d items, %d exact; want the ft-u stage to publish all %d exactly", ctlPublished, ctlExact, artifacts)
	}
}
