// Command crowdlog is the one binary of crowdlog, with a subcommand per role:
// run (the whole pipeline on one machine), ingest (clients), randomness
// (OPRF service), relay (onion mix), aggregate (threshold aggregation),
// release (ClickHouse writer) and keys (HPKE key management).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := rootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "crowdlog:", err)
		os.Exit(1)
	}
}

var logLevel string

func logger() *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	l := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
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

Start with 'crowdlog run --help': it runs every role on one machine.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.AddCommand(runCmd(), simulateCmd(), ingestCmd(), randomnessCmd(), relayCmd(), aggregateCmd(), releaseCmd(), keysCmd(), clickhouseCmd())
	root.AddCommand(attackCmd())
	root.AddCommand(reportCmd())
	root.AddCommand(pddCmd(), coordinatorCmd(), aggregateVectorsCmd(), releasePDDCmd())
	root.AddCommand(issuerCmd())
	return root
}
