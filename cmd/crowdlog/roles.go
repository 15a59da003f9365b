package main

import (
	"os"
	"runtime/debug"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	rndoptions "github.com/crowdlog/crowdlog/randomness/options"
	"github.com/crowdlog/crowdlog/relays"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
	"github.com/crowdlog/crowdlog/release/stage"
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
			if o.PipelineFile != "" {
				p, err := loadPipeline(o.PipelineFile)
				if err != nil {
					return err
				}
				o.ApplyPipelineEpoch(cmd.Flags(), p.Defaults().Epoch.Length, p.Defaults().Epoch.Grace)
			}
			cfg, err := o.Config()
			if err != nil {
				return err
			}
			nc, err := o.Connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			s, err := rndoptions.New(cmd.Context(), nc, cfg, log)
			if err != nil {
				return err
			}
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
			nc, err := o.Connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			r, closeW, err := relays.New(cmd.Context(), js, cfg, log)
			if err != nil {
				return err
			}
			defer closeW()
			if r.Registerer, err = serveMetrics(cmd.Context(), metricsAddr, nil, relayChecks(cmd.Context(), nc, cfg)...); err != nil {
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
	var kafkaAddrs []string
	var ch, db, metricsAddr, pol, dataset, summary, pipelineFile, app string
	var k int
	var dp policy.Params
	var appOpts apps.Options
	var budget release.Budget
	c := &cobra.Command{
		Use:   "release [--kafka ADDR[,ADDR...]] [--clickhouse ADDR] [--pipeline FILE | --policy ft-u --k 5 | --policy dp-u --users U ...]",
		Short: "Write released histograms from topic decrypted into ClickHouse",
		Long: `release reads topic "decrypted", drops duplicate reports (at-least-once
delivery), and when every partition has closed an epoch writes its histogram
(released_items), the counts-only undecrypted summary and a releases row to
ClickHouse. Writes are idempotent per (app, epoch, policy, k); a ClickHouse
outage is retried. Only items sealed for the pipeline are released: every
report carries the digest of the pipeline definition its client sealed for
(application and options, policy and parameters), and this stage computes
its own from --pipeline FILE or the flags (--app, its options, --policy,
--k or the DP parameters); items of any other digest, policy or k are
counted and logged naming both digests, never released. With --policy dp-a, dp-u, zealous, dp-su or dp-gsu (and
--users U) the items are released with noise and the spend is recorded in
privacy_ledger; a release over --budget-epsilon/--budget-delta is refused and
logged.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			p, err := pipelineFlag(cmd.Flags(), pipelineFile)
			if err != nil {
				return err
			}
			if p != nil {
				var cfg runner.Config
				runner.ApplyPipeline(&cfg, p)
				pol, k, dp, dataset, budget, summary = cfg.Policy, cfg.K, cfg.DP, cfg.Dataset, cfg.Budget, string(cfg.Summary)
				app, appOpts = cfg.App, cfg.AppOptions
			}
			rp, err := runner.ResolvePolicy(pol, k, dp)
			if err != nil {
				return usageError(err)
			}
			digest, err := pipeline.Digest(app, appOpts, rp)
			if err != nil {
				return usageError(err)
			}
			if err := requireWriterLogin(cmd, "crowdlog release"); err != nil {
				return err
			}
			st, w, err := stage.New(cmd.Context(), kafkaAddrs, ch, db, log)
			if err != nil {
				return err
			}
			defer w.Close()
			if st.Summary, err = release.ParseSummaryMode(summary); err != nil {
				return err
			}
			st.Policy, st.Pipeline = rp, digest
			if rp.Kind.IsDP() {
				st.Dataset, st.Budget = dataset, budget
			}
			log.Info("release: pipeline; items sealed for any other are not released", "app", app, "policy", rp.String(), "pipeline", pipeline.DigestString(digest))
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterRelease(reg, st) }, st.Run, kafkaCheck(cmd.Context(), kafkaAddrs), clickhouseCheck(w.Ping))
		},
	}
	c.Flags().StringSliceVar(&kafkaAddrs, "kafka", []string{defaultKafka}, "Kafka bootstrap brokers, comma-separated host:port list")
	c.Flags().StringVar(&ch, "clickhouse", defaultCH, "ClickHouse native address")
	c.Flags().StringVar(&db, "database", "crowdlog", "ClickHouse database")
	c.Flags().StringVar(&summary, "summary", string(release.SummaryCoarse), summaryHelp)
	c.Flags().StringVarP(&pipelineFile, "pipeline", "f", "", "pipeline file (crowdlog pipeline --help): policy, parameters, budget and summary from it instead of their flags")
	c.Flags().StringVar(&app, "app", "query", "the pipeline's application (its options below): part of the pipeline digest items must carry")
	appFlags(c.Flags(), &appOpts)
	c.Flags().StringVar(&pol, "policy", "ft-u", "the pipeline's policy: ft-u, ft-a (exact counts), dp-a, dp-u, zealous, dp-su or dp-gsu (noise, ledger); only items sealed for it are released")
	c.Flags().IntVar(&k, "k", 5, "threshold k of ft-u/ft-a (DP policies derive their Shamir k)")
	policyFlags(c.Flags(), &dp)
	budgetFlags(c.Flags(), &dataset, &budget)
	addMetricsFlag(c, &metricsAddr)
	return c
}

const summaryHelp = "undecrypted summary published next to each release: coarse (report counts in power-of-two buckets), exact or none; DP releases withhold theirs in every mode"

// appFlags registers the application options (apps.Options, see
// docs/applications.md) on f; run and ingest must mine with the same ones.
func appFlags(f *pflag.FlagSet, o *apps.Options) {
	f.StringVar(&o.URLLevel, "url-level", apps.URLDomain, "apps click, url, ltr: how much of a clicked URL to keep: full, domain or dir")
	f.DurationVar(&o.SessionGap, "session-gap", apps.DefaultSessionGap, "app reformulation: an idle time longer than this starts a new session")
	f.StringVar(&o.PairOrder, "pair-order", apps.PairTime, "app reformulation: time (q1 → q2 as searched) or sorted (one artifact for both directions)")
	f.IntSliceVar(&o.Buckets.Rank, "rank-buckets", apps.DefaultRankBuckets, "app ltr: upper bounds of the click-rank buckets")
	f.DurationSliceVar(&o.Buckets.Dwell, "dwell-buckets", apps.DefaultDwellBuckets, "app ltr: upper bounds of the dwell-time buckets")
	f.IntSliceVar(&o.Buckets.Length, "length-buckets", apps.DefaultLengthBuckets, "app ltr: upper bounds of the query-length buckets (tokens)")
}

// setGCPercent applies a role's --gogc unless the operator set GOGC in the
// environment (which the Go runtime already applied).
func setGCPercent(p int) {
	if _, set := os.LookupEnv("GOGC"); !set && p != 0 {
		debug.SetGCPercent(p)
	}
}
