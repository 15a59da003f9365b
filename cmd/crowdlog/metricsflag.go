package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/metrics"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/ready"
)

const metricsHelp = "serve Prometheus /metrics, /healthz and /readyz on this address (e.g. :9100); empty = off"

// addMetricsFlag adds --metrics to a role's command.
func addMetricsFlag(c *cobra.Command, addr *string) {
	c.Flags().StringVar(addr, "metrics", "", metricsHelp)
}

// serveMetrics registers a role's metrics and serves them when addr is set,
// with /readyz answering from checks (readiness.go; none = always ready),
// run every ready.Interval until ctx ends.
func serveMetrics(ctx context.Context, addr string, register func(reg prometheus.Registerer), checks ...ready.Check) (*prometheus.Registry, error) {
	reg := metrics.NewRegistry()
	// every role: requests a responder refused to answer (reply subject
	// not a requester inbox); 0 in a role that answers none
	if err := natsconn.RegisterMetrics(reg); err != nil {
		return nil, err
	}
	if register != nil {
		register(reg)
	}
	if addr == "" {
		return reg, nil
	}
	rc := ready.New(slog.Default(), checks...)
	rc.Register(reg)
	rc.Start(ctx, 0)
	a, err := metrics.Serve(ctx, addr, reg, rc.Ready)
	if err != nil {
		return nil, err
	}
	slog.Info("metrics", "url", "http://"+a.String()+"/metrics")
	return reg, nil
}

// serveRole serves a role's metrics and readiness checks (when addr is
// set) and runs it until ctx ends.
func serveRole(ctx context.Context, addr string, register func(reg prometheus.Registerer), run func(context.Context) error, checks ...ready.Check) error {
	if _, err := serveMetrics(ctx, addr, register, checks...); err != nil {
		return err
	}
	return run(ctx)
}
