package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/randomness"
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
	var natsURL, keys, metricsAddr, pipelineFile string
	var natsSec natsconn.Security
	var o randomness.Options
	var requireTokens bool
	c := &cobra.Command{
		Use:   "randomness [--nats URL] [--keys DIR] [--epoch-length 24h] [--key-grace 1h]",
		Short: "Serve OPRF randomness (RFC 9497, ristretto255) over NATS request/reply",
		Long: `randomness evaluates clients' blinded OPRF elements under the key of the
requested epoch, on subject ` + protocol.RandomnessSubject + ` (queue group: several
processes sharing the key directory share the load), with a DLEQ proof per
batch (RFC 9497 verifiable mode). Epoch public keys are published on
` + protocol.RandomnessPublicKeySubject + `.

Epoch keys: one random key per epoch in DIR/` + keydir.RandomnessKeys + `/EPOCH.key (mode 0600),
created when an operator opens a named epoch ('crowdlog randomness
open-epoch') or, with --epoch-length, on a scheduled epoch's first request;
a request for a named epoch nobody opened is refused ("epoch not opened")
and creates nothing. Processes sharing the directory agree on a key (the
first writer wins). Once an epoch is closed and --key-grace has
passed, its key file is overwritten and removed and the epoch is refused for
good (a tombstone stays; a restart never makes a new key).

Epoch names: with --epoch-length 0 (default) any name (1-64 letters, digits,
'.', '_', '-'), as log replays with historic epochs use, served once opened
with open-epoch; epochs end only when closed. With --epoch-length L (e.g. 24h) epochs follow an absolute UTC
schedule that survives restarts: the epoch containing time t is named by its
start floor(unix(t)/L)*L as ` + randomness.ScheduleLayout + ` plus "-" and L, e.g.
"20060301T000000Z-24h". Epochs starting more than --epoch-skew ahead are
refused (not started); epochs whose end + --key-grace has passed are refused
(expired) and their keys destroyed.

The seed file DIR/randomness.seed of older versions is no longer used (a
warning says so); epochs listed in DIR/randomness.seed.closed stay closed.

--require-tokens (Privacy Pass, RFC 9578): every OPRF element must come with
one unspent randomness token of its epoch, verified under
DIR/` + keydir.IssuerKeys + `/EPOCH.randomness.key (created by 'crowdlog issuer --epoch' run
by this operator on DIR: with separate operators the randomness operator
issues its own randomness tokens, 'keys generate --role randomness');
spends are kept in JetStream KV (` + protocol.SpentTokensBucket + `), shared by every
process. Without it any NATS client may evaluate unlimited candidates (the
online probe of docs/threat-model.md).

--pipeline FILE: the epoch schedule (epoch.length, epoch.grace) from the
pipeline file, unless --epoch-length or --key-grace are given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			if pipelineFile != "" {
				p, err := loadPipeline(pipelineFile)
				if err != nil {
					return err
				}
				if d := p.Defaults(); d.Epoch.Length > 0 {
					if !cmd.Flags().Changed("epoch-length") {
						o.EpochLength = d.Epoch.Length
					}
					if !cmd.Flags().Changed("key-grace") {
						o.Grace = d.Epoch.Grace
					}
				}
			}
			if o.Grace == 0 {
				o.Grace = -1 // an explicit 0: destroy at the first sweep after close
			}
			if o.Skew == 0 {
				o.Skew = -1
			}
			if err := keydir.RequireRole(keys, "the randomness service", keydir.RoleRandomness); err != nil {
				return err
			}
			nc, err := natsconn.ConnectAs(natsURL, "crowdlog-randomness", as(natsSec, natsauth.Randomness))
			if err != nil {
				return err
			}
			defer nc.Close()
			s, err := randomness.New(cmd.Context(), nc, keys, o, log)
			if err != nil {
				return err
			}
			if requireTokens {
				if err := runner.RequireTokens(s, keys); err != nil {
					return err
				}
			} else {
				log.Warn("randomness: tokens not required (--require-tokens off): any client may probe unlimited candidates")
			}
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterRandomness(reg, s) }, s.Run, randomnessChecks(nc, keys, requireTokens)...)
		},
	}
	c.Flags().StringVar(&natsURL, "nats", defaultNATS, "NATS URL; a comma-separated list for a cluster")
	addNATSSecurityFlags(c.Flags(), &natsSec)
	c.Flags().StringVar(&keys, "keys", "keys", "keys directory; epoch keys live in its "+keydir.RandomnessKeys+" subdirectory")
	c.Flags().BoolVar(&requireTokens, "require-tokens", false, "require one Privacy Pass randomness token per element (keys from the issuer's key files in --keys)")
	c.Flags().DurationVar(&o.EpochLength, "epoch-length", 0, "epoch schedule length (e.g. 24h): absolute UTC epochs named START-LENGTH; 0 = named epochs, no schedule")
	c.Flags().DurationVar(&o.Grace, "key-grace", randomness.DefaultGrace, "how long an epoch's key survives its close (and, with --epoch-length, its end) before it is destroyed")
	c.Flags().DurationVar(&o.Skew, "epoch-skew", randomness.DefaultSkew, "with --epoch-length: how far ahead of this clock an epoch may start and still be served")
	c.Flags().StringVarP(&pipelineFile, "pipeline", "f", "", "pipeline file: its epoch schedule (epoch.length, epoch.grace) unless --epoch-length/--key-grace are given")
	addMetricsFlag(c, &metricsAddr)
	c.AddCommand(randomnessOpenCmd(), randomnessCloseCmd())
	return c
}

func randomnessCloseCmd() *cobra.Command {
	var keys, epoch string
	c := &cobra.Command{
		Use:   "close-epoch --keys DIR --epoch NAME",
		Short: "Close an epoch at the randomness service: refused from now on, its key destroyed after --key-grace",
		Long: `close-epoch appends the epoch to DIR/` + keydir.RandomnessKeys + `/closed. Running randomness
processes sharing the directory refuse it at their next request ("epoch
closed") and destroy its key once their --key-grace has passed; the epoch is
never given a new key. Run it after 'crowdlog aggregate close-epoch'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			if err := keydir.RequireRole(keys, "randomness close-epoch", keydir.RoleRandomness); err != nil {
				return err
			}
			k, err := randomness.Open(filepath.Join(keys, keydir.RandomnessKeys), randomness.Options{})
			if err != nil {
				return err
			}
			if err := k.Close(epoch); err != nil {
				return err
			}
			fmt.Printf("epoch %s closed in %s\n", epoch, k.Dir())
			return nil
		},
	}
	c.Flags().StringVar(&keys, "keys", "keys", "keys directory of the randomness service")
	c.Flags().StringVar(&epoch, "epoch", "", "epoch to close")
	c.MarkFlagRequired("epoch")
	return c
}

func relayCmd() *cobra.Command {
	var o relays.Options
	var natsURL, metricsAddr string
	var natsSec natsconn.Security
	var gcPercent int
	c := &cobra.Command{
		Use:   "relay --name a|b --key FILE [--nats URL[,URL...]] [--kafka ADDR[,ADDR...]]",
		Short: "Run a relay: peel one onion layer, batch, shuffle, forward",
		Long: `relay consumes its subject crowdlog.relay.NAME (a JetStream work queue: more
processes with the same --name and key = more capacity), peels its HPKE
layer and holds the peeled messages in a pool: once --pool messages are
held, or --pool-timeout after the oldest arrived, it shuffles them with
crypto randomness and forwards each to the next hop of the route (relay a:
only relay b; relay b: only Kafka topic "reports", keyed by a 1-byte tag
bucket). Messages are acknowledged only after forwarding (at-least-once): a
relay killed mid-pool loses nothing. Malformed, oversized, wrong-key,
wrong-hop and replayed messages are counted and dropped. A larger pool or
timeout means larger anonymity sets and more latency (docs/threat-model.md,
"Mixing").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			if o.Name == "" {
				return errors.New("--name is required (a or b)")
			}
			setGCPercent(gcPercent)
			if len(o.KeyPaths) == 0 {
				return errors.New("--key is required (see `crowdlog keys generate`)")
			}
			nc, err := natsconn.ConnectAs(natsURL, "crowdlog-relay-"+o.Name, as(natsSec, natsauth.RelayRole(o.Name)))
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			r, closeW, err := relays.New(cmd.Context(), js, o, log)
			if err != nil {
				return err
			}
			defer closeW()
			reg, err := serveMetrics(cmd.Context(), metricsAddr, nil, relayChecks(cmd.Context(), nc, o)...)
			if err != nil {
				return err
			}
			r.Registerer = reg
			return r.Run(cmd.Context())
		},
	}
	f := c.Flags()
	f.StringVar(&o.Name, "name", "", "relay name: its subject is crowdlog.relay.NAME")
	f.StringSliceVar(&o.KeyPaths, "key", nil, "HPKE key file (repeat for two keys during a rotation)")
	f.StringVar(&natsURL, "nats", defaultNATS, "NATS URL; a comma-separated list for a cluster")
	addNATSSecurityFlags(f, &natsSec)
	f.StringSliceVar(&o.Kafka, "kafka", []string{defaultKafka}, "Kafka bootstrap brokers, comma-separated host:port list (used by the last relay)")
	f.IntVar(&o.BatchSize, "batch", relays.DefaultBatchSize, "most messages per fetch from the inbox")
	f.DurationVar(&o.BatchTimeout, "batch-timeout", 50*time.Millisecond, "longest wait of one fetch (poll interval; --pool-timeout decides when to forward)")
	f.IntVar(&o.PoolSize, "pool", relays.DefaultPoolSize, "forward once this many peeled messages are held (P: the least anonymity set when at least P per --pool-timeout arrive)")
	f.DurationVar(&o.PoolTimeout, "pool-timeout", relays.DefaultPoolTimeout, "forward what is held this long after the oldest held message arrived, even below --pool (T: bounds each message's wait); --ack-wait must be at least twice this")
	f.StringVar(&o.Next, "next", "", `next hop on the route: empty = relay b for relay a, Kafka for any other; "." = last hop (Kafka only)`)
	f.DurationVar(&o.AckWait, "ack-wait", 30*time.Second, "redeliver a message this long after a relay took it without acknowledging (crash)")
	f.IntVar(&gcPercent, "gogc", relays.DefaultGCPercent, "Go GC target percent (as GOGC; the GOGC environment variable, when set, wins): higher trades memory for less collector CPU")
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
