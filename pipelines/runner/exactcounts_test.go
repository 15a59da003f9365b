package runner

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crowdlog/crowdlog/release/stage"
)

// TestExactCountsRelease: the release stage's registry has the decrypted
// topic's lag and the foreign items only with exact set; ExactCounts
// exports them for threshold pipelines and the opt-in only.
func TestExactCountsRelease(t *testing.T) {
	for _, exact := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		RegisterRelease(reg, &stage.Stage{}, exact)
		descs := make(chan *prometheus.Desc, 64)
		go func() { reg.Describe(descs); close(descs) }()
		names := ""
		for d := range descs {
			names += d.String()
		}
		for _, name := range []string{"crowdlog_release_consumer_lag", "crowdlog_release_foreign_items_total"} {
			if !slices.Contains(ExactCountMetrics, name) {
				t.Fatalf("%s is not in ExactCountMetrics", name)
			}
			if got := strings.Contains(names, `"`+name+`"`); got != exact {
				t.Errorf("exact %v: %s registered %v", exact, name, got)
			}
		}
	}
	for _, c := range []struct {
		optIn bool
		files []string
		want  bool
	}{
		{false, nil, false}, // every definition: DP ones included
		{true, nil, true},
		{false, []string{"../../testdata/pipelines/query-dpu.yaml"}, false},
		{false, []string{"../../testdata/pipelines/query-ftu-k5.yaml"}, true},
		{false, []string{"../../testdata/pipelines/query-ftu-k5.yaml", "../../testdata/pipelines/query-dpu.yaml"}, false},
		{true, []string{"../../testdata/pipelines/query-dpu.yaml"}, true},
	} {
		if got, err := ExactCounts(c.optIn, c.files); err != nil || got != c.want {
			t.Errorf("ExactCounts(%v, %v) = %v, %v; want %v", c.optIn, c.files, got, err, c.want)
		}
	}
}
