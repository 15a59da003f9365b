package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
)

func issuerCmd() *cobra.Command {
	o := issuer.NewOptions()
	var metricsAddr string
	c := &cobra.Command{
		Use:   "issuer [--nats URL] [--keys DIR] [--role aggregator|randomness] [--randomness-tokens N] [--report-tokens D]",
		Short: "Issue Privacy Pass tokens and ARC credentials to enrolled client identities",
		Long:  issuer.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			if err := withPipelineDefaults(o.PipelineFile, func(d pipeline.Pipeline) {
				o.ApplyPipeline(cmd.Flags(), d.Tokens.Randomness, d.Tokens.Report, d.Epoch.Length, d.Epoch.Grace)
			}); err != nil {
				return err
			}
			cfg, err := o.Config()
			if err != nil {
				return err
			}
			s, nc, stop, err := o.Start(cfg, log)
			if err != nil {
				return err
			}
			defer stop()
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { s.Register(reg) }, cfg.Runner(s, log), issuerChecks(nc, cfg.Keys)...)
		},
	}
	o.AddFlags(c.Flags())
	addMetricsFlag(c, &metricsAddr)
	return c
}
