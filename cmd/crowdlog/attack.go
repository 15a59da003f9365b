package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/pipelines/attack"
)

func attackCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "attack",
		Short: "Auditor's tools: attack a stolen state directory or aggregator snapshot (docs/attacks.md)",
		Long:  attack.Help,
	}
	c.AddCommand(attackSnapshotCmd(), attackProbeCmd(), attackFrequencyCmd())
	return c
}

func attackSnapshotCmd() *cobra.Command {
	var o attack.SnapshotOptions
	c := &cobra.Command{
		Use:   "snapshot (--state DIR | --kafka ADDR --key FILE) --out FILE",
		Short: "Rebuild the aggregator's pending state from the reports topic and write it as JSON lines",
		Long:  attack.SnapshotHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			return o.Run(cmd.Context(), os.Stdout)
		},
	}
	o.AddFlags(c.Flags())
	return c
}

func attackProbeCmd() *cobra.Command {
	var o attack.ProbeOptions
	c := &cobra.Command{
		Use:   "probe --snapshot FILE [--candidates FILE]... [--log LOG] [--seed DIR|FILE]",
		Short: "Offline probe: compute tags of candidate artifacts and count pending groups they identify",
		Long:  attack.ProbeHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			return o.Run(os.Stdout)
		},
	}
	o.AddFlags(c.Flags())
	return c
}

func attackFrequencyCmd() *cobra.Command {
	var o attack.FrequencyOptions
	c := &cobra.Command{
		Use:   "frequency --snapshot FILE --aux LOG --seed DIR|FILE",
		Short: "Kumar-style frequency matching of pending tags against an auxiliary log",
		Long:  attack.FrequencyHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			return o.Run(os.Stdout)
		},
	}
	o.AddFlags(c.Flags())
	c.MarkFlagRequired("aux")
	c.MarkFlagRequired("seed")
	return c
}
