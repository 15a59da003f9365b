package main

import (
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/metrics"
)

// addMetricsFlag adds --metrics to a role's command.
func addMetricsFlag(c *cobra.Command, addr *string) {
	c.Flags().StringVar(addr, "metrics", "", metrics.FlagHelp)
}

// serveMetrics is metrics.ServeRole; serveRole is metrics.RunRole.
var serveMetrics, serveRole = metrics.ServeRole, metrics.RunRole
