package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/metrics"
)

const metricsHelp = "serve Prometheus /metrics, /healthz and /readyz on this address (e.g. :9100); empty = off"

// addMetricsFlag adds --metrics to a role's command.
func addMetricsFlag(c *cobra.Command, addr *string) {
	c.Flags().StringVar(addr, "metrics", "", metricsHelp)
}

// serveMetrics registers a role's metrics and serves them when addr is set.
func serveMetrics(ctx context.Context, addr string, register func(reg prometheus.Registerer)) (*prometheus.Registry, error) {
	reg := metrics.NewRegistry()
	if register != nil {
		register(reg)
	}
	if addr == "" {
		return reg, nil
	}
	a, err := metrics.Serve(ctx, addr, reg, nil)
	if err != nil {
		return nil, err
	}
	slog.Info("metrics", "url", "http://"+a.String()+"/metrics")
	return reg, nil
}

// serveRole serves a role's metrics (when addr is set) and runs it until
// ctx ends.
func serveRole(ctx context.Context, addr string, register func(reg prometheus.Registerer), run func(context.Context) error) error {
	if _, err := serveMetrics(ctx, addr, register); err != nil {
		return err
	}
	return run(ctx)
}
