package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/crowdlog/crowdlog/pipelines/runner"
)

func ingestCmd() *cobra.Command {
	var o runner.IngestOptions
	c := &cobra.Command{
		Use:   "ingest --input LOG --keys DIR [--nats URL]",
		Short: "Replay a log as clients: mine, seal, onion-wrap and publish reports to relay a",
		Long:  runner.IngestHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(cmd.Flags()); err != nil {
				return err
			}
			o.Logger = logger()
			reg, err := serveMetrics(cmd.Context(), o.Metrics, nil)
			if err != nil {
				return err
			}
			o.Registerer = reg
			if !o.NoProgress && term.IsTerminal(int(os.Stderr.Fd())) {
				o.Progress = os.Stderr
			}
			sum, err := runner.Ingest(cmd.Context(), o.IngestConfig)
			if err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "ingest: %d clients, %d reports published\n", sum.Users, sum.Reports)
				if sum.Downstream != nil {
					fmt.Fprintf(cmd.OutOrStdout(), "  downstream (pipeline and epoch, all clients, so far; reports in the relays' pools come later): %s\n", sum.Downstream)
				}
			}
			return err
		},
	}
	o.AddFlags(c.Flags())
	c.MarkFlagRequired("input")
	return c
}
