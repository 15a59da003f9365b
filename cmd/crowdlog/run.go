package main

import (
	"fmt"
	"os"
	"time"

	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/release"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func runCmd() *cobra.Command {
	var cfg runner.Config
	var noProgress bool
	c := &cobra.Command{
		Use:   "run --input LOG --app query --policy ft-u --k 5 [--export OUT.tsv]",
		Short: "Run every stage on one machine (or against given services) and release a histogram",
		Long: `run replays an AOL search log (TSV with header AnonID Query QueryTime ItemRank
ClickURL, plain or .gz) as one client per AnonID, through the randomness
service, relays a and b, the Kafka aggregator and the release stage, into
ClickHouse, and prints a summary.

Services: with no --nats/--kafka/--clickhouse, run starts an embedded NATS
server, a Kafka-protocol broker (kfake, data in --state) and a local
ClickHouse server (needs 'apt-get install -y clickhouse-server
clickhouse-client'). Given addresses, it uses them with the same code path a
cluster uses. With --external, the roles (randomness, relay, aggregate,
release) already run elsewhere with the keys in --keys; run then only ingests,
closes the epoch and waits for the release.

Policies: ft-u releases artifacts sent by at least k distinct users, ft-a
those with at least k reports; impressions and users are exact counts. dp-a,
dp-u and zealous (--epsilon, --delta, --d, ...) limit every client to its d
most recent artifacts, add Laplace noise, release noisy counts and record the
spent (ε, δ) in the ClickHouse table privacy_ledger (docs/policies.md).

Example:
  crowdlog run --input testdata/aol-top1000.tsv.gz --app query --policy ft-u --k 5 --export out.tsv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Logger = logger()
			if !noProgress && term.IsTerminal(int(os.Stderr.Fd())) {
				cfg.Progress = os.Stderr
			}
			sum, err := runner.Run(cmd.Context(), cfg)
			if sum != nil {
				sum.Print(os.Stdout)
			}
			if err == nil && cfg.Export != "" {
				fmt.Printf("  export            %s\n", cfg.Export)
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.Input, "input", "", "AOL TSV log (plain or .gz) to replay, one client per AnonID (required)")
	f.StringVar(&cfg.App, "app", "query", "mining application: "+fmt.Sprint(apps.Apps()))
	appFlags(f, &cfg.AppOptions)
	f.StringVar(&cfg.Policy, "policy", "ft-u", "policy: ft-u (k distinct users), ft-a (k reports), dp-a, dp-u or zealous (docs/policies.md)")
	f.IntVar(&cfg.K, "k", 5, "threshold k of ft-u/ft-a: an artifact opens once k shares exist")
	policyFlags(f, &cfg.DP)
	budgetFlags(f, &cfg.Dataset, &cfg.Budget)
	f.StringVar(&cfg.Epoch, "epoch", "all", "epoch name for the whole input (one OPRF key per epoch)")
	f.StringVar(&cfg.Export, "export", "", "write the released histogram here as TSV (header: app epoch policy item impressions users)")
	f.StringVar((*string)(&cfg.Summary), "summary", string(release.SummaryCoarse), summaryHelp)
	f.StringVar(&cfg.NATS, "nats", "", "NATS URL (comma-separated list for a cluster); empty starts an embedded server")
	f.StringVar(&cfg.Kafka, "kafka", "", "Kafka bootstrap brokers, comma-separated host:port list; empty starts a kfake broker in --state")
	f.StringVar(&cfg.ClickHouse, "clickhouse", "", "ClickHouse native address (host:port); empty starts a local server in --state")
	f.StringVar(&cfg.Database, "database", "crowdlog", "ClickHouse database")
	f.StringVar(&cfg.StateDir, "state", "", "state directory (keys, broker data, ClickHouse); empty = a temporary directory removed afterwards")
	f.StringVar(&cfg.KeysDir, "keys", "", "keys directory (default STATE/keys; generated when missing unless --external)")
	f.IntVar(&cfg.Partitions, "partitions", 8, "partitions of the reports and decrypted topics when run creates them")
	f.BoolVar(&cfg.External, "external", false, "roles run elsewhere; only ingest, close the epoch and wait for the release")
	f.IntVar(&cfg.Workers, "workers", 0, "clients replayed concurrently (default: number of CPUs)")
	f.DurationVar(&cfg.Spread, "spread", 0, "each client sends its reports at random times within this window, not as one burst an observer links (e.g. 1h for real clients; 0 = back to back, for replays)")
	f.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "how long to wait for relays, aggregator and release after ingest")
	f.BoolVar(&noProgress, "no-progress", false, "no progress bar on stderr (shown only when stderr is a terminal)")
	f.StringVar(&cfg.Metrics, "metrics", "", metricsHelp)
	c.MarkFlagRequired("input")
	return c
}
