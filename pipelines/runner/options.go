package runner

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	aggprio3 "github.com/crowdlog/crowdlog/aggregator/prio3"
	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/infra/metrics"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
	"github.com/crowdlog/crowdlog/release/stage"
)

// Options are the flags of `crowdlog run`: the pipeline's parameters (or
// --pipeline FILE) and the run-only flags, filling Config. AddFlags gives
// the defaults; Complete applies the pipeline file and checks the epoch
// flags once they are parsed.
type Options struct {
	Config
	PipelineFile string // --pipeline: the pipeline's parameters from this file
	NoProgress   bool   // --no-progress: no progress bar even on a terminal
}

// AddFlags adds the flags of `crowdlog run` to f, filling o.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	c := &o.Config
	f.StringVarP(&o.PipelineFile, "pipeline", "f", "", "pipeline file (crowdlog pipeline --help): app, policy, parameters, budget, epoch, tokens and partitions from it instead of their flags")
	f.StringVar(&c.Input, "input", "", "search log to replay, one client per AnonID: AOL or Excite TSV, plain or .gz; - reads stdin (spooled to --state first) (required)")
	aol.AddTimeFormatFlag(f, &c.TimeFormat)
	f.StringVar(&c.App, "app", "query", "mining application: "+fmt.Sprint(apps.Apps()))
	c.AppOptions.AddFlags(f)
	f.StringVar(&c.Policy, "policy", "ft-u", "policy: ft-u (k distinct users), ft-a (k reports), dp-a, dp-u, zealous or dp-su (DP set union: one artifact per user, the most frequent of its d most recent distinct; dp-gsu: Gaussian DP set union, the --d = m most frequent distinct, padded to m reports; docs/policies.md)")
	f.IntVar(&c.K, "k", 5, "threshold k of ft-u/ft-a: an artifact opens once k shares exist")
	c.DP.AddFlags(f)
	c.Budget.AddFlags(f, &c.Dataset)
	f.StringVar(&c.Epoch, "epoch", "all", "epoch name for the whole input (one OPRF key per epoch)")
	f.DurationVar(&c.EpochLength, "epoch-length", 0, "replay in scheduled epochs of this length (e.g. 168h): each record in the epoch its QueryTime falls in, named START-LENGTH (e.g. 20060227T000000Z-168h, aligned to the Unix epoch) as the randomness schedule names them; each epoch is released on its own")
	f.StringVar(&c.Export, "export", "", "write the released histogram here as TSV (header: app epoch policy item impressions users)")
	f.StringVar((*string)(&c.Summary), "summary", string(release.SummaryCoarse), release.SummaryHelp)
	f.StringVar(&c.NATS, "nats", "", "NATS URL (comma-separated list for a cluster); empty starts an embedded server with per-role credentials")
	c.NATSSecurity.AddFlags(f)
	f.StringVar(&c.NATSOperatorNKey, "nats-operator-nkey", "", "NKey seed of the operator's NATS credential (relay stream look-up, drain checks) with --nats; empty uses --nats-nkey for those too. With a credential the streams must exist (crowdlog streams)")
	f.Var(config.NewList(&c.Kafka), "kafka", "Kafka bootstrap brokers, comma-separated host:port list (or repeated); empty starts a kfake broker in --state")
	f.StringVar(&c.ClickHouse, "clickhouse", "", "ClickHouse native address (host:port); empty starts a local server in --state")
	f.StringVar(&c.Database, "database", "crowdlog", "ClickHouse database")
	f.StringVar(&c.StateDir, "state", "", "state directory (keys, broker data, ClickHouse); empty = a temporary directory removed afterwards")
	f.StringVar(&c.KeysDir, "keys", "", "keys directory (default STATE/keys; generated when missing unless --external)")
	f.IntVar(&c.Partitions, "partitions", 8, "partitions of the reports and decrypted topics when run creates them")
	f.BoolVar(&c.External, "external", false, "roles run elsewhere; only ingest, close the epoch and wait for the release")
	f.StringVar(&c.ControlKey, "control-key", "", "the pipeline operator's Ed25519 key (PEM) that signs the epoch open/close records (default KEYS/control-sign.key; created when missing unless --external, where a missing default leaves them unsigned)")
	AddTokensFlag(f, &c.TokensOff)
	f.IntVar(&c.RandomnessTokens, "randomness-tokens", 0, "N: randomness tokens (OPRF elements) the issuer gives each identity per epoch (0 = the largest number of distinct artifacts of one user of --input; d under dp-a/dp-u/zealous)")
	f.IntVar(&c.ReportTokens, "report-tokens", 0, "d: report tokens the issuer gives each identity per epoch, one per report (0 = the largest number of reports of one user of --input; the policy's d under dp-a/dp-u/zealous)")
	f.IntVar(&c.Workers, "workers", 0, "clients replayed concurrently (default: number of CPUs)")
	f.DurationVar(&c.Spread, "spread", 0, "each client sends its reports at random times within this window, not as one burst an observer links (e.g. 1h for real clients; 0 = back to back, for replays)")
	f.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "bound of each wait after ingest: relays draining, the release appearing in ClickHouse")
	f.DurationVar(&c.StartTimeout, "start-timeout", 2*time.Minute, "bound of each start-up step: local services, topics, stream, ClickHouse schema, roles")
	f.DurationVar(&c.IngestTimeout, "ingest-timeout", 0, "bound of the replay of the whole input (0 = 10 min + 10 ms per record + --spread per round of --workers clients)")
	f.BoolVar(&o.NoProgress, "no-progress", false, "no progress bar on stderr (shown only when stderr is a terminal)")
	f.StringVar(&c.Metrics, "metrics", "", metrics.FlagHelp)
	f.BoolVar(&c.MetricsExactCounts, metrics.ExactCountsFlag, false, metrics.ExactCountsHelp)
}

// Complete applies --pipeline to o.Config, refusing the pipeline flags
// set beside it (an --epoch given beside it names the epoch instead of the
// file's epoch.name: one pipeline, many epochs), and checks the epoch
// flags: with --epoch-length the epochs name themselves, so --epoch must
// not be given. f is o's parsed flag set; errors are config.UsageError.
func (o *Options) Complete(f *pflag.FlagSet) error {
	p, err := PipelineFlag(f, o.PipelineFile)
	if err != nil {
		return err
	}
	if p != nil {
		epoch := o.Epoch
		ApplyPipeline(&o.Config, p)
		if f.Changed("epoch") {
			o.Epoch, o.EpochLength = epoch, 0
		}
	}
	if o.EpochLength != 0 && !f.Changed("epoch") {
		o.Epoch = "" // scheduled epochs name themselves
	}
	if o.EpochLength != 0 && o.Epoch != "" {
		return config.UsageError{Err: fmt.Errorf("--epoch %q and --epoch-length %s: give one (scheduled epochs are named START-LENGTH)", o.Epoch, o.EpochLength)}
	}
	return nil
}

// IngestOptions are the flags of `crowdlog ingest`, filling IngestConfig.
type IngestOptions struct {
	IngestConfig
	PipelineFile string // --pipeline: app, policy, parameters, epoch and tokens from this file
	Metrics      string // --metrics: the address of /metrics; "" = off
	NoProgress   bool   // --no-progress
}

// AddFlags adds the flags of `crowdlog ingest` to f, filling o.
func (o *IngestOptions) AddFlags(f *pflag.FlagSet) {
	c := &o.IngestConfig
	f.StringVarP(&o.PipelineFile, "pipeline", "f", "", "pipeline file (crowdlog pipeline --help): app, policy, parameters, epoch and tokens from it instead of their flags (give the release role the same file)")
	f.StringVar(&c.Input, "input", "", "search log: AOL or Excite TSV, plain or .gz, or - for stdin (spooled to --state or the temp dir); a log without a valid record stops ingest at once (required)")
	aol.AddTimeFormatFlag(f, &c.TimeFormat)
	f.StringVar(&c.App, "app", "query", "mining application: "+fmt.Sprint(apps.Apps()))
	c.AppOptions.AddFlags(f)
	f.StringVar(&c.Policy, "policy", "ft-u", "policy: ft-u, ft-a, dp-a, dp-u, zealous, dp-su or dp-gsu (the release role must use the same)")
	f.IntVar(&c.K, "k", 5, "threshold k of ft-u/ft-a")
	c.DP.AddFlags(f)
	f.StringVar(&c.Epoch, "epoch", "all", "epoch name")
	f.StringVar(&c.NATS, "nats", natsconn.DefaultURL, "NATS URL; a comma-separated list for a cluster")
	c.NATSSecurity.AddFlags(f)
	f.StringVar(&c.KeysDir, "keys", "keys", "directory with relay-a.key.pub, relay-b.key.pub, aggregator.key.pub")
	f.IntVar(&c.Workers, "workers", 0, "clients replayed concurrently (default: number of CPUs)")
	f.DurationVar(&c.Spread, "spread", 0, "each client sends its reports at random times within this window, not as one burst an observer links (e.g. 1h for real clients; 0 = back to back, for replays)")
	f.StringVar(&c.StateDir, "state", "", "keep each replayed device's state (user secret per epoch, what it sent) under this directory, so a restarted ingest adds no second share; default: in memory")
	AddTokensFlag(f, &c.TokensOff)
	f.BoolVar(&c.Enroll, "enroll", false, "enroll every replayed identity in the enrollment list of --keys (as 'crowdlog keys enroll' would), for an issuer reading that directory")
	f.DurationVar(&c.DownstreamWait, "downstream-wait", 10*time.Second, "after sending, wait this long for the aggregators' counts of the pipeline and epoch (admitted, refused by reason; `aggregate --nats`) and print them; 0: do not ask")
	f.StringVar(&o.Metrics, "metrics", "", metrics.FlagHelp)
	f.BoolVar(&o.NoProgress, "no-progress", false, "no progress bar on stderr (shown only when stderr is a terminal)")
}

// Complete applies --pipeline to o.IngestConfig, refusing the pipeline
// flags set beside it; an --epoch given beside it wins (one pipeline,
// many epochs). Errors are config.UsageError.
func (o *IngestOptions) Complete(f *pflag.FlagSet) error {
	p, err := PipelineFlag(f, o.PipelineFile)
	if err != nil || p == nil {
		return err
	}
	epoch := o.Epoch
	ApplyPipelineIngest(&o.IngestConfig, p)
	if f.Changed("epoch") {
		o.Epoch = epoch
	}
	return nil
}

// AddFlags adds the flags of `crowdlog pdd` to f, filling c.
func (c *PDDConfig) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&c.Mode, "mode", pipeline.DefaultPDDMode, "groups (blinded groups, one aggregator) or prio3 (leader and helper aggregators, the Prio3 VDAF)")
	f.StringVar(&c.PipelineFile, "pipeline", "", "pipeline file whose pdd section gives --mode and the measurement (crowdlog pipeline show prints one)")
	f.StringVar(&c.Input, "input", "", "AOL TSV log (plain or .gz)")
	f.StringVar(&c.Campaign, "campaign", "pdd", "campaign name")
	f.StringVar(&c.Keywords, "keywords", "", "monitored keyword list, one per line (default: embedded "+keywords.DefaultName+")")
	f.StringSliceVar(&c.Blacklist, "blacklist", nil, "keywords no client ever shares (comma-separated; normalized like the keyword list, so any case matches)")
	f.IntVar(&c.MaxUsers, "max-users", 0, "only the first N users of the log (0 = all)")
	f.IntVar(&c.MaxDays, "max-days", 0, "only the first N days of the log (0 = all)")
	f.StringVar(&c.Timezone, "timezone", "", "IANA time zone whose calendar days are the rounds (e.g. Asia/Shanghai); a query instance ends at its midnight (default UTC)")
	f.StringVar(&c.Measurement, "measurement", pipeline.DefaultMeasurement, "prio3: counts (per keyword the day's count clipped to 2^bits − 1) or presence (0/1, at most --max-weight keywords)")
	f.IntVar(&c.Bits, "bits", pipeline.DefaultBits, "prio3 counts: bits per keyword count (clipped to 2^bits − 1)")
	f.IntVar(&c.MaxWeight, "max-weight", 0, "prio3 presence: the most keywords one client reports per day")
	f.IntVar(&c.Chunk, "chunk", 0, "prio3: the proof's chunk length (0 = √(L·bits))")
	f.IntVar(&c.L1, "l1", p3.DefaultL1, "prio3 counts: the bound S on one client's daily sum of counts (clients keep their most searched keywords within it); the noise's sensitivity")
	f.BoolVar(&c.ExactShares, "exact-shares", false, "prio3: the aggregators release exact shares (with --epsilon 0): exact counts, but a malicious leader padding a batch with its own reports would read one client's vector; without it --epsilon 0 means the default ε = 1 per person-day")
	f.IntVar(&c.MinBatchSize, "min-batch-size", pipeline.DefaultMinBatchSize, "prio3: the fewest reports a day is released with")
	f.Float64Var(&c.StatusEpsilon, "status-epsilon", p3.AutoStatusEpsilon, "prio3: "+aggprio3.StatusEpsilonHelp)
	f.Float64Var(&c.StatusDelta, "status-delta", p3.DefaultStatusDelta, "prio3: "+aggprio3.StatusDeltaHelp)
	f.IntVar(&c.GroupSize, "group-size", pipeline.DefaultGroupSize, "clients per group (PDD §4.2)")
	f.IntVar(&c.Delay, "delay", 2, "days the aggregator waits for late members (PDD §4.3)")
	f.IntVar(&c.RecoveryDays, "recovery-days", 1, "days after the delay for survivors' recovery answers")
	f.BoolVar(&c.Heuristic, "heuristic", false, "group only clients active on ≥ 1/δ of past days (PDD eq. 5)")
	f.StringVar(&c.Online, "online", "active", "when clients ping: active (days with log records) or all (every day)")
	f.Float64Var(&c.Dropout, "dropout", 0, "probability that a client is offline on a day: groups, it sends no ping that day (not grouped; its vectors and recovery answers wait for its next ping); prio3, it does not upload that day's report")
	f.Uint64Var(&c.Seed, "seed", 1, "seed of --dropout")
	f.Float64Var(&c.Epsilon, "epsilon", 0, "Laplace noise on each released daily count; groups: at the release stage, sensitivity --max-count (0 = exact); prio3: ε per person-day, a draw of scale S/ε at each aggregator, S = --l1 (--max-weight for presence); 0 = 1 unless --exact-shares")
	f.IntVar(&c.MaxCount, "max-count", 0, "groups with --epsilon > 0: each client clips each keyword's daily count to this before blinding, the noise's sensitivity (0 = 10); without noise counts are not clipped")
	f.StringVar(&c.NATS, "nats", "", "NATS URL; empty starts an embedded server")
	f.Var(config.NewList(&c.Kafka), "kafka", "Kafka bootstrap brokers, comma-separated host:port list (or repeated); empty starts kfake")
	f.StringVar(&c.ClickHouse, "clickhouse", "", "ClickHouse native address; empty starts a local server")
	f.StringVar(&c.Database, "database", "crowdlog", "ClickHouse database")
	f.StringVar(&c.StateDir, "state", "", "state directory: keys, broker data and the local ClickHouse (DIR/clickhouse; serve it again with crowdlog clickhouse --dir DIR/clickhouse); default: a temporary one, removed at the end")
	f.StringVar(&c.Export, "export", "", "write the released daily counts as TSV, one line per (released day, keyword), zeros included, and one per withheld day with its reason (header: campaign day keyword count confidence epsilon status reason; docs/pdd.md, Export)")
	f.StringVar(&c.Dataset, "dataset", "default", "privacy budget noisy days spend from, per (dataset, day); campaigns that share days and a dataset share its budget")
	f.Float64Var(&c.Budget.Epsilon, "budget-epsilon", 0, "ε budget per (dataset, day): a noisy day over it is withheld (reason budget) and the run fails at the end (groups: 0 = no limit; prio3: 0 = 1)")
	f.BoolVar(&c.ExportNonZero, "export-nonzero", false, "leave zero counts out of --export (a released day with none keeps one line)")
	f.IntVar(&c.Workers, "workers", 8, "clients pinging concurrently")
	f.BoolVar(&c.NoProgress, "no-progress", false, "no progress lines on stderr (prio3 mode: one per day and phase)")
	f.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "bound of each wait: relays draining, the aggregators preparing, the release appearing in ClickHouse")
}

// AddTokensFlag adds --tokens on|off (run and ingest) to f; off sets *off.
func AddTokensFlag(f *pflag.FlagSet, off *bool) {
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

// LoadPipeline is pipeline.Load with an invalid file a config.UsageError
// (exit status 2).
func LoadPipeline(path string) (*pipeline.Pipeline, error) {
	p, err := pipeline.Load(path)
	if errors.Is(err, pipeline.ErrInvalid) {
		return nil, config.UsageError{Err: err}
	}
	return p, err
}

// PipelineFlag loads the --pipeline file path of a command whose parsed
// flags are f (nil, nil when path is empty), refusing the pipeline flags
// set beside it (config.UsageError).
func PipelineFlag(f *pflag.FlagSet, path string) (*pipeline.Pipeline, error) {
	if path == "" {
		return nil, nil
	}
	var set []string
	for _, n := range PipelineFlags {
		if fl := f.Lookup(n); fl != nil && fl.Changed {
			set = append(set, "--"+n)
		}
	}
	if len(set) > 0 {
		return nil, config.UsageError{Err: fmt.Errorf("--pipeline gives the pipeline; %s set it too: put them in the file (crowdlog pipeline show prints it) or drop --pipeline",
			strings.Join(set, ", "))}
	}
	return LoadPipeline(path)
}

// PipelineFlags are the flags whose values a pipeline file gives: with
// --pipeline they must not be given.
var PipelineFlags = []string{"epoch-length", "app", "url-level", "session-gap", "pair-order", "rank-buckets", "dwell-buckets", "length-buckets",
	"policy", "k", "epsilon", "delta", "d", "users", "count-share", "shamir-k", "slack", "lambda",
	"dataset", "budget-epsilon", "budget-delta", "summary", "tokens", "randomness-tokens", "report-tokens", "partitions"}

// ReleaseOptions are the flags of `crowdlog release`: the stage's options
// (stage.Options) and the pipeline it serves, from --pipeline FILE or the
// pipeline flags. Complete resolves that pipeline into the stage's Policy
// and digest.
type ReleaseOptions struct {
	stage.Options
	PipelineFile string       // --pipeline
	App          string       // --app: part of the pipeline digest
	AppOptions   apps.Options // the application's options
	PolicyName   string       // --policy
	K            int          // --k of ft-u/ft-a
	DP           policy.Params
}

// DefaultReleaseOptions returns the options of `crowdlog release` without
// flags.
func DefaultReleaseOptions() ReleaseOptions {
	return ReleaseOptions{Options: stage.DefaultOptions(), App: "query", PolicyName: "ft-u", K: 5}
}

// AddFlags adds the flags of `crowdlog release` to f, filling o; the
// values in o are the defaults shown.
func (o *ReleaseOptions) AddFlags(f *pflag.FlagSet) {
	o.Options.AddFlags(f)
	f.StringVarP(&o.PipelineFile, "pipeline", "f", o.PipelineFile, "pipeline file (crowdlog pipeline --help): policy, parameters, budget and summary from it instead of their flags")
	f.StringVar(&o.App, "app", o.App, "the pipeline's application (its options below): part of the pipeline digest items must carry")
	o.AppOptions.AddFlags(f)
	f.StringVar(&o.PolicyName, "policy", o.PolicyName, "the pipeline's policy: ft-u, ft-a (exact counts), dp-a, dp-u, zealous, dp-su or dp-gsu (noise, ledger); only items sealed for it are released")
	f.IntVar(&o.K, "k", o.K, "threshold k of ft-u/ft-a (DP policies derive their Shamir k)")
	o.DP.AddFlags(f)
}

// Complete applies --pipeline (refusing the pipeline flags set beside
// it), resolves the policy and computes the pipeline digest into
// o.Options; f is o's parsed flag set. Errors are config.UsageError.
func (o *ReleaseOptions) Complete(f *pflag.FlagSet) error {
	p, err := PipelineFlag(f, o.PipelineFile)
	if err != nil {
		return err
	}
	if p != nil {
		var cfg Config
		ApplyPipeline(&cfg, p)
		o.PolicyName, o.K, o.DP, o.Dataset, o.Budget, o.Summary = cfg.Policy, cfg.K, cfg.DP, cfg.Dataset, cfg.Budget, string(cfg.Summary)
		o.App, o.AppOptions = cfg.App, cfg.AppOptions
	}
	if o.Policy, err = ResolvePolicy(o.PolicyName, o.K, o.DP); err != nil {
		return config.UsageError{Err: err}
	}
	if o.Pipeline, err = pipeline.Digest(o.App, o.AppOptions, o.Policy); err != nil {
		return config.UsageError{Err: err}
	}
	return nil
}

// ValidatePipeline loads the pipeline file path (LoadPipeline) and writes
// a line saying it is valid to w.
func ValidatePipeline(w io.Writer, path string) error {
	p, err := LoadPipeline(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: pipeline %s is valid (app %s, policy %s)\n", path, p.Name, p.App.Name, p.Policy.Kind)
	return nil
}

// ShowPipeline loads the pipeline file path (LoadPipeline) and writes it
// to w with every default filled in, after a comment with its digest.
func ShowPipeline(w io.Writer, path string) error {
	p, err := LoadPipeline(path)
	if err != nil {
		return err
	}
	b, err := p.Show()
	if err != nil {
		return err
	}
	if d, err := p.Digest(); err == nil {
		b = append([]byte("# pipeline digest: "+pipeline.DigestString(d)+"\n"), b...)
	} else {
		b = append([]byte("# pipeline digest: not computable: "+err.Error()+"\n"), b...)
	}
	_, err = w.Write(b)
	return err
}
