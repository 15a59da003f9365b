package stage

import (
	"fmt"
	"math"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
)

// TestAttackSummaryUnderDP: under a DP policy an analyst reads the
// undecrypted summary next to the noisy release. An exact summary line
// ("3 tags had 7 reports from 4 users") is a count outside the recorded
// (ε, δ). The attack counts the summary lines of the DP release that the
// stage publishes (State.Publish, the path Stage.Run writes) in every
// summary mode; it must find none. Control: ReleasePolicy alone (what was
// written before the summary was shaped) publishes every exact line.
func TestAttackSummaryUnderDP(t *testing.T) {
	pol, err := policy.New(policy.Params{Kind: policy.DPu, Epsilon: math.Ln10, Delta: 1e-4, D: 1, Users: 1000})
	if err != nil {
		t.Fatal(err)
	}
	s := NewState()
	seal := pol.Sealing().String()
	var rows []protocol.SummaryRow
	for i := 1; i <= 40; i++ {
		rows = append(rows, protocol.SummaryRow{Reports: uint64(i), Shares: uint64(1 + i%(pol.ShamirK)), Tags: uint64(i % 3)})
	}
	s.Apply(msg(t, protocol.Decrypted{Kind: protocol.KindSummary, App: "query", Epoch: "e", Policy: seal, K: pol.ShamirK,
		Summary: rows, Partition: 0, Partitions: 1}))
	if _, _, done := s.Apply(msg(t, protocol.Decrypted{Kind: protocol.KindClosed, App: "query", Epoch: "e", Partition: 0, Partitions: 1})); !done {
		t.Fatal("epoch not complete")
	}
	dpLines := func(undec []release.Undecrypted) int {
		n := 0
		for _, u := range undec {
			if u.Policy == string(pol.Kind) && u.K == pol.ShamirK {
				n++
			}
		}
		return n
	}
	_, before, _, err := s.ReleasePolicy("query", "e", pol, "")
	if err != nil {
		t.Fatal(err)
	}
	published := 0
	for _, mode := range []release.SummaryMode{"", release.SummaryExact, release.SummaryCoarse, release.SummaryNone} {
		_, undec, dp, err := s.Publish("query", "e", pol, "", mode)
		if err != nil || !dp {
			t.Fatalf("mode %q: dp %v, %v", mode, dp, err)
		}
		published += dpLines(undec)
	}
	fmt.Printf("ATTACK summary-exact-under-dp: %d exact summary lines of the %s release published over 4 summary modes (control, unshaped: %d of %d lines)\n",
		published, pol.Kind, dpLines(before), len(before))
	if dpLines(before) == 0 {
		t.Fatal("control: the unshaped release has no summary lines of the DP key")
	}
	if published != 0 {
		t.Fatalf("%d summary lines of a DP release were published", published)
	}
}
