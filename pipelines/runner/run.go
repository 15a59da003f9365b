package runner

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/metrics"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/vss"
	"github.com/crowdlog/crowdlog/randomness"
	rndoptions "github.com/crowdlog/crowdlog/randomness/options"
	"github.com/crowdlog/crowdlog/relays"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
	"github.com/crowdlog/crowdlog/release/stage"
)

// Config is one `crowdlog run`.
type Config struct {
	// Input is the search log (ingest/aol: AOL or Excite TSV, plain or
	// gzip), or "-" for standard input, spooled to StateDir first (run reads
	// its input more than once).
	Input string
	// TimeFormat is Input's QueryTime format (aol.Options.TimeFormat): ""
	// detects it from the first good line (AOL, RFC 3339, Unix seconds,
	// yymmddHHMMSS); a name or a Go layout reads only that. A given format
	// is applied while Input is spooled to StateDir as AOL TSV, which the
	// replay then reads.
	TimeFormat string
	App        string // mining application, e.g. "query"
	Policy     string // "ft-u", "ft-a", "dp-a", "dp-u" or "zealous" (release/policy)
	K          int    // threshold k of ft-u/ft-a (DP policies derive their Shamir k)
	Epoch      string // epoch name when EpochLength is 0: the whole input is one epoch (default "all")
	// EpochLength > 0 replays the input in scheduled epochs of this length
	// (e.g. 168h): each record goes to the epoch its QueryTime falls in,
	// named START-LENGTH as the randomness service's schedule names them
	// (protocol.ScheduleEpoch), and each epoch is opened, replayed,
	// closed and released on its own (SplitEpochs). Epoch must then be "".
	EpochLength time.Duration

	NATS string // NATS URL, or comma-separated URLs of a cluster; "" starts an embedded server
	// NATSSecurity is the credential and TLS of the run's NATS
	// connections when NATS is given. The embedded server ignores it: it
	// runs with the permission table of infra/natsauth on and gives every
	// role in process (and the replayed clients) its own NKey.
	NATSSecurity natsconn.Security
	// NATSOperatorNKey, when set, is the NKey seed file of the operator's
	// credential (natsauth.Operator, with NATSSecurity's TLS) for the
	// relay stream and the drain checks against a NATS given by address;
	// otherwise NATSSecurity serves for those too.
	NATSOperatorNKey string
	Kafka            string // Kafka bootstrap brokers "host:port[,host:port...]"; "" starts kfake with a data dir
	ClickHouse       string // ClickHouse native address; "" starts a local server
	Database         string // ClickHouse database; default "crowdlog"
	StateDir         string // keys, broker data, ClickHouse dir; "" = a temp dir removed at the end
	KeysDir          string // default StateDir/keys
	Partitions       int    // partitions of the reports topic when creating it; default 8
	// TopicRetention > 0 makes the reports and decrypted topics keep
	// their records at least this long (kafka.EnsureRetention); with
	// EpochLength, 0 means 2 × (EpochLength + the default grace), as a
	// pipeline file's default.
	TopicRetention time.Duration

	// External: randomness, relays, aggregator and release already run
	// elsewhere against the same addresses and keys; run only ingests,
	// closes the epoch and waits for the release. The operator opens the
	// named epoch at the randomness service first (`crowdlog randomness
	// open-epoch`); clients of an unopened epoch stop with
	// protocol.ErrEpochNotOpen. In process, run opens Epoch itself.
	External bool
	// ControlKey is the file of the pipeline operator's Ed25519 key that
	// signs the epoch open and close records (keydir.ControlSignKey);
	// default KeysDir/control-sign.key. In process it is created when
	// missing and the aggregator verifies with its public half, so
	// unsigned or forged records are refused. With External it is read
	// when it exists; without it the records are unsigned (logged), which
	// aggregators started with --control-pub refuse.
	ControlKey string

	// DP holds the parameters of the DP policies (Epsilon, Delta, D,
	// Users, CountShare, ShamirK, Slack, Lambda; Kind and K are taken from
	// Policy and K). Epsilon and Users are required for a DP Policy: U is
	// public configuration, never counted from Input.
	DP policy.Params
	// Dataset and Budget: DP releases spend from the privacy budget of
	// (Dataset, Epoch) in the ClickHouse table privacy_ledger; a release
	// over Budget is refused (zero fields = no limit). Dataset default
	// "default".
	Dataset string
	Budget  release.Budget

	// AppOptions configure the application (--url-level, --session-gap,
	// bucket flags); zero fields mean the defaults.
	AppOptions apps.Options

	// Summary is how much of the undecrypted summary the release publishes
	// (release.SummaryMode: "" = coarse, exact, none); DP releases withhold
	// theirs whatever the mode.
	Summary release.SummaryMode
	// Spread is each client's window for sending its reports
	// (ingest.Client.Spread); 0 sends them back to back.
	Spread time.Duration

	// TokensOff turns Privacy Pass tokens off (--tokens off), for
	// comparison only: no issuer, and the randomness service and the
	// aggregator take requests and reports without tokens, which gives up
	// the probe and Sybil protection of tokens (logged). By default run
	// starts an issuer in process, gives every replayed AnonID its own
	// enrolled identity, and each client spends one randomness token per
	// OPRF element, one report token per report and, under FT_u, one ARC
	// credential (FT_u counts identities). With External, run enrolls the
	// identities in KeysDir and uses tokens when an issuer answers for the
	// epoch within ExternalIssuerProbe; otherwise it replays without them
	// (logged; a deployment that requires tokens then refuses the clients).
	TokensOff bool
	// RandomnessTokens (N) and ReportTokens (d) are the issuer's budgets
	// per identity and epoch; 0 = what keeps the release exact: under
	// FT_u/FT_a the largest number of distinct artifacts and of reports of
	// one user of Input, under DP_a/DP_u/ZEALOUS the policy's d for both.
	RandomnessTokens, ReportTokens int

	// Metrics, when set (e.g. "127.0.0.1:9100"), serves /metrics, /healthz and
	// /readyz for every in-process role.
	Metrics string
	// MetricsExactCounts exports ExactCountMetrics under a DP policy too
	// (--metrics-exact-counts); a threshold policy exports them anyway.
	MetricsExactCounts bool
	// afterRelease, in tests, is called with the metrics address once the
	// release is in ClickHouse, while the roles still run.
	afterRelease func(metricsAddr string)
	// controlPub: the in-process aggregator verifies control records with
	// it (loadControlKey).
	controlPub ed25519.PublicKey

	Export   string    // write the released histogram as TSV here
	Workers  int       // concurrent clients; default GOMAXPROCS
	Progress io.Writer // progress bar destination; nil = none

	// StartTimeout bounds each start-up step: a local service, topics, the
	// relay stream, the ClickHouse schema, the roles, the open-epoch marker.
	// Default 2 min.
	StartTimeout time.Duration
	// IngestTimeout bounds the replay of the whole input. Default: 10 min
	// plus 10 ms per record of Input, i.e. at least 100 records/s (the
	// bundled log runs at ~2,800 records/s on 2 cores, docs/benchmarks.md),
	// plus Spread per round of Workers clients.
	IngestTimeout time.Duration
	// Timeout bounds each wait after ingest: the publisher's flush, the
	// relays draining, the close-epoch marker, the release appearing in
	// ClickHouse, reading it back. Default 10 min.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Summary is what a run did.
type Summary struct {
	Users                int
	LogLines, BadLines   int
	Sent                 int64 // reports published by clients
	Relayed              int64 // reports forwarded to Kafka by relay B (in-process runs)
	RelayDropped         int64
	RelayDrops           map[string]uint64 // by reason, over both relays (in-process runs)
	Decrypted            int64             // reports decrypted by the aggregator (in-process runs)
	AggregatorDropped    int64             // dropped by the aggregator, incl. duplicates from redelivery
	Policy               string            // the resolved policy with its parameters and achieved (ε, δ)
	Pipeline             string            // the pipeline digest (pipelines/pipeline.Digest, hex) bound into every report
	Epochs               []EpochSummary    // per epoch, in time order (one, Config.Epoch, without EpochLength)
	Tokens               string            // "off", or the budgets per identity and the identities enrolled
	Released             int               // released items
	ReleasedImpressions  uint64
	Undecrypted          []release.Undecrypted
	Elapsed              time.Duration
	Metrics              string // address serving /metrics, when Config.Metrics was set
	NATS, Kafka, ClickHs string
}

// Print writes the summary for humans.
func (s *Summary) Print(w io.Writer) {
	fmt.Fprintf(w, "crowdlog run: %d clients, %d log lines (%d bad)\n", s.Users, s.LogLines, s.BadLines)
	fmt.Fprintf(w, "  reports sent      %d\n", s.Sent)
	if s.Relayed > 0 || s.Decrypted > 0 {
		fmt.Fprintf(w, "  reports relayed   %d (dropped %d %v)\n", s.Relayed, s.RelayDropped, s.RelayDrops)
		fmt.Fprintf(w, "  reports decrypted %d (aggregator dropped %d, e.g. redelivered duplicates)\n", s.Decrypted, s.AggregatorDropped)
	}
	if s.Policy != "" {
		fmt.Fprintf(w, "  policy            %s\n", s.Policy)
	}
	if s.Pipeline != "" {
		fmt.Fprintf(w, "  pipeline digest   %s\n", s.Pipeline)
	}
	if s.Tokens != "" {
		fmt.Fprintf(w, "  tokens            %s\n", s.Tokens)
	}
	fmt.Fprintf(w, "  items released    %d (%d impressions)\n", s.Released, s.ReleasedImpressions)
	if len(s.Epochs) > 1 {
		fmt.Fprintf(w, "  epochs            %d\n", len(s.Epochs))
		for _, e := range s.Epochs {
			fmt.Fprintf(w, "    %-24s %6d clients %8d reports %6d items released (%d impressions)\n", e.Name, e.Users, e.Sent, e.Released, e.ReleasedImpressions)
		}
	}
	var tags, reps uint64
	for _, u := range s.Undecrypted {
		tags += u.Tags
		reps += u.Tags * u.Reports
	}
	fmt.Fprintf(w, "  undecrypted       %d artifacts (%d reports), summarized as counts only\n", tags, reps)
	fmt.Fprintf(w, "  elapsed           %s\n", s.Elapsed.Round(time.Millisecond))
}

// Run runs the pipeline end to end and returns its summary.
//
// It reads Input once before starting anything (CheckInput): a log with no
// valid record ends the run at once with an error naming its first bad
// lines and the accepted formats (wrapping ErrNoRecords). Every later wait
// is bounded (StartTimeout, IngestTimeout, Timeout); an expired bound is an
// error naming the stage, the bound and the counts reached (errors.Is
// context.DeadlineExceeded). With EpochLength the input is replayed epoch
// by epoch (each record in the scheduled epoch its QueryTime falls in) and
// each epoch is released on its own; the summary lists them.
func Run(ctx context.Context, cfg Config) (sum *Summary, err error) {
	start := time.Now()
	r := &run{cfg: cfg, log: cfg.Logger}
	if r.log == nil {
		r.log = slog.Default()
	}
	defer func() {
		for i := len(r.cleanup) - 1; i >= 0; i-- {
			r.cleanup[i]()
		}
		if r.sum != nil {
			r.sum.Elapsed = time.Since(start)
		}
	}()
	if err := r.prepare(); err != nil {
		return r.sum, err
	}
	if err := r.startServices(ctx); err != nil {
		return r.sum, err
	}
	if err := r.startRoles(ctx); err != nil {
		return r.sum, err
	}
	var items []release.Item
	for _, e := range r.epochs {
		got, err := r.runEpoch(ctx, e)
		if err != nil {
			return r.sum, err
		}
		items = append(items, got...)
	}
	return r.sum, r.finish(items)
}

// run is the state of one Run between its phases.
type run struct {
	cfg     Config
	log     *slog.Logger
	sum     *Summary
	cleanup []func() // run in reverse order when Run returns

	app          apps.App
	pol          *policy.Policy
	digest       [32]byte
	check        InputCheck
	epochs       []epochInput
	plan         *tokenPlan // nil: tokens off
	tokN, tokD   int
	brokers      []string
	nc           *nats.Conn          // the replayed clients' (natsauth.Client)
	js           jetstream.JetStream // on nc
	opjs         relayJS             // the operator's: relay streams, drain checks (js unless natsKeys)
	natsKeys     string              // the embedded server's role NKeys; "" when NATS was given
	conns        []func()            // Close of every NATS connection, run after the roles stopped
	writer       *release.Writer
	reg          *prometheus.Registry
	rc           *oprfclient.Client
	pub          *publish.Publisher
	roles        inProcess
	refusedMu    sync.Mutex
	refused      error
	ingestBudget time.Duration
	controlKey   ed25519.PrivateKey // signs the epoch control records (nil: unsigned)
}

// inProcess are the roles Run started in this process (none when External).
type inProcess struct {
	rs         *randomness.Service
	agg        *aggregator.Service
	iss        *issuer.Service
	relayStats []*relays.Stats
}

// prepare checks the configuration and the input, resolves the policy and
// its pipeline digest, plans the tokens and cuts the input into epochs.
func (r *run) prepare() error {
	cfg, log := &r.cfg, r.log
	if err := cfg.defaults(); err != nil {
		return err
	}
	var err error
	if r.app, err = apps.LookupWith(cfg.App, cfg.AppOptions); err != nil {
		return err
	}
	if cfg.Input != aol.Stdin {
		if _, err := os.Stat(cfg.Input); err != nil {
			return fmt.Errorf("input log: %w", err)
		}
	}
	if cfg.Summary, err = release.ParseSummaryMode(string(cfg.Summary)); err != nil {
		return fmt.Errorf("--summary: %w", err)
	}
	if _, err := policy.Parse(cfg.Policy); err != nil {
		return err
	}
	if cfg.StateDir == "" {
		if cfg.StateDir, err = os.MkdirTemp("", "crowdlog-run-"); err != nil {
			return err
		}
		dir := cfg.StateDir
		r.cleanup = append(r.cleanup, func() { os.RemoveAll(dir) })
	} else if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if cfg.KeysDir == "" {
		cfg.KeysDir = filepath.Join(cfg.StateDir, "keys")
	}
	// the input, read once before anything starts: fail fast on a log
	// without a valid record; spool stdin or a given time format
	input, spool := cfg.Input, ""
	if cfg.Input == aol.Stdin || !autoFormat(cfg.TimeFormat) {
		spool = filepath.Join(cfg.StateDir, SpoolName)
		input = spool
		r.cleanup = append(r.cleanup, func() { os.Remove(spool) })
	}
	if r.check, err = CheckInput(cfg.Input, aol.Options{TimeFormat: cfg.TimeFormat}, spool); err != nil {
		return err
	}
	r.sum = &Summary{LogLines: r.check.Stats.Lines, BadLines: r.check.Stats.Bad}
	if r.check.Stats.Bad > 0 {
		log.Warn("input: bad lines will be skipped", "summary", r.check.Stats.String())
	}
	log.Info("input checked", "records", r.check.Stats.Records, "users", r.check.Users,
		"time_format", r.check.Stats.TimeFormat, "columns", r.check.Stats.Columns, "spooled", spool != "")
	if cfg.IngestTimeout <= 0 {
		cfg.IngestTimeout = ingestBound(r.check, cfg.Spread, cfg.Workers)
	}
	// U comes from the configuration (policy.users, --users), never from
	// counting the input: neighbouring logs must get the same (σ, τ, δ)
	if r.pol, err = ResolvePolicy(cfg.Policy, cfg.K, cfg.DP); err != nil {
		return err
	}
	if r.digest, err = pipeline.Digest(r.app.Name(), cfg.AppOptions, r.pol); err != nil {
		return err
	}
	r.sum.Policy, r.sum.Pipeline = r.pol.String(), pipeline.DigestString(r.digest)
	if cfg.TokensOff {
		r.sum.Tokens = "off"
		log.Warn(tokensOffWarning)
	} else {
		if r.plan, err = planTokens(input, aol.Options{}, r.app, r.pol, ""); err != nil {
			return err
		}
		r.tokN, r.tokD = r.plan.budgets(cfg.RandomnessTokens, cfg.ReportTokens, r.pol)
		r.sum.Tokens = fmt.Sprintf("on: %d randomness and %d report tokens per identity (N, d), %d identities enrolled", r.tokN, r.tokD, len(r.plan.keys))
		log.Info("tokens on", "randomness_tokens", r.tokN, "report_tokens", r.tokD, "identities", len(r.plan.keys))
	}
	if cfg.EpochLength > 0 {
		dir := filepath.Join(cfg.StateDir, "epochs")
		r.cleanup = append(r.cleanup, func() { os.RemoveAll(dir) })
		if r.epochs, err = SplitEpochs(input, cfg.EpochLength, dir); err != nil {
			return err
		}
		log.Info("input: replayed by epoch", "epoch_length", cfg.EpochLength, "epochs", len(r.epochs),
			"first", r.epochs[0].Name, "last", r.epochs[len(r.epochs)-1].Name)
	} else {
		r.epochs = []epochInput{{Name: cfg.Epoch, Input: input, Records: r.check.Stats.Records, Users: r.check.Users}}
	}
	return nil
}

// startServices starts the local services (those without an address),
// creates the topics, keys and relay stream, connects to NATS and opens
// the ClickHouse writer.
func (r *run) startServices(ctx context.Context) error {
	cfg := &r.cfg
	var stopLocal func()
	err := bounded(ctx, "the local services (NATS, Kafka, ClickHouse) to start", cfg.StartTimeout, func(ctx context.Context) error {
		var err error
		stopLocal, err = startLocal(ctx, cfg.StateDir, &cfg.NATS, &cfg.Kafka, &cfg.ClickHouse, cfg.Partitions, &r.natsKeys)
		return err
	})
	if stopLocal != nil {
		r.cleanup = append(r.cleanup, stopLocal)
	}
	r.cleanup = append(r.cleanup, func() { closeAll(r.conns) })
	if err != nil {
		return err
	}
	r.sum.NATS, r.sum.Kafka, r.sum.ClickHs = cfg.NATS, cfg.Kafka, cfg.ClickHouse
	r.brokers = strings.Split(cfg.Kafka, ",")
	if err := bounded(ctx, "Kafka topics at "+r.brokers[0], cfg.StartTimeout, func(ctx context.Context) error {
		if err := kafka.EnsureTopics(ctx, r.brokers[0], cfg.Partitions, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
			return err
		}
		retention := cfg.TopicRetention
		if retention == 0 && cfg.EpochLength > 0 {
			retention = 2 * (cfg.EpochLength + pipeline.DefaultGrace)
		}
		return kafka.EnsureRetention(ctx, r.brokers[0], retention, protocol.ReportsTopic, protocol.DecryptedTopic)
	}); err != nil {
		return err
	}
	if !cfg.External {
		if err := keydir.EnsureKeys(cfg.KeysDir); err != nil {
			return err
		}
	}
	if err := r.loadControlKey(); err != nil {
		return err
	}
	if r.plan != nil {
		// the operator's part: the replayed identities in the enrollment
		// list the issuer reads (the epochs' issuer keys: runEpoch)
		if err := r.plan.enroll(cfg.KeysDir); err != nil {
			return err
		}
	}
	if r.nc, r.js, err = r.connect(natsauth.Client, "crowdlog-run"); err != nil {
		return err
	}
	// the operator's part (the relay stream, the drain checks) has its
	// own credential where there is one; the replayed clients only theirs
	// with a credential the server runs natsauth's generated
	// configuration: one account per role
	credential := cfg.NATSOperatorNKey != "" || cfg.NATSSecurity.NKeyFile != ""
	if r.opjs, err = operatorJS(r.connect, "crowdlog-run-operator", r.natsKeys != "" || credential); err != nil {
		return err
	}
	if err := bounded(ctx, "the JetStream streams and buckets", cfg.StartTimeout, func(ctx context.Context) error {
		return ensureStreams(ctx, r.connect, r.natsKeys == "" && credential, r.natsKeys != "" || credential, r.opjs)
	}); err != nil {
		return err
	}
	if err := bounded(ctx, "the ClickHouse schema at "+cfg.ClickHouse, cfg.StartTimeout, func(ctx context.Context) error {
		var err error
		r.writer, err = releaseWriter(ctx, *cfg)
		return err
	}); err != nil {
		return err
	}
	r.cleanup = append(r.cleanup, func() { r.writer.Close() })
	if r.pol.Kind.IsDP() {
		// fail before ingesting when a release would be refused anyway
		for _, e := range r.epochs {
			if err := bounded(ctx, "the privacy budget in ClickHouse", cfg.StartTimeout, func(ctx context.Context) error {
				return r.writer.CheckBudget(ctx, r.spend(e.Name), cfg.Budget)
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// key and spend are epoch's release key and privacy spend.
func (r *run) key(epoch string) release.Key {
	return release.Key{App: r.app.Name(), Epoch: epoch, Policy: string(r.pol.Kind), K: r.pol.ShamirK}
}

func (r *run) spend(epoch string) release.Spend {
	k := r.key(epoch)
	return release.Spend{Dataset: r.cfg.Dataset, Epoch: epoch, App: k.App, Policy: k.Policy, K: k.K,
		Epsilon: r.pol.AchievedEpsilon, Delta: r.pol.AchievedDelta}
}

// startRoles serves the metrics and, unless External, starts the roles in
// process on their own context (stopped when Run returns), bounded by a
// watchdog; it builds the client side's randomness client and publisher.
func (r *run) startRoles(ctx context.Context) error {
	cfg := &r.cfg
	r.reg = metrics.NewRegistry()
	// the in-process responders' refused replies, as every role's /metrics
	if err := natsconn.RegisterMetrics(r.reg); err != nil {
		return err
	}
	if cfg.Metrics != "" {
		addr, err := metrics.Serve(ctx, cfg.Metrics, r.reg, nil)
		if err != nil {
			return err
		}
		r.sum.Metrics = addr.String()
		r.log.Info("metrics", "url", "http://"+r.sum.Metrics+"/metrics")
	}
	r.rc = &oprfclient.Client{NC: r.nc, PinFile: filepath.Join(cfg.KeysDir, keydir.RandomnessPins)}
	r.pub = &publish.Publisher{JS: r.js, Subject: protocol.RelaySubject("a")}
	RegisterPublisher(r.reg, r.pub)
	svcCtx, stopServices := context.WithCancelCause(ctx)
	svc := &errgroup.Group{}
	r.cleanup = append(r.cleanup, func() { stopRoles(stopServices, svc, r.log) })
	if cfg.External {
		a, b, _, err := keydir.LoadRoute(cfg.KeysDir)
		if err != nil {
			return err
		}
		return bounded(ctx, "relays a and b to announce their keys", cfg.StartTimeout, func(ctx context.Context) error {
			return CheckRoute(ctx, r.nc, a, b, r.log)
		})
	}
	watch := time.AfterFunc(cfg.StartTimeout, func() {
		stopServices(fmt.Errorf("waited %s for the roles to start: %w", cfg.StartTimeout, context.DeadlineExceeded))
	})
	err := startRoles(svcCtx, svc, *cfg, r.connect, r.brokers, r.pol, r.digest, r.reg, r.log, &r.roles,
		tokenLimits{on: r.plan != nil, n: r.tokN, d: r.tokD}, func(err error) {
			r.refusedMu.Lock()
			defer r.refusedMu.Unlock()
			r.refused = err
		})
	if !watch.Stop() {
		err = context.Cause(svcCtx)
	}
	return err
}

// runEpoch opens epoch e everywhere, replays its records, closes it once
// the relays drained and returns its release as read back from ClickHouse.
func (r *run) runEpoch(ctx context.Context, e epochInput) ([]release.Item, error) {
	cfg, log := &r.cfg, r.log
	if err := r.openEpoch(ctx, e.Name); err != nil {
		return nil, err
	}
	a, b, ag, err := keydir.LoadRoute(cfg.KeysDir)
	if err != nil {
		return nil, err
	}
	client := newClient(r.app, e.Name, r.pol, r.digest, cfg.Spread, r.rc, a, b, ag, r.pub)
	rp := &ingest.Replay{Client: client, Workers: cfg.Workers, Progress: cfg.Progress, Logger: log}
	if r.plan != nil {
		r.plan.replayTokens(rp, r.nc, r.rc, log)
	}
	log.Info("ingest: replaying log", "app", r.app.Name(), "epoch", e.Name, "records", e.Records, "policy", r.pol.String(),
		"bound", cfg.IngestTimeout)
	ictx, icancel := context.WithTimeoutCause(ctx, cfg.IngestTimeout, errBound)
	rsum, err := rp.Run(ictx, e.Input)
	icancel()
	r.sum.Users = max(r.sum.Users, rsum.Users)
	r.sum.Sent += rsum.Reports
	if err != nil {
		if errors.Is(context.Cause(ictx), errBound) && ctx.Err() == nil {
			msg := fmt.Sprintf("ingest: waited %s for the ingest of %d users of epoch %s: %d clients started, %d reports published (raise --ingest-timeout)",
				cfg.IngestTimeout, e.Users, e.Name, rsum.Users, r.pub.Published.Load())
			if err.Error() == context.DeadlineExceeded.Error() {
				return nil, fmt.Errorf("%s: %w", msg, err)
			}
			return nil, fmt.Errorf("%s: %w (%w)", msg, context.DeadlineExceeded, err)
		}
		return nil, fmt.Errorf("ingest: %w", err)
	}
	if err := bounded(ctx, "JetStream to acknowledge the published reports", cfg.Timeout, r.pub.Flush); err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	items, err := r.closeEpoch(ctx, e.Name)
	if err != nil {
		return nil, err
	}
	es := EpochSummary{Name: e.Name, Users: rsum.Users, Sent: rsum.Reports, Released: len(items)}
	for _, it := range items {
		es.ReleasedImpressions += it.Impressions
	}
	r.sum.Epochs = append(r.sum.Epochs, es)
	return items, nil
}

// openEpoch opens epoch at the randomness service (in process: its key
// directory; External: the operator did) and pins its key, makes the
// epoch's issuer keys (in process) and waits for the issuer, and writes
// the aggregator's open marker.
func (r *run) openEpoch(ctx context.Context, epoch string) error {
	cfg := &r.cfg
	if r.roles.rs != nil {
		// the run is the operator of its epochs: open each in the key
		// directory before any client asks (the service never opens a
		// named epoch for a request), and pin the key read from it
		pk, _, err := r.roles.rs.Keys.OpenEpoch(epoch)
		if err != nil {
			return fmt.Errorf("open epoch %s at the randomness service: %w", epoch, err)
		}
		r.rc.Pinned = map[string][]byte{epoch: pk}
	}
	if r.plan != nil && !cfg.External {
		if err := keydir.EnsureIssuerKeys(cfg.KeysDir, epoch); err != nil {
			return fmt.Errorf("tokens: issuer keys of epoch %s: %w", epoch, err)
		}
	}
	if r.plan != nil && cfg.External && !issuerAnswers(ctx, r.nc, epoch, ExternalIssuerProbe) {
		// the deployment decides whether tokens are required; a client
		// without them loses nothing a deployment that requires them does
		// not refuse
		r.log.Warn("tokens: no issuer answers for the epoch; replaying without tokens (a deployment that requires them refuses the clients: start `crowdlog issuer`)",
			"epoch", epoch, "waited", ExternalIssuerProbe)
		r.sum.Tokens = "off (no issuer answered)"
		r.plan = nil
	}
	if r.plan != nil {
		if err := issuerReady(ctx, r.nc, epoch, cfg.StartTimeout); err != nil {
			return err
		}
		if err := bounded(ctx, "the randomness service's public key of epoch "+epoch, cfg.StartTimeout, func(ctx context.Context) error {
			return pinnedKey(ctx, r.rc, epoch)
		}); err != nil {
			return err
		}
	}
	// the aggregator keeps reports only of open epochs: the open marker
	// precedes every report in each partition
	return bounded(ctx, "the open-epoch marker in Kafka (is Kafka up?)", cfg.StartTimeout, func(ctx context.Context) error {
		return aggregator.OpenEpoch(ctx, r.brokers, r.controlSigner(), r.app.Name(), epoch)
	})
}

// closeEpoch waits for the relays to drain, closes epoch at the
// aggregator, waits for its release in ClickHouse and reads it back.
func (r *run) closeEpoch(ctx context.Context, epoch string) ([]release.Item, error) {
	cfg := &r.cfg
	if err := waitBounded(ctx, "the relays to drain", cfg.Timeout,
		func(ctx context.Context) (bool, error) { return relays.DrainedEach(ctx, r.opjs, "a", "b") },
		func(ctx context.Context) string { return relayBacklog(ctx, r.opjs) }); err != nil {
		return nil, err
	}
	r.log.Info("relays drained; closing epoch", "epoch", epoch)
	if err := bounded(ctx, "the close-epoch marker in Kafka", cfg.Timeout, func(ctx context.Context) error {
		return aggregator.CloseEpoch(ctx, r.brokers, r.controlSigner(), r.app.Name(), epoch)
	}); err != nil {
		return nil, fmt.Errorf("close epoch: %w", err)
	}
	key := r.key(epoch)
	what := fmt.Sprintf("the release of %s/%s (%s, k=%d) in ClickHouse", key.App, key.Epoch, key.Policy, key.K)
	if err := waitBounded(ctx, what, cfg.Timeout, func(ctx context.Context) (bool, error) {
		r.refusedMu.Lock()
		err := r.refused
		r.refusedMu.Unlock()
		if err != nil {
			return false, &permanent{err}
		}
		return r.writer.IsReleased(ctx, key)
	}, func(context.Context) string {
		return pipelineCounts(r.sum.Sent, r.roles.relayStats, r.roles.agg)
	}); err != nil {
		return nil, err
	}
	var items []release.Item
	err := bounded(ctx, "the release read back from ClickHouse", cfg.Timeout, func(ctx context.Context) error {
		var err error
		if items, err = r.writer.ReleasedItems(ctx, key.App, key.Epoch, key.Policy, key.K); err != nil {
			return err
		}
		undec, err := r.writer.UndecryptedSummary(ctx, key.App, key.Epoch, key.Policy, key.K)
		r.sum.Undecrypted = append(r.sum.Undecrypted, undec...)
		return err
	})
	return items, err
}

// finish exports the releases and fills the summary's counts.
func (r *run) finish(items []release.Item) error {
	r.sum.Released = len(items)
	if len(r.epochs) > 1 {
		r.sum.Users = r.check.Users // distinct clients over the epochs
	}
	for _, it := range items {
		r.sum.ReleasedImpressions += it.Impressions
	}
	if r.cfg.Export != "" {
		if err := writeExport(r.cfg.Export, items); err != nil {
			return err
		}
	}
	if r.cfg.afterRelease != nil {
		r.cfg.afterRelease(r.sum.Metrics)
	}
	rs := r.roles.relayStats
	for _, s := range rs {
		snap := s.Snapshot()
		if s == rs[len(rs)-1] {
			r.sum.Relayed = int64(snap.Forwarded)
		}
		r.sum.RelayDropped += int64(snap.Dropped())
		if r.sum.RelayDrops == nil {
			r.sum.RelayDrops = map[string]uint64{}
		}
		for reason, n := range map[string]uint64{"malformed": snap.Malformed, "oversized": snap.Oversized,
			"unknown_key": snap.UnknownKey, "wrong_hop": snap.WrongHop, "replay": snap.Replay} {
			if n > 0 {
				r.sum.RelayDrops[reason] += n
			}
		}
	}
	if a := r.roles.agg; a != nil {
		r.sum.Decrypted, r.sum.AggregatorDropped = a.Decrypted.Load(), a.Dropped.Load()
	}
	if is := r.roles.iss; is != nil {
		r.sum.Tokens += fmt.Sprintf("; the issuer issued %d tokens and credentials, refused %d requests", is.Issued.Load(), is.Refused.Load())
	}
	return nil
}

// controlSigner signs the run's epoch control records for its pipeline
// digest; nil (unsigned) without a control key.
func (r *run) controlSigner() *aggregator.ControlSigner {
	if r.controlKey == nil {
		return nil
	}
	return &aggregator.ControlSigner{Key: r.controlKey, Pipeline: r.digest}
}

// loadControlKey reads (in process: creates when missing) the control
// signing key of Config.ControlKey; in process the aggregator verifies
// with its public half.
func (r *run) loadControlKey() error {
	cfg := &r.cfg
	path := cfg.ControlKey
	if path == "" {
		path = filepath.Join(cfg.KeysDir, keydir.ControlSignKey)
	}
	var err error
	if !cfg.External {
		r.controlKey, err = keydir.EnsureSigningKey(path)
	} else if r.controlKey, err = keydir.LoadSigningKey(path); errors.Is(err, os.ErrNotExist) && cfg.ControlKey == "" {
		r.log.Warn("epoch control records are written unsigned (no control key): aggregators started with --control-pub refuse them", "looked_for", path)
		return nil
	}
	if err != nil {
		return fmt.Errorf("control key: %w", err)
	}
	if !cfg.External {
		cfg.controlPub = r.controlKey.Public().(ed25519.PublicKey)
	}
	return nil
}

// startRoles constructs the in-process roles (randomness, issuer with
// tokens, relays a and b, aggregator, release stage) on svcCtx, runs them
// in svc and records them in roles. The randomness service opens no epoch
// here: Run opens each before its replay.
func startRoles(svcCtx context.Context, svc *errgroup.Group, cfg Config, connect roleConnector,
	brokers []string, pol *policy.Policy, digest [32]byte, reg prometheus.Registerer, log *slog.Logger,
	roles *inProcess, tok tokenLimits, onRefused func(error)) error {
	nc, _, err := connect(natsauth.Randomness, "crowdlog-randomness")
	if err != nil {
		return err
	}
	ro := rndoptions.NewOptions()
	ro.Keys, ro.RequireTokens = cfg.KeysDir, tok.on
	rcfg, err := ro.Config()
	if err != nil {
		return err
	}
	rs, err := rndoptions.New(svcCtx, nc, rcfg, log)
	if err != nil {
		return err
	}
	if tok.on {
		inc, _, err := connect(natsauth.Issuer, "crowdlog-issuer")
		if err != nil {
			return err
		}
		if roles.iss, err = startIssuer(svcCtx, svc, inc, cfg.KeysDir, tok, reg, log); err != nil {
			return err
		}
	}
	roles.rs = rs
	RegisterRandomness(reg, rs)
	svc.Go(func() error { return rs.Run(svcCtx) })
	for _, name := range []string{"a", "b"} {
		_, js, err := connect(natsauth.RelayRole(name), "crowdlog-relay-"+name)
		if err != nil {
			return err
		}
		ro := relays.NewOptions()
		ro.Relay.Name, ro.Relay.Kafka, ro.Relay.KeyPaths = name, brokers, []string{filepath.Join(cfg.KeysDir, "relay-"+name+".key")}
		rcfg, err := ro.Config()
		if err != nil {
			return err
		}
		r, closeW, err := relays.New(svcCtx, js, rcfg, log)
		if err != nil {
			return err
		}
		r.Registerer = reg
		roles.relayStats = append(roles.relayStats, r.Stats)
		svc.Go(func() error { defer closeW(); return r.Run(svcCtx) })
	}
	return startServers(svcCtx, svc, cfg, brokers, pol, digest, reg, log, roles, tok, onRefused)
}

// roleConnector returns a NATS connection (and its JetStream) for role,
// named name; the run closes it when it ends.
type roleConnector func(role natsauth.Role, name string) (*nats.Conn, jetstream.JetStream, error)

// connect is the run's roleConnector: with the embedded server's
// permission table on (natsKeys), a new connection with role's own NKey;
// otherwise, against a NATS given by address, the operator's own
// connection when cfg.NATSOperatorNKey is set, else the connection
// of the run (the first call makes it, with cfg.NATSSecurity), shared by
// the roles in process.
func (r *run) connect(role natsauth.Role, name string) (*nats.Conn, jetstream.JetStream, error) {
	sec := r.cfg.NATSSecurity
	sec.Role = role
	switch {
	case r.natsKeys != "":
		sec = natsconn.RoleSecurity(r.natsKeys, role)
	case role == natsauth.Operator && r.cfg.NATSOperatorNKey != "":
		sec.NKeyFile = r.cfg.NATSOperatorNKey
	case r.nc != nil:
		return r.nc, r.js, nil
	}
	return connectRole(r.cfg.NATS, name, sec, &r.conns)
}

// closeAll runs every close function of conns, last first, each bounded
// by closeWait (one that does not return is logged and left running).
func closeAll(conns []func()) {
	for i := len(conns) - 1; i >= 0; i-- {
		done := make(chan struct{})
		go func() { conns[i](); close(done) }()
		select {
		case <-done:
		case <-time.After(closeWait):
			slog.Warn("a NATS connection did not close in time; left to the process's exit", "waited", closeWait, "of", len(conns)-i)
		}
	}
}

// closeWait bounds each Close of closeAll: nats.go's own write deadline
// (FlusherTimeout) is 1 min.
const closeWait = 70 * time.Second

// connectRole opens a NATS connection to url as name with sec, and its
// JetStream; the connection's Close is appended to conns.
func connectRole(url, name string, sec natsconn.Security, conns *[]func()) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := natsconn.ConnectAs(url, name, sec)
	if err != nil {
		return nil, nil, err
	}
	*conns = append(*conns, nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, fmt.Errorf("NATS JetStream of %s: %w", name, err)
	}
	return nc, js, nil
}

// startServers starts the aggregator and the release stage of startRoles:
// both serve only the pipeline of digest.
func startServers(svcCtx context.Context, svc *errgroup.Group, cfg Config, brokers []string, pol *policy.Policy, digest [32]byte,
	reg prometheus.Registerer, log *slog.Logger, roles *inProcess, tok tokenLimits, onRefused func(error)) error {
	a, err := aggregatorOptions(cfg, brokers, digest, tok.on).Service(log)
	if err != nil {
		return err
	}
	roles.agg = a
	exact := cfg.MetricsExactCounts || !pol.Kind.IsDP()
	RegisterAggregator(reg, a, exact)
	svc.Go(func() error { return a.Run(svcCtx) })
	so := releaseOptions(cfg, brokers, pol, digest)
	st, w, err := so.New(svcCtx, log)
	if err != nil {
		return err
	}
	if pol.Kind.IsDP() {
		st.OnRefused = func(app, epoch string, err error) { onRefused(err) }
	}
	RegisterRelease(reg, st, exact)
	svc.Go(func() error { defer w.Close(); return st.Run(svcCtx) })
	return nil
}

// releaseOptions are the options of the run's release stage: the
// defaults of `crowdlog release` with the run's brokers, ClickHouse,
// summary and budget, serving only the pipeline of pol and digest.
func releaseOptions(cfg Config, brokers []string, pol *policy.Policy, digest [32]byte) stage.Options {
	o := stage.DefaultOptions()
	o.Kafka, o.ClickHouse, o.Database = brokers, cfg.ClickHouse, cfg.Database
	o.Summary, o.Dataset, o.Budget = string(cfg.Summary), cfg.Dataset, cfg.Budget
	o.Policy, o.Pipeline = pol, digest
	return o
}

// aggregatorOptions are the options of the run's aggregator: the
// defaults of `crowdlog aggregate` with the run's brokers, key and token
// keys (tokens: the run issues tokens), serving only the pipeline of
// digest (the run opens and closes its epochs: no schedule), with control
// records signed by the run's control key.
func aggregatorOptions(cfg Config, brokers []string, digest [32]byte, tokens bool) *aggregator.Options {
	o := aggregator.DefaultOptions()
	o.Kafka, o.KeyPaths = brokers, []string{filepath.Join(cfg.KeysDir, keydir.AggregatorKey)}
	if tokens {
		o.KeysDir = cfg.KeysDir
	}
	o.Pipelines = []aggregator.Served{{Digest: digest}}
	o.ControlPublic = cfg.controlPub
	return &o
}

// RolesStopTimeout bounds the wait for the in-process roles to return
// after the run cancelled them; past it run returns anyway (logged).
const RolesStopTimeout = 30 * time.Second

// stopRoles cancels the roles and waits for them, at most RolesStopTimeout.
func stopRoles(cancel context.CancelCauseFunc, svc *errgroup.Group, log *slog.Logger) {
	cancel(errors.New("run finished"))
	done := make(chan struct{})
	go func() { svc.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(RolesStopTimeout):
		log.Warn("roles did not stop in time; returning without them", "waited", RolesStopTimeout)
	}
}

// relayBacklog says, for the timeout error of the drain wait, how many
// messages each relay still has to forward.
func relayBacklog(ctx context.Context, opjs relayJS) string {
	var parts []string
	for _, n := range []string{"a", "b"} {
		c, err := opjs(n).Consumer(ctx, relays.Stream, relays.ConsumerName(n))
		if err != nil {
			parts = append(parts, fmt.Sprintf("relay %s: no consumer (%v)", n, err))
			continue
		}
		info, err := c.Info(ctx)
		if err != nil {
			parts = append(parts, fmt.Sprintf("relay %s: %v", n, err))
			continue
		}
		parts = append(parts, fmt.Sprintf("relay %s: %d reports waiting, %d unacknowledged", n, info.NumPending, info.NumAckPending))
	}
	return strings.Join(parts, "; ")
}

// pipelineCounts says, for the timeout error of the release wait, how far
// the reports got: sent, forwarded by the last relay, decrypted.
func pipelineCounts(sent int64, relayStats []*relays.Stats, agg *aggregator.Service) string {
	s := fmt.Sprintf("clients sent %d reports", sent)
	if len(relayStats) > 0 {
		s += fmt.Sprintf(", relay b forwarded %d to Kafka", relayStats[len(relayStats)-1].Snapshot().Forwarded)
	}
	if agg != nil {
		s += fmt.Sprintf(", the aggregator decrypted %d and dropped %d; the release stage has not written it", agg.Decrypted.Load(), agg.Dropped.Load())
	} else {
		s += " (roles run elsewhere: see their metrics)"
	}
	return s
}

func (cfg *Config) defaults() error {
	if cfg.Input == "" {
		return errors.New("no input: give --input LOG (AOL or Excite TSV, plain or .gz; - for stdin)")
	}
	if kind, _ := policy.Parse(cfg.Policy); !kind.IsDP() && (cfg.K < 1 || cfg.K > vss.MaxK) {
		return fmt.Errorf("threshold --k %d outside 1..%d", cfg.K, vss.MaxK)
	}
	if cfg.EpochLength != 0 {
		if cfg.Epoch != "" {
			return fmt.Errorf("epoch %q and an epoch length %s: give one (scheduled epochs are named START-LENGTH)", cfg.Epoch, cfg.EpochLength)
		}
		if cfg.EpochLength < 0 || cfg.EpochLength%time.Second != 0 {
			return fmt.Errorf("epoch length %s: want a positive whole number of seconds, e.g. 168h", cfg.EpochLength)
		}
		cfg.Epoch = "scheduled"
	}
	if cfg.Epoch == "" {
		cfg.Epoch = "all"
	}
	if !randomness.ValidEpoch(cfg.Epoch) {
		return fmt.Errorf("epoch %q: use 1-64 letters, digits, '.', '_' or '-'", cfg.Epoch)
	}
	if cfg.Database == "" {
		cfg.Database = "crowdlog"
	}
	if cfg.Dataset == "" {
		cfg.Dataset = "default"
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 8
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	return nil
}

func releaseWriter(ctx context.Context, cfg Config) (*release.Writer, error) {
	w, err := release.Open(ctx, cfg.ClickHouse, cfg.Database)
	if err != nil {
		return nil, fmt.Errorf("open ClickHouse at %s: %w", cfg.ClickHouse, err)
	}
	return w, nil
}

func writeExport(path string, items []release.Item) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := release.WriteTSV(f, items); err != nil {
		f.Close()
		return fmt.Errorf("export: %w", err)
	}
	return f.Close()
}

// startLocal starts, for each empty address, the local service under state
// (embedded NATS, kfake with a data dir, a ClickHouse server) and sets the
// address; stop shuts down what it started, in reverse order.
//
// With natsKeys non-nil, an embedded NATS server runs with the permission
// table of infra/natsauth on: every role gets its own NKey in a temporary
// directory (removed by stop), whose path is stored in *natsKeys; a role
// connects with natsconn.RoleSecurity(*natsKeys, role).
func startLocal(ctx context.Context, state string, natsURL, kafkaAddr, ch *string, partitions int, natsKeys *string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if *natsURL == "" {
		o := natsserver.Options{Dir: filepath.Join(state, "nats")}
		var ns *natsserver.Server
		if natsKeys != nil {
			dir, err := os.MkdirTemp("", "crowdlog-nats-keys-")
			if err != nil {
				return stop, fmt.Errorf("start embedded NATS: a directory for the role credentials: %w", err)
			}
			stops = append(stops, func() { os.RemoveAll(dir) })
			ns, err = o.StartAuth(ctx, dir, nil)
			*natsKeys = dir
		} else {
			ns, err = o.Start(ctx)
		}
		if err != nil {
			return stop, fmt.Errorf("start embedded NATS: %w", err)
		}
		stops = append(stops, ns.Shutdown)
		*natsURL = ns.URL
	}
	if *kafkaAddr == "" {
		b, err := kafka.Start(ctx, filepath.Join(state, "kafka"), partitions)
		if err != nil {
			stop()
			return func() {}, fmt.Errorf("start kfake broker: %w", err)
		}
		stops = append(stops, b.Close)
		*kafkaAddr = b.Addr
	}
	if *ch == "" {
		srv, err := clickhouse.Start(ctx, filepath.Join(state, "clickhouse"))
		if err != nil {
			stop()
			return func() {}, err
		}
		stops = append(stops, func() { srv.Stop() })
		*ch = srv.TCPAddr
	}
	return stop, nil
}

// waitFor is waitBounded for callers without counts to report (crowdlog
// pdd): bounded by ctx's deadline, or DefaultWaitBound when ctx has none.
func waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	bound := DefaultWaitBound
	if d, ok := ctx.Deadline(); ok {
		bound = time.Until(d) + time.Second // ctx ends it; the error then names ctx's deadline
	}
	return waitBounded(ctx, what, bound, func(context.Context) (bool, error) { return cond() },
		func(context.Context) string { return "no counts available" })
}

// DefaultWaitBound bounds a waitFor whose context has no deadline.
const DefaultWaitBound = 10 * time.Minute

// waitBounded polls cond every 200 ms until it holds, for at most bound, and
// logs what it waits for (with progress's numbers) every 30 s. When bound
// expires, the error says what it waited for, how long, and what progress
// reports then (e.g. "relay a: 12 reports waiting"), and wraps
// context.DeadlineExceeded. A *permanent error from cond ends the wait at
// once with its error; when ctx ends first, the error wraps ctx's.
func waitBounded(ctx context.Context, what string, bound time.Duration, cond func(context.Context) (bool, error), progress func(context.Context) string) error {
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var last error
	t0 := time.Now()
	nextLog := t0.Add(waitLogEvery)
	for {
		ok, err := cond(wctx)
		if ok {
			return nil
		}
		var perm *permanent
		if errors.As(err, &perm) {
			return perm.err
		}
		if err != nil && wctx.Err() == nil {
			last = err
		}
		if time.Now().After(nextLog) {
			slog.Info("waiting for "+what, "elapsed", time.Since(t0).Round(time.Second), "bound", bound, "progress", progress(wctx))
			nextLog = nextLog.Add(waitLogEvery)
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return fmt.Errorf("stopped waiting for %s after %s: %w", what, time.Since(t0).Round(time.Millisecond), ctx.Err())
			}
			// the counts, with a short deadline of their own
			pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			msg := fmt.Sprintf("waited %s for %s: %s", bound, what, progress(pctx))
			pcancel()
			if last != nil {
				msg += "; last error: " + strings.TrimSpace(last.Error())
			}
			return fmt.Errorf("%s (are all roles running? raise --timeout if it was still moving): %w", msg, context.DeadlineExceeded)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitLogEvery is how often waitFor logs that it is still waiting.
const waitLogEvery = 30 * time.Second

// errBound is the cause of a context ended by bounded's bound.
var errBound = errors.New("bound reached")

// bounded runs fn with ctx limited to bound. When fn fails after the bound
// expired, the error says what was waited for and how long, and wraps
// context.DeadlineExceeded and fn's error.
func bounded(ctx context.Context, what string, bound time.Duration, fn func(context.Context) error) error {
	bctx, cancel := context.WithTimeoutCause(ctx, bound, errBound)
	defer cancel()
	err := fn(bctx)
	if err != nil && errors.Is(context.Cause(bctx), errBound) && ctx.Err() == nil {
		return fmt.Errorf("waited %s for %s: %w (%w)", bound, what, context.DeadlineExceeded, err)
	}
	return err
}

// permanent marks a waitFor condition error that ends the wait at once.
type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }

// ResolvePolicy builds a release policy from its name, the FT threshold k
// and the DP parameters p (Kind and K are overwritten; K is 0 for a DP
// kind, which ignores it), with policy.New's defaults and errors. A DP policy's U (p.Users) and ε are configuration
// (policy.users and policy.epsilon, or --users and --epsilon): without
// them policy.New refuses it; nothing is ever counted from an input, since
// a parameter read from the data differs between neighbouring logs.
func ResolvePolicy(name string, k int, p policy.Params) (*policy.Policy, error) {
	kind, err := policy.Parse(name)
	if err != nil {
		return nil, err
	}
	p.Kind, p.K = kind, k
	if kind.IsDP() {
		p.K = 0 // --k's default is not part of a DP policy
	}
	return policy.New(p)
}

// SpoolName is the file in the state directory where run spools its input
// when it reads stdin or a given time format; removed at the end.
const SpoolName = "input.tsv"

// ErrNoRecords is wrapped by CheckInput's error for a log without a single
// valid record.
var ErrNoRecords = errors.New("no valid record")

// maxBadInError is how many bad lines the no-records error names.
const maxBadInError = 5

// InputCheck is what CheckInput found in a log.
type InputCheck struct {
	Stats aol.Stats // lines, records, bad lines with line numbers, time format, columns
	Users int       // distinct AnonIDs
}

// CheckInput reads the whole log at path ("-" = stdin) with opts, before
// anything else starts, and counts its records and users. When spool is
// not "", it also writes every good record there as AOL TSV (the AOL header;
// times as 2006-01-02 15:04:05 with any fraction), which a reader with
// default options reads back as the same records (only Line differs): how
// stdin is read twice, and how a given time format reaches a reader that
// only detects.
//
// Errors: the reader's (open, bad TimeFormat, gzip, I/O); writing the
// spool; or, for a log without a valid record, one wrapping ErrNoRecords
// that names the first bad lines (line numbers and reasons) and the
// accepted formats (aol.Accepted).
func CheckInput(path string, opts aol.Options, spool string) (InputCheck, error) {
	var c InputCheck
	name := path
	if path == aol.Stdin {
		name = "stdin"
	}
	r, err := aol.OpenOptions(path, opts)
	if err != nil {
		return c, fmt.Errorf("input: %w", err)
	}
	defer r.Close()
	var w *bufio.Writer
	if spool != "" {
		f, err := os.OpenFile(spool, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return c, fmt.Errorf("input: spool %s to the state directory: %w", name, err)
		}
		defer f.Close()
		w = bufio.NewWriterSize(f, 1<<16)
		w.WriteString(strings.Join(aol.Header, "\t") + "\n")
	}
	seen := map[string]struct{}{}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c, fmt.Errorf("input %s: %w", name, err)
		}
		seen[rec.AnonID] = struct{}{}
		if w != nil {
			rank := ""
			if rec.ItemRank > 0 {
				rank = strconv.Itoa(rec.ItemRank)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", rec.AnonID, rec.Query,
				rec.QueryTime.Format(aol.TimeLayout+".999999999"), rank, rec.ClickURL)
		}
	}
	c.Stats, c.Users = r.Stats(), len(seen)
	if w != nil {
		if err := w.Flush(); err != nil {
			return c, fmt.Errorf("input: spool %s to the state directory: %w", name, err)
		}
	}
	if c.Stats.Records > 0 {
		return c, nil
	}
	st := c.Stats
	switch {
	case st.Lines == 0:
		return c, fmt.Errorf("input: no records in %s: it is empty (%w; expected %s)", name, ErrNoRecords, aol.Accepted)
	case st.Bad == 0:
		return c, fmt.Errorf("input: no records in %s: only a header line (%w; expected %s)", name, ErrNoRecords, aol.Accepted)
	}
	var b strings.Builder
	for i, e := range st.Examples {
		if i == maxBadInError {
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "line %d: %s", e.Line, e.Reason)
	}
	if st.Bad > maxBadInError {
		fmt.Fprintf(&b, "; and %d more", st.Bad-maxBadInError)
	}
	hint := "Expected " + aol.Accepted
	if !autoFormat(opts.TimeFormat) {
		hint = fmt.Sprintf("The time format given was %q; without it the reader accepts %s", opts.TimeFormat, aol.Accepted)
	}
	return c, fmt.Errorf("input: no records in %s: all %d lines are bad (%w). First bad lines: %s. %s",
		name, st.Lines, ErrNoRecords, b.String(), hint)
}

// ingestBound is the default IngestTimeout: 10 min, plus 10 ms per record
// (at least 100 records/s; the bundled log runs end to end at ~2,800
// records/s on 2 shared cores, docs/benchmarks.md), plus one Spread window
// per round of workers clients (each client sleeps up to Spread).
func ingestBound(c InputCheck, spread time.Duration, workers int) time.Duration {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	rounds := (c.Users + workers - 1) / workers
	return 10*time.Minute + time.Duration(c.Stats.Records)*10*time.Millisecond + time.Duration(rounds)*spread
}

// autoFormat reports whether a time format is detected rather than given.
func autoFormat(f string) bool {
	f = strings.ToLower(strings.TrimSpace(f))
	return f == "" || f == aol.FormatAuto
}
