// Package hist is the part of infra/metrics a client links: the latency
// histograms (seconds) of the crowdlog_*_seconds metrics and their
// buckets, built on the Prometheus client library alone. It serves
// nothing: the roles register the client's histograms with
// infra/metrics.Collect and serve them (infra/metrics.Serve), while an app
// that embeds the client may register them with its own registry or
// ignore them.
package hist

import "github.com/prometheus/client_golang/prometheus"

// Latency buckets (seconds) of the crowdlog_*_seconds histograms.
var (
	// RequestBuckets: a request or write, 1 ms to ≈ 33 s (round trips,
	// acknowledgements, a batch's apply, a release's write).
	RequestBuckets = prometheus.ExponentialBuckets(0.001, 2, 16)
	// PoolBuckets: a relay's pool (held until P messages or T, 1 s by
	// default, plus the forward), 5 ms to ≈ 82 s.
	PoolBuckets = prometheus.ExponentialBuckets(0.005, 2, 15)
	// WaitBuckets: a report's wait for its group's k-th report, 0.1 s to a
	// week (epochs last hours to weeks).
	WaitBuckets = []float64{0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400}
)

// NewHistogram returns an unregistered histogram named name (seconds,
// buckets as above, labels as constant labels; nil: none) for a client or
// service to observe into; whoever serves metrics registers it
// (infra/metrics.Collect tolerates registering it twice).
func NewHistogram(name, help string, labels prometheus.Labels, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: buckets})
}
