package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/aggregator/audit"
	"github.com/crowdlog/crowdlog/aggregator/vectors"
	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/pipelines/runner"
)

func aggregateCmd() *cobra.Command {
	o := aggregator.DefaultOptions()
	var metricsAddr string
	var exactOptIn bool
	c := &cobra.Command{
		Use:   "aggregate --key FILE [--kafka ADDR[,ADDR...]] [--keys DIR] [--pipeline FILE ...]",
		Short: "Run the threshold aggregator on Kafka topic reports",
		Long:  aggregator.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := runner.NewAggregator(o, logger())
			if err != nil {
				return usageErrors(err)
			}
			threshold, err := runner.ExactCounts(false, o.PipelineFiles)
			if err != nil {
				return usageErrors(err)
			}
			exact := exactCounts("aggregate", exactOptIn, threshold)
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterAggregator(reg, s, exact) }, s.Run, kafkaCheck(cmd.Context(), o.Kafka))
		},
	}
	o.AddFlags(c.Flags())
	respell(c, map[string]string{"token-keys": "keys"})
	addMetricsFlag(c, &metricsAddr)
	addExactCountsFlag(c, &exactOptIn)
	c.AddCommand(epochControlCmd("open-epoch", "open", aggregator.OpenEpoch), epochControlCmd("close-epoch", "close", aggregator.CloseEpoch), auditCmd())
	return c
}

func aggregateVectorsCmd() *cobra.Command {
	o := vectors.DefaultOptions()
	var metricsAddr string
	c := &cobra.Command{
		Use:   "aggregate-vectors --key FILE [--kafka ADDR] [--nats URL]",
		Short: "Run the PDD aggregator: blinded group sums and dropout recovery",
		Long:  vectors.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, nc, err := o.Service(nil, runner.VectorsRecoverer, logger())
			if err != nil {
				return err
			}
			defer nc.Close()
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterVectors(reg, s) }, s.Run, vectorsChecks(cmd.Context(), nc, o.Kafka)...)
		},
	}
	o.AddFlags(c.Flags())
	addMetricsFlag(c, &metricsAddr)
	return c
}

// epochControlCmd is `crowdlog aggregate open-epoch` or `close-epoch`
// (verb "open" or "close"), which write records with write.
func epochControlCmd(name, verb string, write func(context.Context, []string, *aggregator.ControlSigner, string, string) error) *cobra.Command {
	o := aggregator.DefaultControlOptions()
	c := &cobra.Command{
		Use:   name + " --app APP --epoch EPOCH --control-key FILE --pipeline FILE [--kafka ADDR[,ADDR...]]",
		Short: aggregator.ControlShort[verb],
		Long:  aggregator.ControlHelp[verb],
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			return usageErrors(o.Write(cmd.Context(), write, runner.PipelineDigest))
		},
	}
	o.AddFlags(c.Flags(), verb)
	return c
}

// usageErrors makes a config.UsageError in err exit with status 2.
func usageErrors(err error) error {
	if errors.As(err, new(config.UsageError)) {
		return usageError(err)
	}
	return err
}

// auditCmd is `crowdlog aggregate audit`: aggregator/audit from the shell.
func auditCmd() *cobra.Command {
	o := audit.DefaultOptions()
	c := &cobra.Command{
		Use:   "audit --key FILE --app APP --epoch EPOCH [--kafka ADDR[,ADDR...]] [--control-pub FILE]",
		Short: "Reconcile topic reports with topic decrypted, report id by report id (counts only)",
		Long:  audit.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			res, err := o.Run(cmd.Context())
			if err != nil {
				return usageErrors(err)
			}
			fmt.Fprint(cmd.OutOrStdout(), res.String())
			if late, missing := res.Lost(); late > 0 || missing > 0 || res.Orphans > 0 {
				return exitCode{3, fmt.Errorf("audit: %d late, %d missing, %d orphan reports (see the table above)", late, missing, res.Orphans)}
			}
			return nil
		},
	}
	o.AddFlags(c.Flags())
	return c
}
