package main

import (
	"fmt"

	"github.com/spf13/cobra"

	aggprio3 "github.com/crowdlog/crowdlog/aggregator/prio3"
	"github.com/crowdlog/crowdlog/infra/keydir"
)

// aggregatePrio3Cmd is `crowdlog aggregate-prio3 --role leader|helper`.
func aggregatePrio3Cmd() *cobra.Command {
	o := aggprio3.DefaultOptions()
	var metricsAddr string
	c := &cobra.Command{
		Use:   "aggregate-prio3 --role leader|helper --verify-key FILE --state-dir DIR [--keys DIR] [--kafka ADDR] [--nats URL]",
		Short: "Run a Prio3 aggregator of PDD mode: the leader (uploads, preparation, collection) or the helper",
		Long:  aggprio3.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, log := cmd.Context(), logger()
			if err := o.Validate(); err != nil {
				return usageErrors(err)
			}
			if o.Role == aggprio3.RoleHelper {
				s, nc, err := o.Helper(nil, log)
				if err != nil {
					return usageErrors(err)
				}
				defer nc.Close()
				return serveRole(ctx, metricsAddr, s.Register, s.Run, natsChecks(nc, false)...)
			}
			s, nc, err := o.Leader(nil, log)
			if err != nil {
				return usageErrors(err)
			}
			defer nc.Close()
			return serveRole(ctx, metricsAddr, s.Register, s.Run, append(natsChecks(nc, false), kafkaCheck(ctx, o.Kafka))...)
		},
	}
	o.AddFlags(c.Flags())
	addMetricsFlag(c, &metricsAddr)
	return c
}

// keysPrio3VerifyCmd is `crowdlog keys prio3-verify --out FILE`.
func keysPrio3VerifyCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "prio3-verify --out FILE",
		Short: "Write a Prio3 campaign's verify key (shared by the leader and the helper only), or add an epoch to FILE",
		Long:  keydir.Prio3VerifyHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := keydir.AddVerifyKeyEpoch(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "verify key epoch %d written to %s (mode 0600); give both aggregators a copy, never anyone else\n", e, out)
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "", "verify key file to create or extend")
	_ = c.MarkFlagRequired("out")
	return c
}
