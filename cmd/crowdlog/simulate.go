package main

import (
	"fmt"
	"os"
	"time"

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
			csvPath, plots, err := simulate.WriteFiles(out.Dir, r.App+".csv", out.Format, r)
			if err != nil {
				return err
			}
			dpCSV, dpPlots, err := simulate.WriteFiles(out.Dir, r.App+"-dp.csv", out.Format, r.DP)
			if err != nil {
				return err
			}
			if err := r.WriteSummary(os.Stdout); err != nil {
				return err
			}
			fmt.Println()
			if err := r.DP.WriteSummary(os.Stdout); err != nil {
				return err
			}
			fmt.Println("wrote", csvPath, plots, dpCSV, dpPlots)
			return nil
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
			kw, err := keywords.Load(list)
			if err != nil {
				return err
			}
			o.Keywords = kw
			r, err := simulate.RunPDD(cmd.Context(), o)
			if err != nil {
				return err
			}
			csvPath, plots, err := simulate.WriteFiles(out.Dir, "pdd.csv", out.Format, r)
			if err != nil {
				return err
			}
			if err := r.WriteTable(os.Stdout); err != nil {
				return err
			}
			fmt.Printf("\nsearch content: %d query instances (%d distinct) of %s; took %s (load %s, draw %s, evaluate %s)\n",
				r.Instances, r.Queries, o.Input, (r.LoadTime + r.GenerateTime + r.EvaluateTime).Round(time.Millisecond),
				r.LoadTime.Round(time.Millisecond), r.GenerateTime.Round(time.Millisecond), r.EvaluateTime.Round(time.Millisecond))
			fmt.Println("wrote", csvPath, plots)
			return nil
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
			f, err := os.Create(out)
			if err != nil {
				return fmt.Errorf("zipf-log: %w", err)
			}
			if err := simulate.WriteZipfLog(f, o); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("zipf-log: %w", err)
			}
			fmt.Println("wrote", out)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&out, "out", "", "output file (gzipped AOL TSV)")
	o.AddFlags(f)
	c.MarkFlagRequired("out")
	return c
}
