package metrics

import (
	"context"
	"net"
	"runtime"
	"runtime/debug"
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

// TestGaugeMapFunc: one gauge per key, and a key that leaves the map
// (a partition handed to another member) leaves the scrape.
func TestGaugeMapFunc(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := map[string]float64{"0": 3, "1": 0}
	GaugeMapFunc(reg, "x_consumer_lag", "Lag.", "partition", func() map[string]float64 { return m })
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 2 || mfs[0].GetType().String() != "GAUGE" {
		t.Fatalf("scrape: %v %v, want one gauge family of 2 series", mfs, err)
	}
	delete(m, "0")
	if mfs, _ := reg.Gather(); len(mfs[0].GetMetric()) != 1 || mfs[0].GetMetric()[0].GetLabel()[0].GetValue() != "1" {
		t.Fatalf("after the partition left: %v", mfs)
	}
}

// TestCollectTwice: a process-wide collector registered twice with one
// registry is kept once, without a panic.
func TestCollectTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := NewHistogram("x_seconds", "Latency.", nil, RequestBuckets)
	Collect(reg, h)
	Collect(reg, h)
	h.Observe(0.002)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
		t.Fatalf("scrape: %v %v", mfs, err)
	}
}

// TestServeLoopbackByDefault: an address without a host (":0", as
// --metrics :9100) binds loopback only; an explicit 0.0.0.0 binds every
// interface (what a scraper on another host needs).
func TestServeLoopbackByDefault(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for addr, loopback := range map[string]bool{":0": true, "127.0.0.1:0": true, "0.0.0.0:0": false} {
		a, err := Serve(ctx, addr, NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ip := a.(*net.TCPAddr).IP
		if ip.IsLoopback() != loopback || (!loopback && !ip.IsUnspecified()) {
			t.Errorf("--metrics %s bound %s; want loopback %v", addr, a, loopback)
		}
	}
}

// TestBuildInfoFrom: the module version, a revision cut to 12 hex digits
// with "+modified" for a dirty tree, and "(devel)" for a build without a
// version.
func TestBuildInfoFrom(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	for _, c := range []struct {
		bi                *debug.BuildInfo
		version, revision string
	}{
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3", ""},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}}, "(devel)", "0123456789ab"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}}, "(devel)", "0123456789ab+modified"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}}, "(devel)", ""},
	} {
		v, r, g := BuildInfoFrom(c.bi)
		if v != c.version || r != c.revision || g != "go1.26.8" {
			t.Errorf("BuildInfoFrom(%+v) = %q, %q, %q; want %q, %q", c.bi, v, r, g, c.version, c.revision)
		}
	}
}
