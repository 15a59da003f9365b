// Command crowdlog is the one binary of crowdlog, with a subcommand per role:
// run (the whole pipeline on one machine), ingest (clients), randomness
// (OPRF service), relay (onion mix), aggregate (threshold aggregation),
// release (ClickHouse writer) and keys (HPKE key management).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/infra/metrics"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := rootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "crowdlog:", err)
		var ec exitCode
		if errors.As(err, &ec) {
			os.Exit(ec.code)
		}
		if errors.As(err, new(config.UsageError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// version is the module version, VCS revision and Go version the binary
// was built from (metrics.BuildInfo).
func version() string {
	v, rev, gov := metrics.BuildInfo()
	if rev != "" {
		v += " " + rev
	}
	return v + " " + gov
}

var logLevel, logFormat string

// logger is the process's logger on stderr: --log-level, --log-format
// (checked by the root command before any subcommand runs).
func logger() *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if logFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, opts)
	}
	l := slog.New(h)
	slog.SetDefault(l)
	return l
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "crowdlog",
		Short: "Private search-log analytics: artifacts open only once k users sent them",
		Long: `crowdlog lets many clients contribute search artifacts (queries and more) so
that analysts get histograms in ClickHouse while no server learns who sent what:

  client (ingest) --NATS--> relay a --NATS--> relay b --Kafka "reports"--> aggregate
      | OPRF (randomness)                              --Kafka "decrypted"--> release --> ClickHouse

An artifact's report is sealed with a key that only k distinct users' shares
recover (threshold secret sharing keyed by the artifact, CrowdLogging SIGIR 2011
and STAR CCS 2022), wrapped in one HPKE onion layer per hop (RFC 9180).

Start with 'crowdlog run --help': it runs every role on one machine.

Exit status: 0 success; 2 invalid usage or configuration (a flag value, a
pipeline file); 3 'crowdlog aggregate audit' found late, missing or orphan
reports; 1 any other failure.

` + config.Long,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyConfig(cmd, os.Environ()); err != nil {
				return err
			}
			if err := applyKafkaAuth(cmd); err != nil {
				return err
			}
			if err := applyClickHouseLogin(cmd); err != nil {
				return err
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return usageError(fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel))
			}
			if logFormat != "text" && logFormat != "json" {
				return usageError(fmt.Errorf("--log-format %q: want text or json", logFormat))
			}
			return nil
		},
	}
	root.PersistentFlags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().String(config.Flag, "", "YAML file of flag values (keys are flag names; else $"+config.Env+"); the environment and flags win over it")
	root.SetUsageTemplate(strings.TrimSuffix(root.UsageTemplate(), "\n") + "\n\n" + config.Help + "\n")
	root.PersistentFlags().StringVar(&logFormat, "log-format", "text", "log format on stderr: text (key=value) or json (one object per line, for log collectors)")
	root.AddCommand(runCmd(), simulateCmd(), ingestCmd(), randomnessCmd(), relayCmd(), aggregateCmd(), releaseCmd(), keysCmd(), clickhouseCmd())
	root.AddCommand(attackCmd())
	root.AddCommand(reportCmd())
	root.AddCommand(pddCmd(), coordinatorCmd(), aggregateVectorsCmd(), releasePDDCmd())
	root.AddCommand(aggregatePrio3Cmd())
	root.AddCommand(issuerCmd())
	root.AddCommand(pipelineCmd())
	root.AddCommand(topicsCmd(), streamsCmd())
	root.AddCommand(natsConfigCmd())
	root.AddCommand(versionCmd())
	addKafkaAuthFlags(root)
	addClickHouseLoginFlags(root)
	return root
}
