package aggregator

import (
	"maps"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/pipelinespec"
)

// TestPipelineReports: the per-pipeline counts behind
// crowdlog_aggregator_pipeline_reports_total sum a threshold pipeline's
// admitted and refused reports over apps and epochs (and those sealed for
// no pipeline), start at admitted 0 for every served threshold
// definition, and never carry a DP definition's counts or an unserved
// digest's.
func TestPipelineReports(t *testing.T) {
	thr := pipelinespec.Spec{App: "query", Policy: "ft-u", ShamirK: 5}
	dp := pipelinespec.Spec{App: "query", Policy: "dp-u", ShamirK: 5, DP: &pipelinespec.DP{Epsilon: 1, Delta: 1e-6, D: 1, Users: 10}}
	s := &Service{Announce: []pipelinespec.Spec{thr, dp}}
	td, dd := thr.Digest(), dp.Digest()
	ts := pipelinespec.DigestString(td)
	if got, want := s.PipelineReports(), map[[2]string]int64{{ts, PipelineOutcomeAdmitted}: 0}; !maps.Equal(got, want) {
		t.Fatalf("before any report: %v, want %v", got, want)
	}
	var unserved [32]byte
	unserved[0] = 7
	for _, r := range []struct {
		c      pipelinespec.Context
		reason string
	}{
		{pipelinespec.Context{Pipeline: td, App: "query", Epoch: "e1"}, ""},
		{pipelinespec.Context{Pipeline: td, App: "query", Epoch: "e1"}, ""},
		{pipelinespec.Context{Pipeline: td, App: "query", Epoch: "e2"}, ""},
		{pipelinespec.Context{Pipeline: td, App: "query", Epoch: "e0"}, "late"},
		{pipelinespec.Context{Pipeline: dd, App: "query", Epoch: "e1"}, ""},
		{pipelinespec.Context{Pipeline: dd, App: "query", Epoch: "e1"}, "late"},
		{pipelinespec.Context{Pipeline: unserved, App: "query", Epoch: "e1"}, "pipeline-mismatch"},
		{pipelinespec.Context{App: "query", Epoch: "e1"}, ""},
	} {
		s.countAdmit(r.c, r.reason)
	}
	want := map[[2]string]int64{
		{ts, PipelineOutcomeAdmitted}:     3,
		{ts, "late"}:                      1,
		{"none", PipelineOutcomeAdmitted}: 1,
	}
	if got := s.PipelineReports(); !maps.Equal(got, want) {
		t.Errorf("PipelineReports %v, want %v (no DP or unserved digest)", got, want)
	}
}
