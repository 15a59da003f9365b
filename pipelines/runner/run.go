package runner

import (
	"bufio"
	"context"
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
	Epoch      string // epoch name; the whole input is one epoch

	NATS       string // NATS URL, or comma-separated URLs of a cluster; "" starts an embedded server
	Kafka      string // Kafka bootstrap brokers "host:port[,host:port...]"; "" starts kfake with a data dir
	ClickHouse string // ClickHouse native address; "" starts a local server
	Database   string // ClickHouse database; default "crowdlog"
	StateDir   string // keys, broker data, ClickHouse dir; "" = a temp dir removed at the end
	KeysDir    string // default StateDir/keys
	Partitions int    // partitions of the reports topic when creating it; default 8

	// External: randomness, relays, aggregator and release already run
	// elsewhere against the same addresses and keys; run only ingests,
	// closes the epoch and waits for the release. The operator opens the
	// named epoch at the randomness service first (`crowdlog randomness
	// open-epoch`); clients of an unopened epoch stop with
	// protocol.ErrEpochNotOpen. In process, run opens Epoch itself.
	External bool

	// DP holds the parameters of dp-a, dp-u and zealous (Epsilon, Delta, D,
	// Users, CountShare, ShamirK, Slack, Lambda; Kind and K are taken from
	// Policy and K). Users = 0 counts the AnonIDs of Input.
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
	// afterRelease, in tests, is called with the metrics address once the
	// release is in ClickHouse, while the roles still run.
	afterRelease func(metricsAddr string)

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
// context.DeadlineExceeded).
func Run(ctx context.Context, cfg Config) (sum *Summary, err error) {
	start := time.Now()
	defer func() {
		if sum != nil {
			sum.Elapsed = time.Since(start)
		}
	}()
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	app, err := apps.LookupWith(cfg.App, cfg.AppOptions)
	if err != nil {
		return nil, err
	}
	if cfg.Input != aol.Stdin {
		if _, err := os.Stat(cfg.Input); err != nil {
			return nil, fmt.Errorf("input log: %w", err)
		}
	}
	if cfg.Summary, err = release.ParseSummaryMode(string(cfg.Summary)); err != nil {
		return nil, fmt.Errorf("--summary: %w", err)
	}
	if _, err := policy.Parse(cfg.Policy); err != nil {
		return nil, err
	}
	state := cfg.StateDir
	if state == "" {
		if state, err = os.MkdirTemp("", "crowdlog-run-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(state)
	} else if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if cfg.KeysDir == "" {
		cfg.KeysDir = filepath.Join(state, "keys")
	}

	// 0. the input, read once before anything starts: fail fast on a log
	// without a valid record; spool stdin or a given time format
	input, spool := cfg.Input, ""
	if cfg.Input == aol.Stdin || !autoFormat(cfg.TimeFormat) {
		spool = filepath.Join(state, SpoolName)
		input = spool
		defer os.Remove(spool)
	}
	check, err := CheckInput(cfg.Input, aol.Options{TimeFormat: cfg.TimeFormat}, spool)
	if err != nil {
		return nil, err
	}
	sum = &Summary{LogLines: check.Stats.Lines, BadLines: check.Stats.Bad}
	if check.Stats.Bad > 0 {
		log.Warn("input: bad lines will be skipped", "summary", check.Stats.String())
	}
	log.Info("input checked", "records", check.Stats.Records, "users", check.Users,
		"time_format", check.Stats.TimeFormat, "columns", check.Stats.Columns, "spooled", spool != "")
	if cfg.IngestTimeout <= 0 {
		cfg.IngestTimeout = ingestBound(check, cfg.Spread, cfg.Workers)
	}
	dp := cfg.DP
	if kind, _ := policy.Parse(cfg.Policy); kind.IsDP() && dp.Users == 0 {
		dp.Users = check.Users // U: the number of contributing clients (public)
	}
	pol, err := ResolvePolicy(cfg.Policy, cfg.K, dp, "")
	if err != nil {
		return nil, err
	}
	digest, err := pipeline.Digest(app.Name(), cfg.AppOptions, pol)
	if err != nil {
		return nil, err
	}
	sum.Policy = pol.String()
	sum.Pipeline = pipeline.DigestString(digest)
	var plan *tokenPlan
	var tokN, tokD int
	if cfg.TokensOff {
		sum.Tokens = "off"
		log.Warn(tokensOffWarning)
	} else {
		if plan, err = planTokens(input, aol.Options{}, app, pol, ""); err != nil {
			return sum, err
		}
		tokN, tokD = plan.budgets(cfg.RandomnessTokens, cfg.ReportTokens, pol)
		sum.Tokens = fmt.Sprintf("on: %d randomness and %d report tokens per identity (N, d), %d identities enrolled", tokN, tokD, len(plan.keys))
		log.Info("tokens on", "randomness_tokens", tokN, "report_tokens", tokD, "identities", len(plan.keys))
	}
	key := release.Key{App: app.Name(), Epoch: cfg.Epoch, Policy: string(pol.Kind), K: pol.ShamirK}
	spend := release.Spend{Dataset: cfg.Dataset, Epoch: cfg.Epoch, App: key.App, Policy: key.Policy, K: key.K,
		Epsilon: pol.AchievedEpsilon, Delta: pol.AchievedDelta}

	// 1. services: given addresses, or started locally
	var stopLocal func()
	err = bounded(ctx, "the local services (NATS, Kafka, ClickHouse) to start", cfg.StartTimeout, func(ctx context.Context) error {
		var err error
		stopLocal, err = startLocal(ctx, state, &cfg.NATS, &cfg.Kafka, &cfg.ClickHouse, cfg.Partitions)
		return err
	})
	if stopLocal != nil {
		defer stopLocal()
	}
	if err != nil {
		return sum, err
	}
	sum.NATS, sum.Kafka, sum.ClickHs = cfg.NATS, cfg.Kafka, cfg.ClickHouse
	brokers := strings.Split(cfg.Kafka, ",")
	if err := bounded(ctx, "Kafka topics at "+brokers[0], cfg.StartTimeout, func(ctx context.Context) error {
		return kafka.EnsureTopics(ctx, brokers[0], cfg.Partitions, protocol.ReportsTopic, protocol.DecryptedTopic)
	}); err != nil {
		return sum, err
	}
	if !cfg.External {
		if err := keydir.EnsureKeys(cfg.KeysDir); err != nil {
			return sum, err
		}
	}
	if plan != nil {
		// the operator's part: the epoch's issuer keys (in process) and
		// the replayed identities in the enrollment list the issuer reads
		if !cfg.External {
			if err := keydir.EnsureIssuerKeys(cfg.KeysDir, cfg.Epoch); err != nil {
				return sum, fmt.Errorf("tokens: issuer keys of epoch %s: %w", cfg.Epoch, err)
			}
		}
		if err := plan.enroll(cfg.KeysDir); err != nil {
			return sum, err
		}
	}
	nc, err := natsconn.Connect(cfg.NATS, "crowdlog-run")
	if err != nil {
		return sum, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return sum, err
	}
	if err := bounded(ctx, "the relay stream in JetStream", cfg.StartTimeout, func(ctx context.Context) error {
		return relays.EnsureStream(ctx, js, 0)
	}); err != nil {
		return sum, err
	}
	var writer *release.Writer
	if err := bounded(ctx, "the ClickHouse schema at "+cfg.ClickHouse, cfg.StartTimeout, func(ctx context.Context) error {
		var err error
		writer, err = releaseWriter(ctx, cfg)
		return err
	}); err != nil {
		return sum, err
	}
	defer writer.Close()
	if pol.Kind.IsDP() {
		// fail before ingesting when the release would be refused anyway
		if err := bounded(ctx, "the privacy budget in ClickHouse", cfg.StartTimeout, func(ctx context.Context) error {
			return writer.CheckBudget(ctx, spend, cfg.Budget)
		}); err != nil {
			return sum, err
		}
	}
	var refusedMu sync.Mutex
	var refused error

	// 2. the roles, in process unless External. Their constructors run on
	// svcCtx (the roles' lifetime), bounded by a watchdog.
	reg := metrics.NewRegistry()
	if cfg.Metrics != "" {
		addr, err := metrics.Serve(ctx, cfg.Metrics, reg, nil)
		if err != nil {
			return sum, err
		}
		sum.Metrics = addr.String()
		log.Info("metrics", "url", "http://"+sum.Metrics+"/metrics")
	}
	svcCtx, stopServices := context.WithCancelCause(ctx)
	var svc errgroup.Group
	defer stopRoles(stopServices, &svc, log)
	var relayStats []*relays.Stats
	var agg *aggregator.Service
	var iss *issuer.Service
	rc := &oprfclient.Client{NC: nc, PinFile: filepath.Join(cfg.KeysDir, keydir.RandomnessPins)}
	if !cfg.External {
		watch := time.AfterFunc(cfg.StartTimeout, func() {
			stopServices(fmt.Errorf("waited %s for the roles to start: %w", cfg.StartTimeout, context.DeadlineExceeded))
		})
		err := startRoles(svcCtx, &svc, cfg, nc, js, brokers, pol, digest, reg, rc, log, &relayStats, &agg, tokenLimits{on: plan != nil, n: tokN, d: tokD, issuer: &iss}, func(err error) {
			refusedMu.Lock()
			defer refusedMu.Unlock()
			refused = err
		})
		if !watch.Stop() {
			err = context.Cause(svcCtx)
		}
		if err != nil {
			return sum, err
		}
	}

	// 3. ingest: every AnonID a client
	a, b, ag, err := keydir.LoadRoute(cfg.KeysDir)
	if err != nil {
		return sum, err
	}
	if cfg.External { // in process the relays hold these very keys
		if err := bounded(ctx, "relays a and b to announce their keys", cfg.StartTimeout, func(ctx context.Context) error {
			return CheckRoute(ctx, nc, a, b, log)
		}); err != nil {
			return sum, err
		}
	}
	pub := &publish.Publisher{JS: js, Subject: protocol.RelaySubject("a")}
	RegisterPublisher(reg, pub)
	client := newClient(app, cfg.Epoch, pol, digest, cfg.Spread, rc, a, b, ag, pub)
	rp := &ingest.Replay{Client: client, Workers: cfg.Workers, Progress: cfg.Progress, Logger: log}
	if plan != nil && cfg.External && !issuerAnswers(ctx, nc, cfg.Epoch, ExternalIssuerProbe) {
		// the deployment decides whether tokens are required; a client
		// without them loses nothing a deployment that requires them does
		// not refuse
		log.Warn("tokens: no issuer answers for the epoch; replaying without tokens (a deployment that requires them refuses the clients: start `crowdlog issuer`)",
			"epoch", cfg.Epoch, "waited", ExternalIssuerProbe)
		sum.Tokens = "off (no issuer answered)"
		plan = nil
	}
	if plan != nil {
		if err := issuerReady(ctx, nc, cfg.Epoch, cfg.StartTimeout); err != nil {
			return sum, err
		}
		if err := bounded(ctx, "the randomness service's public key of epoch "+cfg.Epoch, cfg.StartTimeout, func(ctx context.Context) error {
			return pinnedKey(ctx, rc, cfg.Epoch)
		}); err != nil {
			return sum, err
		}
		plan.replayTokens(rp, nc, rc, log)
	}
	// the aggregator keeps reports only of open epochs: the open marker
	// precedes every report in each partition
	if err := bounded(ctx, "the open-epoch marker in Kafka (is Kafka up?)", cfg.StartTimeout, func(ctx context.Context) error {
		return aggregator.OpenEpoch(ctx, brokers, app.Name(), cfg.Epoch)
	}); err != nil {
		return sum, err
	}
	log.Info("ingest: replaying log", "app", app.Name(), "epoch", cfg.Epoch, "policy", pol.String(),
		"bound", cfg.IngestTimeout)
	ictx, icancel := context.WithTimeoutCause(ctx, cfg.IngestTimeout, errBound)
	rsum, err := rp.Run(ictx, input)
	icancel()
	sum.Users, sum.Sent = rsum.Users, rsum.Reports
	if err != nil {
		if errors.Is(context.Cause(ictx), errBound) && ctx.Err() == nil {
			msg := fmt.Sprintf("ingest: waited %s for the ingest of %d users: %d clients started, %d reports published (raise --ingest-timeout)",
				cfg.IngestTimeout, check.Users, rsum.Users, pub.Published.Load())
			if err.Error() == context.DeadlineExceeded.Error() {
				return sum, fmt.Errorf("%s: %w", msg, err)
			}
			return sum, fmt.Errorf("%s: %w (%w)", msg, context.DeadlineExceeded, err)
		}
		return sum, fmt.Errorf("ingest: %w", err)
	}
	if err := bounded(ctx, "JetStream to acknowledge the published reports", cfg.Timeout, pub.Flush); err != nil {
		return sum, fmt.Errorf("ingest: %w", err)
	}

	// 4. wait for the relays to drain, close the epoch, wait for the release
	if err := waitBounded(ctx, "the relays to drain", cfg.Timeout,
		func(ctx context.Context) (bool, error) { return relays.Drained(ctx, js, "a", "b") },
		func(ctx context.Context) string { return relayBacklog(ctx, js) }); err != nil {
		return sum, err
	}
	log.Info("relays drained; closing epoch", "epoch", cfg.Epoch)
	if err := bounded(ctx, "the close-epoch marker in Kafka", cfg.Timeout, func(ctx context.Context) error {
		return aggregator.CloseEpoch(ctx, brokers, app.Name(), cfg.Epoch)
	}); err != nil {
		return sum, fmt.Errorf("close epoch: %w", err)
	}
	what := fmt.Sprintf("the release of %s/%s (%s, k=%d) in ClickHouse", key.App, key.Epoch, key.Policy, key.K)
	if err := waitBounded(ctx, what, cfg.Timeout, func(ctx context.Context) (bool, error) {
		refusedMu.Lock()
		err := refused
		refusedMu.Unlock()
		if err != nil {
			return false, &permanent{err}
		}
		return writer.IsReleased(ctx, key)
	}, func(context.Context) string {
		return pipelineCounts(sum.Sent, relayStats, agg)
	}); err != nil {
		return sum, err
	}
	var items []release.Item
	if err := bounded(ctx, "the release read back from ClickHouse", cfg.Timeout, func(ctx context.Context) error {
		var err error
		if items, err = writer.ReleasedItems(ctx, key.App, key.Epoch, key.Policy, key.K); err != nil {
			return err
		}
		sum.Undecrypted, err = writer.UndecryptedSummary(ctx, key.App, key.Epoch, key.Policy, key.K)
		return err
	}); err != nil {
		return sum, err
	}
	sum.Released = len(items)
	for _, it := range items {
		sum.ReleasedImpressions += it.Impressions
	}
	if cfg.Export != "" {
		if err := writeExport(cfg.Export, items); err != nil {
			return sum, err
		}
	}
	if cfg.afterRelease != nil {
		cfg.afterRelease(sum.Metrics)
	}
	for _, s := range relayStats {
		snap := s.Snapshot()
		if s == relayStats[len(relayStats)-1] {
			sum.Relayed = int64(snap.Forwarded)
		}
		sum.RelayDropped += int64(snap.Dropped())
		if sum.RelayDrops == nil {
			sum.RelayDrops = map[string]uint64{}
		}
		for reason, n := range map[string]uint64{"malformed": snap.Malformed, "oversized": snap.Oversized,
			"unknown_key": snap.UnknownKey, "wrong_hop": snap.WrongHop, "replay": snap.Replay} {
			if n > 0 {
				sum.RelayDrops[reason] += n
			}
		}
	}
	if agg != nil {
		sum.Decrypted, sum.AggregatorDropped = agg.Decrypted.Load(), agg.Dropped.Load()
	}
	if iss != nil {
		sum.Tokens += fmt.Sprintf("; the issuer issued %d tokens and credentials, refused %d requests", iss.Issued.Load(), iss.Refused.Load())
	}
	return sum, nil
}

// startRoles constructs the in-process roles (randomness, relays a and b,
// aggregator, release stage) on svcCtx and runs them in svc.
func startRoles(svcCtx context.Context, svc *errgroup.Group, cfg Config, nc *nats.Conn, js jetstream.JetStream,
	brokers []string, pol *policy.Policy, digest [32]byte, reg prometheus.Registerer, rc *oprfclient.Client, log *slog.Logger,
	relayStats *[]*relays.Stats, agg **aggregator.Service, tok tokenLimits, onRefused func(error)) error {
	rs, err := randomness.New(svcCtx, nc, cfg.KeysDir, randomness.Options{}, log)
	if err != nil {
		return err
	}
	if tok.on {
		if err := startIssuer(svcCtx, svc, nc, cfg.KeysDir, tok, reg, log); err != nil {
			return err
		}
		if err := RequireTokens(rs, cfg.KeysDir); err != nil {
			return err
		}
	}
	// the run is the operator of its named epoch: open it in the key
	// directory before any client asks (the service never opens a named
	// epoch for a request), and pin the key read from the directory itself
	pk, _, err := rs.Keys.OpenEpoch(cfg.Epoch)
	if err != nil {
		return fmt.Errorf("open epoch %s at the randomness service: %w", cfg.Epoch, err)
	}
	rc.Pinned = map[string][]byte{cfg.Epoch: pk}
	RegisterRandomness(reg, rs)
	svc.Go(func() error { return rs.Run(svcCtx) })
	for _, name := range []string{"a", "b"} {
		r, closeW, err := relays.New(svcCtx, js, relays.Options{Name: name, Kafka: brokers,
			KeyPaths: []string{filepath.Join(cfg.KeysDir, "relay-"+name+".key")}}, log)
		if err != nil {
			return err
		}
		r.Registerer = reg
		*relayStats = append(*relayStats, r.Stats)
		svc.Go(func() error { defer closeW(); return r.Run(svcCtx) })
	}
	a, err := aggregator.New(brokers, []string{filepath.Join(cfg.KeysDir, keydir.AggregatorKey)}, log)
	if err != nil {
		return err
	}
	if tok.on {
		AggregatorTokens(a, cfg.KeysDir)
	}
	a.Pipelines = map[[32]byte]bool{digest: true} // reports of another definition are refused
	*agg = a
	RegisterAggregator(reg, a)
	svc.Go(func() error { return a.Run(svcCtx) })
	st, w, err := stage.New(svcCtx, brokers, cfg.ClickHouse, cfg.Database, log)
	if err != nil {
		return err
	}
	st.Summary = cfg.Summary
	st.Policy, st.Pipeline = pol, digest // only this pipeline's items are released
	if pol.Kind.IsDP() {
		st.Dataset, st.Budget = cfg.Dataset, cfg.Budget
		st.OnRefused = func(app, epoch string, err error) { onRefused(err) }
	}
	RegisterRelease(reg, st)
	svc.Go(func() error { defer w.Close(); return st.Run(svcCtx) })
	return nil
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
func relayBacklog(ctx context.Context, js jetstream.JetStream) string {
	var parts []string
	for _, n := range []string{"a", "b"} {
		c, err := js.Consumer(ctx, relays.Stream, relays.ConsumerName(n))
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
func startLocal(ctx context.Context, state string, natsURL, kafkaAddr, ch *string, partitions int) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if *natsURL == "" {
		ns, err := natsserver.Start(ctx, filepath.Join(state, "nats"))
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
// and the DP parameters p (Kind and K are overwritten); DP policies without
// p.Users count the AnonIDs of input (U, public: the number of
// contributing clients) when input is not "".
func ResolvePolicy(name string, k int, p policy.Params, input string) (*policy.Policy, error) {
	kind, err := policy.Parse(name)
	if err != nil {
		return nil, err
	}
	p.Kind, p.K = kind, k
	if kind.IsDP() && p.Users == 0 && input != "" {
		if p.Users, err = CountUsers(input); err != nil {
			return nil, err
		}
	}
	return policy.New(p)
}

// CountUsers returns the number of distinct AnonIDs of the log at path
// (bad lines are skipped; the time format detected, see CheckInput for
// another).
func CountUsers(path string) (int, error) {
	r, err := aol.Open(path)
	if err != nil {
		return 0, fmt.Errorf("count users of %s: %w", path, err)
	}
	defer r.Close()
	seen := map[string]struct{}{}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return len(seen), nil
		}
		if err != nil {
			return 0, fmt.Errorf("count users of %s: %w", path, err)
		}
		seen[rec.AnonID] = struct{}{}
	}
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
