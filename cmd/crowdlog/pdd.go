package main

import (
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/coordinator"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	pddrelease "github.com/crowdlog/crowdlog/release/pdd"
	prio3release "github.com/crowdlog/crowdlog/release/prio3"
)

func pddCmd() *cobra.Command {
	var cfg runner.PDDConfig
	c := &cobra.Command{
		Use:   "pdd --input LOG [--mode groups|prio3] [--group-size 100] [--delay 2] [--export OUT.tsv]",
		Short: "Run Private Data Donor mode: daily keyword counts over blinded groups, or over two Prio3 aggregators",
		Long:  runner.PDDHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Complete(cmd.Flags()); err != nil {
				return err
			}
			if err := checkLocalServices(cmd, cfg.Kafka, cfg.ClickHouse); err != nil {
				return err
			}
			cfg.Logger = logger()
			if !cfg.NoProgress {
				cfg.Progress = os.Stderr
			}
			sum, err := runner.RunPDD(cmd.Context(), cfg)
			if sum != nil {
				sum.Print(os.Stdout)
			}
			if err == nil && cfg.Export != "" {
				fmt.Printf("  export %s\n", cfg.Export)
			}
			return err
		},
	}
	cfg.AddFlags(c.Flags())
	return c
}

func coordinatorCmd() *cobra.Command {
	o := coordinator.NewOptions()
	var metricsAddr string
	c := &cobra.Command{
		Use:   "coordinator --campaign NAME [--group-size 100] [--delay 2]",
		Short: "Run the PDD coordinator: registration, daily groups, instructions",
		Long:  coordinator.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			cfg, err := o.Config()
			if err != nil {
				return err
			}
			co, nc, stop, err := o.Start(cmd.Context(), cfg, log)
			if err != nil {
				return err
			}
			defer stop()
			if _, err := serveMetrics(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterCoordinator(reg, co) }, coordinatorChecks(cmd.Context(), nc, cfg.Brokers)...); err != nil {
				return err
			}
			return co.Serve(cmd.Context(), o.WallClock)
		},
	}
	o.AddFlags(c.Flags())
	addMetricsFlag(c, &metricsAddr)
	c.AddCommand(coordinatorAdvanceCmd())
	return c
}

func coordinatorAdvanceCmd() *cobra.Command {
	o := coordinator.NewAdvanceOptions()
	c := &cobra.Command{
		Use:     "advance --day YYYY-MM-DD --key operator-sign.key",
		Short:   "Start a PDD campaign day (signed with the operator's credential)",
		Long:    coordinator.AdvanceHelp,
		Example: "  crowdlog coordinator advance --day 2006-03-02 --key keys/operator-sign.key",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return printLine(o.Advance(cmd.Context())) },
	}
	o.AddFlags(c.Flags())
	_ = c.MarkFlagRequired("day")
	return c
}

func releasePDDCmd() *cobra.Command {
	o := pddrelease.DefaultOptions()
	p := prio3release.DefaultOptions()
	var metricsAddr string
	c := &cobra.Command{
		Use:   "release-pdd [--mode groups|prio3] [--kafka ADDR] [--clickhouse ADDR]",
		Short: "Run the PDD release stage: daily keyword counts and confidence into ClickHouse",
		Long:  pddrelease.Help + "\n\n" + prio3release.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := p.Validate(); err != nil {
				return err
			}
			if err := requireWriterLogin(cmd, "crowdlog release-pdd"); err != nil {
				return err
			}
			if p.Mode == prio3release.ModePrio3 {
				st, w, err := p.New(cmd.Context(), o, logger())
				if err != nil {
					return err
				}
				defer w.Close()
				return serveRole(cmd.Context(), metricsAddr, st.Register, st.Run, kafkaCheck(cmd.Context(), o.Kafka), clickhouseCheck(w.Ping))
			}
			st, w, err := o.New(cmd.Context(), logger())
			if err != nil {
				return err
			}
			defer w.Close()
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterPDDRelease(reg, st) }, st.Run, kafkaCheck(cmd.Context(), o.Kafka), clickhouseCheck(w.Ping))
		},
	}
	o.AddFlags(c.Flags())
	p.AddFlags(c.Flags())
	addMetricsFlag(c, &metricsAddr)
	return c
}
