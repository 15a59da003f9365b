package metrics

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestBuildInfo: every registry exposes crowdlog_build_info = 1 with the
// Go version the test binary runs.
func TestBuildInfo(t *testing.T) {
	mfs, err := NewRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "crowdlog_build_info" {
			continue
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["goversion"] != runtime.Version() {
			t.Fatalf("crowdlog_build_info %v = %v", labels, m.GetGauge().GetValue())
		}
		return
	}
	t.Fatal("no crowdlog_build_info")
}

// TestCounterMapFunc: one series per key, labelled, with the map's values,
// and new keys appear at the next scrape.
func TestCounterMapFunc(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := map[string]float64{"late": 2, "duplicate": 5}
	CounterMapFunc(reg, "x_dropped_total", "Dropped, by reason.", "reason", []string{"late", "malformed"}, func() map[string]float64 { return m })
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 3 {
		t.Fatalf("first scrape: %v %v, want one family of 3 series (malformed known, at 0)", mfs, err)
	}
	m["unit-mismatch"] = 1
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			got[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
		}
	}
	if len(got) != 4 || got["late"] != 2 || got["duplicate"] != 5 || got["unit-mismatch"] != 1 || got["malformed"] != 0 {
		t.Fatalf("scraped %v", got)
	}
}
