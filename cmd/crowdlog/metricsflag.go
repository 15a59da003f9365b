package main

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/metrics"
	"github.com/crowdlog/crowdlog/pipelines/runner"
)

// addMetricsFlag adds --metrics to a role's command.
func addMetricsFlag(c *cobra.Command, addr *string) {
	c.Flags().StringVar(addr, "metrics", "", metrics.FlagHelp)
}

// addExactCountsFlag adds --metrics-exact-counts to a role whose metrics
// include runner.ExactCountMetrics.
func addExactCountsFlag(c *cobra.Command, optIn *bool) {
	c.Flags().BoolVar(optIn, metrics.ExactCountsFlag, false, metrics.ExactCountsHelp)
}

// exactCounts says whether role exports runner.ExactCountMetrics: with
// optIn, or when it serves threshold pipelines only; logged when they are
// withheld or exported although a pipeline may be DP.
func exactCounts(role string, optIn, thresholdOnly bool) bool {
	switch {
	case thresholdOnly:
	case optIn:
		slog.Warn(role+": --"+metrics.ExactCountsFlag+": /metrics exports exact counts that a DP release withholds; only the operator may read it", "metrics", runner.ExactCountMetrics)
	default:
		slog.Info(role+": /metrics withholds the exact counts a DP release withholds (a served pipeline is or may be DP); --"+metrics.ExactCountsFlag+" exports them", "metrics", runner.ExactCountMetrics)
	}
	return optIn || thresholdOnly
}

// serveMetrics is metrics.ServeRole; serveRole is metrics.RunRole.
var serveMetrics, serveRole = metrics.ServeRole, metrics.RunRole
