package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/pipelines/simulate"
)

func simulateCmd() *cobra.Command {
	var o simulate.Options
	var out simulate.Files
	c := &cobra.Command{
		Use:   "simulate --input LOG [--app query] [--out DIR]",
		Short: "CrowdLogging §4: what each policy would release as k grows (CSV and plots)",
		Long:  simulate.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			r, err := simulate.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			return r.Report(os.Stdout, out)
		},
	}
	o.AddFlags(c.Flags())
	out.AddFlags(c.Flags(), "output directory for the CSV and plots")
	c.MarkFlagRequired("input")
	c.AddCommand(zipfLogCmd())
	c.AddCommand(simulatePDDCmd())
	return c
}

// simulatePDDCmd is `crowdlog simulate pdd`: the Private Data Donor §4
// simulation with crowdlog's dropout recovery (pipelines/simulate.RunPDD,
// docs/pdd-simulation.md).
func simulatePDDCmd() *cobra.Command {
	o := simulate.DefaultPDDOptions()
	var out simulate.Files
	var list string
	c := &cobra.Command{
		Use:   "pdd [--users 100000] [--days 100] [--out DIR]",
		Short: "PDD §4: data lost by group-blinded daily aggregation, per group size and delay, with and without recovery",
		Long:  simulate.PDDHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			var err error
			if o.Keywords, err = keywords.Load(list); err != nil {
				return err
			}
			r, err := simulate.RunPDD(cmd.Context(), o)
			if err != nil {
				return err
			}
			return r.Report(os.Stdout, out, o.Input)
		},
	}
	o.AddFlags(c.Flags(), &list)
	out.AddFlags(c.Flags(), "output directory for pdd.csv and the plots")
	return c
}

func zipfLogCmd() *cobra.Command {
	var o simulate.ZipfLogOptions
	var out string
	c := &cobra.Command{
		Use:   "zipf-log --out FILE [--users N] [--seed S]",
		Short: "write a synthetic Zipf search log (AOL TSV, gzipped) made from public words only",
		Long:  simulate.ZipfLogHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := simulate.WriteZipfLogFile(out, o); err != nil {
				return err
			}
			fmt.Println("wrote", out)
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "", "output file (gzipped AOL TSV)")
	o.AddFlags(c.Flags())
	c.MarkFlagRequired("out")
	return c
}
