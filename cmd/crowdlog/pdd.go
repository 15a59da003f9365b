package main

import (
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/coordinator"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/release"
	pddrelease "github.com/crowdlog/crowdlog/release/pdd"
)

func pddCmd() *cobra.Command {
	var cfg runner.PDDConfig
	c := &cobra.Command{
		Use:   "pdd --input LOG [--group-size 100] [--delay 2] [--export OUT.tsv]",
		Short: "Run Private Data Donor mode: daily keyword counts summed over blinded groups",
		Long: `pdd replays an AOL log day by day as Private Data Donor clients (Primault et
al., WWW 2019), one per AnonID: each registers an X25519 key with the
coordinator, pings it on the days it is active (--online active) or every day
(--online all), and for each round it owes sends its keyword counts of that
day, blinded for its group, through relays a and b to Kafka topic "vectors".
The aggregator sums each group once every member submitted; after --delay
days a group with missing members is recovered from the survivors' shares
(t = n/2+1 of them), so the sum of the members who did submit is still
released — never one member's vector alone. The release stage writes
per-day counts and PDD's confidence (clients decrypted / clients active) to
ClickHouse (view keyword_daily).

Monitored keywords: the google-10000-english list (--keywords FILE for
another); --blacklist words are never counted by any client (PDD §6.1).
--dropout skips each ping with that probability, to see recovery at work.

Example:
  crowdlog pdd --input testdata/aol-top1000.tsv.gz --group-size 50 --delay 2 --max-days 14 --export pdd.tsv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLocalServices(cmd, cfg.Kafka, cfg.ClickHouse); err != nil {
				return err
			}
			cfg.Logger = logger()
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
	f := c.Flags()
	f.StringVar(&cfg.Input, "input", "", "AOL TSV log (plain or .gz)")
	f.StringVar(&cfg.Campaign, "campaign", "pdd", "campaign name")
	f.StringVar(&cfg.Keywords, "keywords", "", "monitored keyword list, one per line (default: embedded "+keywords.DefaultName+")")
	f.StringSliceVar(&cfg.Blacklist, "blacklist", nil, "keywords no client ever shares (comma-separated)")
	f.IntVar(&cfg.MaxUsers, "max-users", 0, "only the first N users of the log (0 = all)")
	f.IntVar(&cfg.MaxDays, "max-days", 0, "only the first N days of the log (0 = all)")
	f.IntVar(&cfg.GroupSize, "group-size", 100, "clients per group (PDD §4.2)")
	f.IntVar(&cfg.Delay, "delay", 2, "days the aggregator waits for late members (PDD §4.3)")
	f.IntVar(&cfg.RecoveryDays, "recovery-days", 1, "days after the delay for survivors' recovery answers")
	f.BoolVar(&cfg.Heuristic, "heuristic", false, "group only clients active on ≥ 1/δ of past days (PDD eq. 5)")
	f.StringVar(&cfg.Online, "online", "active", "when clients ping: active (days with log records) or all (every day)")
	f.Float64Var(&cfg.Dropout, "dropout", 0, "probability that a client skips a ping")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of --dropout")
	f.Float64Var(&cfg.Epsilon, "epsilon", 0, "Laplace noise on each released daily count (0 = exact)")
	f.IntVar(&cfg.MaxCount, "max-count", 0, "per-client per-keyword per-day clip used as the noise sensitivity")
	f.StringVar(&cfg.NATS, "nats", "", "NATS URL; empty starts an embedded server")
	f.Var(newListFlag(&cfg.Kafka), "kafka", "Kafka bootstrap brokers, comma-separated host:port list (or repeated); empty starts kfake")
	f.StringVar(&cfg.ClickHouse, "clickhouse", "", "ClickHouse native address; empty starts a local server")
	f.StringVar(&cfg.Database, "database", "crowdlog", "ClickHouse database")
	f.StringVar(&cfg.StateDir, "state", "", "state directory (default: a temporary one)")
	f.StringVar(&cfg.Export, "export", "", "write the released daily counts as TSV (campaign day keyword count confidence)")
	f.IntVar(&cfg.Workers, "workers", 8, "clients pinging concurrently")
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
			nc, err := o.Connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			co := coordinator.New(nc, cfg, log)
			if err := co.Start(cmd.Context()); err != nil {
				return err
			}
			defer co.Close()
			if _, err := serveMetrics(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterCoordinator(reg, co) }, coordinatorChecks(cmd.Context(), nc, cfg.Brokers)...); err != nil {
				return err
			}
			log.Info("coordinator: serving", "campaign", cfg.Campaign.Name)
			if !o.WallClock {
				<-cmd.Context().Done()
				return nil
			}
			return co.FollowWallClock(cmd.Context(), time.Minute)
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
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := o.Advance(cmd.Context())
			if err == nil {
				fmt.Fprintln(cmd.OutOrStdout(), line)
			}
			return err
		},
	}
	o.AddFlags(c.Flags())
	_ = c.MarkFlagRequired("day")
	return c
}

func releasePDDCmd() *cobra.Command {
	var ch, db, list, metricsAddr, dataset string
	var budget release.Budget
	var kafkaAddr []string
	var eps float64
	var maxCount int
	c := &cobra.Command{
		Use:   "release-pdd [--kafka ADDR] [--clickhouse ADDR]",
		Short: "Run the PDD release stage: daily keyword counts and confidence into ClickHouse",
		Long: `release-pdd reads Kafka topic "group-sums", and once every group of a round
has an outcome writes that day's counts (optionally with Laplace noise,
--epsilon) and confidence to ClickHouse (tables pdd_keyword_counts,
pdd_rounds; view keyword_daily). Idempotent on restart. A noisy day spends
L·ε (δ = 0) from the privacy ledger of --dataset for that day, once; a day
over --budget-epsilon is refused and nothing of it is released.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := keywords.Load(list)
			if err != nil {
				return err
			}
			if err := requireWriterLogin(cmd, "crowdlog release-pdd"); err != nil {
				return err
			}
			w, err := release.Open(cmd.Context(), ch, db)
			if err != nil {
				return err
			}
			defer w.Close()
			st := &pddrelease.Stage{Brokers: kafkaAddr, Writer: w, List: l, Epsilon: eps, MaxCount: int64(maxCount), Logger: logger(),
				Dataset: dataset, Budget: budget}
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterPDDRelease(reg, st) }, st.Run, kafkaCheck(cmd.Context(), kafkaAddr), clickhouseCheck(w.Ping))
		},
	}
	f := c.Flags()
	f.StringSliceVar(&kafkaAddr, "kafka", []string{defaultKafka}, "Kafka bootstrap brokers, comma-separated")
	f.StringVar(&ch, "clickhouse", "127.0.0.1:9000", "ClickHouse native address")
	f.StringVar(&db, "database", "crowdlog", "ClickHouse database")
	f.StringVar(&list, "keywords", "", "monitored keyword list (the campaign's)")
	f.Float64Var(&eps, "epsilon", 0, "Laplace noise per daily count (0 = exact)")
	f.IntVar(&maxCount, "max-count", 0, "noise sensitivity: per-client per-keyword per-day clip")
	budgetFlags(c.Flags(), &dataset, &budget)
	addMetricsFlag(c, &metricsAddr)
	return c
}
