package main

import (
	"os"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	rndoptions "github.com/crowdlog/crowdlog/randomness/options"
	"github.com/crowdlog/crowdlog/relays"
)

const (
	defaultNATS  = "nats://127.0.0.1:4222"
	defaultKafka = "127.0.0.1:9092"
	defaultCH    = "127.0.0.1:9000"
)

func randomnessCmd() *cobra.Command {
	o := rndoptions.NewOptions()
	var metricsAddr string
	c := &cobra.Command{
		Use:   "randomness [--nats URL] [--keys DIR] [--epoch-length 24h] [--key-grace 1h]",
		Short: "Serve OPRF randomness (RFC 9497, ristretto255) over NATS request/reply",
		Long:  rndoptions.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			if err := withPipelineDefaults(o.PipelineFile, func(d pipeline.Pipeline) { o.ApplyPipelineEpoch(cmd.Flags(), d.Epoch.Length, d.Epoch.Grace) }); err != nil {
				return err
			}
			cfg, err := o.Config()
			if err != nil {
				return err
			}
			s, nc, stop, err := o.Start(cmd.Context(), cfg, log)
			if err != nil {
				return err
			}
			defer stop()
			if !cfg.RequireTokens {
				log.Warn("randomness: tokens not required (--require-tokens off): any client may probe unlimited candidates")
			}
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterRandomness(reg, s) }, s.Run, randomnessChecks(nc, cfg.Keys, cfg.RequireTokens)...)
		},
	}
	o.AddFlags(c.Flags())
	addMetricsFlag(c, &metricsAddr)
	c.AddCommand(randomnessOpenCmd(), randomnessCloseCmd())
	return c
}

func relayCmd() *cobra.Command {
	o := relays.NewOptions()
	var metricsAddr string
	c := &cobra.Command{
		Use:   "relay --name a|b --key FILE [--nats URL[,URL...]] [--kafka ADDR[,ADDR...]]",
		Short: "Run a relay: peel one onion layer, batch, shuffle, forward",
		Long:  relays.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			cfg, err := o.Config()
			if err != nil {
				return err
			}
			setGCPercent(o.GCPercent)
			r, nc, stop, err := o.Start(cmd.Context(), cfg, log)
			if err != nil {
				return err
			}
			defer stop()
			checks := append(relayChecks(cmd.Context(), nc, cfg), relayWriteChecks(r, cfg)...)
			if r.Registerer, err = serveMetrics(cmd.Context(), metricsAddr, nil, checks...); err != nil {
				return err
			}
			return r.Run(cmd.Context())
		},
	}
	o.AddFlags(c.Flags())
	addMetricsFlag(c, &metricsAddr)
	return c
}

func releaseCmd() *cobra.Command {
	o := runner.DefaultReleaseOptions()
	var metricsAddr string
	var exactOptIn bool
	c := &cobra.Command{
		Use:   "release [--kafka ADDR[,ADDR...]] [--clickhouse ADDR] [--pipeline FILE | --policy ft-u --k 5 | --policy dp-u --users U ...]",
		Short: "Write released histograms from topic decrypted into ClickHouse",
		Long:  runner.ReleaseHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			if err := o.Complete(cmd.Flags()); err != nil {
				return err
			}
			if err := requireWriterLogin(cmd, "crowdlog release"); err != nil {
				return err
			}
			st, w, err := o.New(cmd.Context(), log)
			if err != nil {
				return err
			}
			defer w.Close()
			log.Info("release: pipeline; items sealed for any other are not released", "app", o.App, "policy", o.Policy.String(), "pipeline", pipeline.DigestString(o.Pipeline))
			exact := exactCounts("release", exactOptIn, !o.Policy.Kind.IsDP())
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterRelease(reg, st, exact) }, st.Run, kafkaCheck(cmd.Context(), o.Kafka), clickhouseCheck(w.Ping))
		},
	}
	o.AddFlags(c.Flags())
	addMetricsFlag(c, &metricsAddr)
	addExactCountsFlag(c, &exactOptIn)
	return c
}

// setGCPercent applies a role's --gogc unless the operator set GOGC in the
// environment (which the Go runtime already applied).
func setGCPercent(p int) {
	if _, set := os.LookupEnv("GOGC"); !set && p != 0 {
		debug.SetGCPercent(p)
	}
}
