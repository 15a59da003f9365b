package main

import (
	"fmt"
	"os"
	"time"

	"github.com/crowdlog/crowdlog/infra/profile"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/release"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

func runCmd() *cobra.Command {
	c, _ := newRunCmd()
	return c
}

// newRunCmd returns the run command and the Config its flags fill.
func newRunCmd() (*cobra.Command, *runner.Config) {
	var cfg runner.Config
	var noProgress bool
	var pipelineFile string
	c := &cobra.Command{
		Use:   "run --input LOG --app query --policy ft-u --k 5 [--export OUT.tsv]",
		Short: "Run every stage on one machine (or against given services) and release a histogram",
		Long: `run replays a search log as one client per AnonID, through the randomness
service, relays a and b, the Kafka aggregator and the release stage, into
ClickHouse, and prints a summary.

Input: tab-separated, plain or .gz, in AOL columns (AnonID Query QueryTime
[ItemRank ClickURL], header optional) or Excite columns (AnonID QueryTime
Query). QueryTime as 2006-01-02 15:04:05, RFC 3339, Unix seconds or the
Excite logs' yymmddHHMMSS (970916105432 = 1997-09-16 10:54:32) is detected
from the first good line and then required on every line; --time-format
names one of them (aol, rfc3339, unix, excite) or gives any other layout in
Go's reference time (e.g. "02/Jan/2006:15:04:05"). Bad lines are skipped and
counted; a log without a single valid record stops run at once, before any
server starts, with an error naming its first bad lines. --input - reads
stdin: run reads its input more than once, so it first spools it to the file
input.tsv in --state (removed afterwards); a --time-format input is spooled
there the same way, converted to AOL TSV.

Epochs: by default the whole input is one epoch (--epoch, "all"). With
--epoch-length 168h the input is replayed in scheduled epochs: each record
goes to the epoch its QueryTime falls in, named START-LENGTH as the
randomness schedule names them (e.g. 20060227T000000Z-168h, aligned to the
Unix epoch, UTC); each epoch is opened, replayed, closed and released on its
own, so the analyst sees one histogram per week and its trends.

Services: with no --nats/--kafka/--clickhouse, run starts an embedded NATS
server, a Kafka-protocol broker (kfake, data in --state) and a local
ClickHouse server (needs 'apt-get install -y clickhouse-server
clickhouse-client'). Given addresses, it uses them with the same code path a
cluster uses. With --external, the roles (randomness, relay, aggregate,
release) already run elsewhere with the keys in --keys; run then only ingests,
closes the epoch and waits for the release.

Policies: ft-u releases artifacts sent by at least k distinct users, ft-a
those with at least k reports; impressions and users are exact counts. dp-a,
dp-u, zealous, dp-su and dp-gsu (--epsilon and --users required; --delta,
--d, ... default as in a pipeline file) limit every client's artifacts, add
noise, release the normalized items with noisy counts (no variant) and record
the spent (ε, δ) in the ClickHouse table privacy_ledger (docs/policies.md).
U (--users) is public configuration, never counted from --input.

Tokens (on by default): run starts an issuer, gives every AnonID its
own enrolled identity, and each client spends one randomness token per OPRF
element (at most --randomness-tokens per identity and epoch), one report token
per report (at most --report-tokens) and, under ft-u, one ARC credential whose
presentation per artifact makes FT_u count identities, not self-chosen
secrets. The defaults keep the release exact. --tokens off is for comparison
only: it gives up the probe and Sybil protection (logged). With --external,
run enrolls the identities in --keys and uses tokens when an issuer answers
for the epoch within 5 s, else replays without them (logged).

Waits: every wait is bounded and its error names the stage and the counts
reached: --start-timeout for each start-up step, --ingest-timeout for the
replay (default 10 min + 10 ms per record + --spread per round of --workers
clients), --timeout for each wait after it (relays draining, the release
appearing in ClickHouse).

Pipeline: --pipeline FILE (-f) takes the app, policy, parameters, budget,
epoch, tokens and partitions from a pipeline file ('crowdlog pipeline
--help') instead of their flags, which then must not be given.

Examples:
  crowdlog run --input testdata/aol-top1000.tsv.gz --app query --policy ft-u --k 5 --export out.tsv
  crowdlog run -f testdata/pipelines/query-ftu-k5.yaml --input testdata/aol-top1000.tsv.gz --export out.tsv
  zcat excite.log.gz | crowdlog run --input - --app query --policy ft-u --k 5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLocalServices(cmd, cfg.Kafka, cfg.ClickHouse); err != nil {
				return err
			}
			if err := applyPipelineFile(cmd.Flags(), pipelineFile, &cfg); err != nil {
				return err
			}
			if cfg.EpochLength != 0 && !cmd.Flags().Changed("epoch") {
				cfg.Epoch = "" // scheduled epochs name themselves
			}
			if cfg.EpochLength != 0 && cfg.Epoch != "" {
				return usageError(fmt.Errorf("--epoch %q and --epoch-length %s: give one (scheduled epochs are named START-LENGTH)", cfg.Epoch, cfg.EpochLength))
			}
			cfg.Logger = logger()
			if !noProgress && term.IsTerminal(int(os.Stderr.Fd())) {
				cfg.Progress = os.Stderr
			}
			stopProfile, err := profile.StartCPU()
			if err != nil {
				return err
			}
			sum, err := runner.Run(cmd.Context(), cfg)
			stopProfile()
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
	f.StringVarP(&pipelineFile, "pipeline", "f", "", "pipeline file (crowdlog pipeline --help): app, policy, parameters, budget, epoch, tokens and partitions from it instead of their flags")
	f.StringVar(&cfg.Input, "input", "", "search log to replay, one client per AnonID: AOL or Excite TSV, plain or .gz; - reads stdin (spooled to --state first) (required)")
	timeFormatFlag(f, &cfg.TimeFormat)
	f.StringVar(&cfg.App, "app", "query", "mining application: "+fmt.Sprint(apps.Apps()))
	appFlags(f, &cfg.AppOptions)
	f.StringVar(&cfg.Policy, "policy", "ft-u", "policy: ft-u (k distinct users), ft-a (k reports), dp-a, dp-u, zealous or dp-su (DP set union: one artifact per user, the most frequent of its d most recent distinct; dp-gsu: Gaussian DP set union, the --d = m most frequent distinct, padded to m reports; docs/policies.md)")
	f.IntVar(&cfg.K, "k", 5, "threshold k of ft-u/ft-a: an artifact opens once k shares exist")
	policyFlags(f, &cfg.DP)
	budgetFlags(f, &cfg.Dataset, &cfg.Budget)
	f.StringVar(&cfg.Epoch, "epoch", "all", "epoch name for the whole input (one OPRF key per epoch)")
	f.DurationVar(&cfg.EpochLength, "epoch-length", 0, "replay in scheduled epochs of this length (e.g. 168h): each record in the epoch its QueryTime falls in, named START-LENGTH (e.g. 20060227T000000Z-168h, aligned to the Unix epoch) as the randomness schedule names them; each epoch is released on its own")
	f.StringVar(&cfg.Export, "export", "", "write the released histogram here as TSV (header: app epoch policy item impressions users)")
	f.StringVar((*string)(&cfg.Summary), "summary", string(release.SummaryCoarse), summaryHelp)
	f.StringVar(&cfg.NATS, "nats", "", "NATS URL (comma-separated list for a cluster); empty starts an embedded server with per-role credentials")
	addNATSSecurityFlags(f, &cfg.NATSSecurity)
	f.StringVar(&cfg.NATSOperatorNKey, "nats-operator-nkey", "", "NKey seed of the operator's NATS credential (relay stream look-up, drain checks) with --nats; empty uses --nats-nkey for those too. With a credential the streams must exist (crowdlog streams)")
	f.Var(newListFlag(&cfg.Kafka), "kafka", "Kafka bootstrap brokers, comma-separated host:port list (or repeated); empty starts a kfake broker in --state")
	f.StringVar(&cfg.ClickHouse, "clickhouse", "", "ClickHouse native address (host:port); empty starts a local server in --state")
	f.StringVar(&cfg.Database, "database", "crowdlog", "ClickHouse database")
	f.StringVar(&cfg.StateDir, "state", "", "state directory (keys, broker data, ClickHouse); empty = a temporary directory removed afterwards")
	f.StringVar(&cfg.KeysDir, "keys", "", "keys directory (default STATE/keys; generated when missing unless --external)")
	f.IntVar(&cfg.Partitions, "partitions", 8, "partitions of the reports and decrypted topics when run creates them")
	f.BoolVar(&cfg.External, "external", false, "roles run elsewhere; only ingest, close the epoch and wait for the release")
	f.StringVar(&cfg.ControlKey, "control-key", "", "the pipeline operator's Ed25519 key (PEM) that signs the epoch open/close records (default KEYS/control-sign.key; created when missing unless --external, where a missing default leaves them unsigned)")
	tokensFlag(f, &cfg.TokensOff)
	f.IntVar(&cfg.RandomnessTokens, "randomness-tokens", 0, "N: randomness tokens (OPRF elements) the issuer gives each identity per epoch (0 = the largest number of distinct artifacts of one user of --input; d under dp-a/dp-u/zealous)")
	f.IntVar(&cfg.ReportTokens, "report-tokens", 0, "d: report tokens the issuer gives each identity per epoch, one per report (0 = the largest number of reports of one user of --input; the policy's d under dp-a/dp-u/zealous)")
	f.IntVar(&cfg.Workers, "workers", 0, "clients replayed concurrently (default: number of CPUs)")
	f.DurationVar(&cfg.Spread, "spread", 0, "each client sends its reports at random times within this window, not as one burst an observer links (e.g. 1h for real clients; 0 = back to back, for replays)")
	f.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "bound of each wait after ingest: relays draining, the release appearing in ClickHouse")
	f.DurationVar(&cfg.StartTimeout, "start-timeout", 2*time.Minute, "bound of each start-up step: local services, topics, stream, ClickHouse schema, roles")
	f.DurationVar(&cfg.IngestTimeout, "ingest-timeout", 0, "bound of the replay of the whole input (0 = 10 min + 10 ms per record + --spread per round of --workers clients)")
	f.BoolVar(&noProgress, "no-progress", false, "no progress bar on stderr (shown only when stderr is a terminal)")
	f.StringVar(&cfg.Metrics, "metrics", "", metricsHelp)
	c.MarkFlagRequired("input")
	return c, &cfg
}

// tokensFlag is --tokens on|off of run and ingest (off sets *off).
func tokensFlag(f *pflag.FlagSet, off *bool) {
	f.Var(&onOff{off: off}, "tokens", "Privacy Pass tokens and ARC credentials from the issuer: on, or off for comparison only (gives up the probe and Sybil protection)")
}

// onOff is a pflag.Value "on"/"off" that sets *off.
type onOff struct{ off *bool }

func (o *onOff) String() string {
	if o.off != nil && *o.off {
		return "off"
	}
	return "on"
}

func (o *onOff) Set(v string) error {
	switch v {
	case "on":
		*o.off = false
	case "off":
		*o.off = true
	default:
		return fmt.Errorf("%q: use on or off", v)
	}
	return nil
}

func (o *onOff) Type() string { return "on|off" }

// timeFormatFlag is --time-format of the commands that read a search log
// (ingest/aol.Options.TimeFormat).
func timeFormatFlag(f *pflag.FlagSet, p *string) {
	f.StringVar(p, "time-format", "", "QueryTime format: empty detects 2006-01-02 15:04:05, RFC 3339, Unix seconds or yymmddHHMMSS from the first good line; or aol, rfc3339, unix, excite, or a Go time layout (e.g. \"02/Jan/2006:15:04:05\")")
}
