// Package metrics serves a service's Prometheus metrics, health and
// readiness over HTTP: GET /metrics (Prometheus text format), /healthz (200
// while the process runs: liveness) and /readyz (200 "ok" while the service
// is ready, else 503 with one line per failing check; see infra/ready).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/crowdlog/crowdlog/infra/metrics/hist"
)

// NewRegistry returns a registry with the Go runtime and process
// collectors and crowdlog_build_info (BuildInfo).
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	version, revision, goVersion := BuildInfo()
	GaugeFunc(reg, "crowdlog_build_info", "Always 1; the labels say which build runs (module version, VCS revision, Go version).",
		prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion}, func() float64 { return 1 })
	return reg
}

// BuildInfo returns the main module's version, the VCS revision (12 hex
// digits, "+modified" when the tree was dirty; "" when unknown) and the
// Go version of this binary (runtime/debug.ReadBuildInfo; BuildInfoFrom);
// "(devel)" and "" when the build carries no information.
func BuildInfo() (version, revision, goVersion string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)", "", runtime.Version()
	}
	return BuildInfoFrom(bi)
}

// BuildInfoFrom is BuildInfo of bi: bi.Main.Version ("(devel)" when
// empty), the settings vcs.revision (cut to 12 hex digits) and
// vcs.modified ("+modified" appended when "true"), and bi.GoVersion.
// `go build` in a git checkout records both settings (-buildvcs, on by
// default); `go run`, `go test` and -buildvcs=false record neither.
func BuildInfoFrom(bi *debug.BuildInfo) (version, revision, goVersion string) {
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if modified && revision != "" {
		revision += "+modified"
	}
	version = bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	return version, revision, bi.GoVersion
}

// Serve listens on ListenAddr(addr) (":9100" binds 127.0.0.1:9100;
// "0.0.0.0:9100" every interface) and serves until ctx ends. ready decides /readyz (nil = always ready): nil answers 200 "ok",
// an error 503 with its message (one line per failing check, e.g.
// ready.Checker.Ready). It returns the bound address; errors when addr
// cannot be bound.
func Serve(ctx context.Context, addr string, reg *prometheus.Registry, ready func(context.Context) error) (net.Addr, error) {
	ln, err := net.Listen("tcp", ListenAddr(addr))
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w (give a free HOST:PORT to --metrics)", ListenAddr(addr), err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			if err := ready(r.Context()); err != nil {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.Header().Set("Cache-Control", "no-store")
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, err.Error())
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("metrics server", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	return ln.Addr(), nil
}

// CounterMapFunc registers a collector that, at each scrape, exposes one
// counter name{label="key"} per key of fn's map (values ≥ 0, never
// decreasing per key, as counters must), and 0 for each of known that the
// map lacks, so the known series exist from the start: a counter whose
// label values may also be learnt at run time (e.g. drop reasons).
func CounterMapFunc(reg prometheus.Registerer, name, help, label string, known []string, fn func() map[string]float64) {
	reg.MustRegister(&mapCollector{desc: prometheus.NewDesc(name, help, []string{label}, nil), typ: prometheus.CounterValue, known: known, fn: fn})
}

// GaugeMapFunc registers a collector that, at each scrape, exposes one
// gauge name{label="key"} per key of fn's map (e.g. a consumer's lag per
// partition: keys come and go with the partitions it owns).
func GaugeMapFunc(reg prometheus.Registerer, name, help, label string, fn func() map[string]float64) {
	reg.MustRegister(&mapCollector{desc: prometheus.NewDesc(name, help, []string{label}, nil), typ: prometheus.GaugeValue, fn: fn})
}

type mapCollector struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	known []string
	fn    func() map[string]float64
}

func (c *mapCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *mapCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.fn()
	for _, k := range c.known {
		if _, ok := m[k]; !ok {
			ch <- prometheus.MustNewConstMetric(c.desc, c.typ, 0, k)
		}
	}
	for k, v := range m {
		ch <- prometheus.MustNewConstMetric(c.desc, c.typ, v, k)
	}
}

// CounterFunc registers a counter named name whose value is read from fn at
// scrape time (fn must be monotonic, e.g. an atomic counter's Load).
func CounterFunc(reg prometheus.Registerer, name, help string, labels prometheus.Labels, fn func() float64) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, fn))
}

// GaugeFunc registers a gauge read from fn at scrape time.
func GaugeFunc(reg prometheus.Registerer, name, help string, labels prometheus.Labels, fn func() float64) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, fn))
}

// Latency buckets (seconds) of the crowdlog_*_seconds histograms; they
// are hist's (infra/metrics/hist, the part a client links).
var (
	// RequestBuckets is hist.RequestBuckets: 1 ms to ≈ 33 s.
	RequestBuckets = hist.RequestBuckets
	// PoolBuckets is hist.PoolBuckets: 5 ms to ≈ 82 s.
	PoolBuckets = hist.PoolBuckets
	// WaitBuckets is hist.WaitBuckets: 0.1 s to a week.
	WaitBuckets = hist.WaitBuckets
)

// NewHistogram is hist.NewHistogram: an unregistered histogram (seconds,
// buckets as above) for a service to observe into; its Register function
// registers it with Collect.
func NewHistogram(name, help string, labels prometheus.Labels, buckets []float64) prometheus.Histogram {
	return hist.NewHistogram(name, help, labels, buckets)
}

// Collect registers collectors, tolerating one already registered with
// reg (a process-wide histogram such as the OPRF client's, registered by
// each role that runs a client); other errors panic as MustRegister does.
func Collect(reg prometheus.Registerer, cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(err)
			}
		}
	}
}
