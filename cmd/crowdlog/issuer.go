package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/issuer"
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
			if o.PipelineFile != "" {
				p, err := loadPipeline(o.PipelineFile)
				if err != nil {
					return err
				}
				d := p.Defaults()
				o.ApplyPipeline(cmd.Flags(), d.Tokens.Randomness, d.Tokens.Report, d.Epoch.Length, d.Epoch.Grace)
			}
			cfg, err := o.Config()
			if err != nil {
				return err
			}
			log.Info("issuer: kinds held in the keys directory (others are refused)", "kinds", cfg.Kinds)
			if err := cfg.OpenEpochs(); err != nil {
				return err
			}
			nc, err := o.NATS.Connect("crowdlog-issuer", cfg.NATSRole)
			if err != nil {
				return err
			}
			defer nc.Close()
			s, err := issuer.New(nc, cfg.Keys, cfg.Limits, log)
			if err != nil {
				return err
			}
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { s.Register(reg) }, cfg.Runner(s, log), issuerChecks(nc, cfg.Keys)...)
		},
	}
	o.AddFlags(c.Flags())
	addMetricsFlag(c, &metricsAddr)
	return c
}
