package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
	"github.com/crowdlog/crowdlog/ingest/publish"
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
	Input  string // AOL TSV log, plain or gzip
	App    string // mining application, e.g. "query"
	Policy string // "ft-u", "ft-a", "dp-a", "dp-u" or "zealous" (release/policy)
	K      int    // threshold k of ft-u/ft-a (DP policies derive their Shamir k)
	Epoch  string // epoch name; the whole input is one epoch

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
	// randomness.ErrEpochNotOpen. In process, run opens Epoch itself.
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

	// Metrics, when set (e.g. "127.0.0.1:9100"), serves /metrics, /healthz and
	// /readyz for every in-process role.
	Metrics string
	// afterRelease, in tests, is called with the metrics address once the
	// release is in ClickHouse, while the roles still run.
	afterRelease func(metricsAddr string)

	Export   string        // write the released histogram as TSV here
	Workers  int           // concurrent clients; default GOMAXPROCS
	Progress io.Writer     // progress bar destination; nil = none
	Timeout  time.Duration // for the wait after ingest; default 10 min
	Logger   *slog.Logger
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
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	start := time.Now()
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
	if _, err := os.Stat(cfg.Input); err != nil {
		return nil, fmt.Errorf("input log: %w", err)
	}
	if cfg.Summary, err = release.ParseSummaryMode(string(cfg.Summary)); err != nil {
		return nil, fmt.Errorf("--summary: %w", err)
	}
	pol, err := ResolvePolicy(cfg.Policy, cfg.K, cfg.DP, cfg.Input)
	if err != nil {
		return nil, err
	}
	state := cfg.StateDir
	if state == "" {
		if state, err = os.MkdirTemp("", "crowdlog-run-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(state)
	}
	if cfg.KeysDir == "" {
		cfg.KeysDir = filepath.Join(state, "keys")
	}
	sum := &Summary{Policy: pol.String()}
	key := release.Key{App: app.Name(), Epoch: cfg.Epoch, Policy: string(pol.Kind), K: pol.ShamirK}
	spend := release.Spend{Dataset: cfg.Dataset, Epoch: cfg.Epoch, App: key.App, Policy: key.Policy, K: key.K,
		Epsilon: pol.AchievedEpsilon, Delta: pol.AchievedDelta}

	// 1. services: given addresses, or started locally
	stopLocal, err := startLocal(ctx, state, &cfg.NATS, &cfg.Kafka, &cfg.ClickHouse, cfg.Partitions)
	if err != nil {
		return nil, err
	}
	defer stopLocal()
	sum.NATS, sum.Kafka, sum.ClickHs = cfg.NATS, cfg.Kafka, cfg.ClickHouse
	brokers := strings.Split(cfg.Kafka, ",")
	if err := kafka.EnsureTopics(ctx, brokers[0], cfg.Partitions, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		return nil, err
	}
	if !cfg.External {
		if err := keydir.EnsureKeys(cfg.KeysDir); err != nil {
			return nil, err
		}
	}
	nc, err := natsconn.Connect(cfg.NATS, "crowdlog-run")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if err := relays.EnsureStream(ctx, js, 0); err != nil {
		return nil, err
	}
	writer, err := releaseWriter(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer writer.Close()
	if pol.Kind.IsDP() {
		// fail before ingesting when the release would be refused anyway
		if err := writer.CheckBudget(ctx, spend, cfg.Budget); err != nil {
			return sum, err
		}
	}
	var refusedMu sync.Mutex
	var refused error

	// 2. the roles, in process unless External
	reg := metrics.NewRegistry()
	if cfg.Metrics != "" {
		addr, err := metrics.Serve(ctx, cfg.Metrics, reg, nil)
		if err != nil {
			return nil, err
		}
		sum.Metrics = addr.String()
		log.Info("metrics", "url", "http://"+sum.Metrics+"/metrics")
	}
	svcCtx, stopServices := context.WithCancel(ctx)
	var svc errgroup.Group
	defer func() { stopServices(); svc.Wait() }()
	var relayStats []*relays.Stats
	var agg *aggregator.Service
	rc := &randomness.Client{NC: nc, PinFile: filepath.Join(cfg.KeysDir, keydir.RandomnessPins)}
	if !cfg.External {
		rs, err := randomness.New(svcCtx, nc, cfg.KeysDir, randomness.Options{}, log)
		if err != nil {
			return nil, err
		}
		// the run is the operator of its named epoch: open it in the key
		// directory before any client asks (the service never opens a named
		// epoch for a request), and pin the key read from the directory itself
		pk, _, err := rs.Keys.OpenEpoch(cfg.Epoch)
		if err != nil {
			return nil, fmt.Errorf("open epoch %s at the randomness service: %w", cfg.Epoch, err)
		}
		rc.Pinned = map[string][]byte{cfg.Epoch: pk}
		RegisterRandomness(reg, rs)
		svc.Go(func() error { return rs.Run(svcCtx) })
		for _, name := range []string{"a", "b"} {
			r, closeW, err := relays.New(svcCtx, js, relays.Options{Name: name, Kafka: brokers,
				KeyPaths: []string{filepath.Join(cfg.KeysDir, "relay-"+name+".key")}}, log)
			if err != nil {
				return nil, err
			}
			r.Registerer = reg
			relayStats = append(relayStats, r.Stats)
			svc.Go(func() error { defer closeW(); return r.Run(svcCtx) })
		}
		agg, err = aggregator.New(brokers, []string{filepath.Join(cfg.KeysDir, keydir.AggregatorKey)}, log)
		if err != nil {
			return nil, err
		}
		RegisterAggregator(reg, agg)
		svc.Go(func() error { return agg.Run(svcCtx) })
		st, w, err := stage.New(svcCtx, brokers, cfg.ClickHouse, cfg.Database, log)
		if err != nil {
			return nil, err
		}
		st.Summary = cfg.Summary
		if pol.Kind.IsDP() {
			st.Policy, st.Dataset, st.Budget = pol, cfg.Dataset, cfg.Budget
			st.OnRefused = func(app, epoch string, err error) {
				refusedMu.Lock()
				defer refusedMu.Unlock()
				refused = err
			}
		}
		RegisterRelease(reg, st)
		svc.Go(func() error { defer w.Close(); return st.Run(svcCtx) })
	}

	// 3. ingest: every AnonID a client
	a, b, ag, err := keydir.LoadRoute(cfg.KeysDir)
	if err != nil {
		return nil, err
	}
	if cfg.External { // in process the relays hold these very keys
		if err := CheckRoute(ctx, nc, a, b, log); err != nil {
			return nil, err
		}
	}
	pub := &publish.Publisher{JS: js, Subject: protocol.RelaySubject("a")}
	RegisterPublisher(reg, pub)
	client := newClient(app, cfg.Epoch, pol, cfg.Spread, rc, a, b, ag, pub)
	rp := &ingest.Replay{Client: client, Workers: cfg.Workers, Progress: cfg.Progress, Logger: log}
	// the aggregator keeps reports only of open epochs: the open marker
	// precedes every report in each partition
	octx, ocancel := context.WithTimeout(ctx, cfg.Timeout)
	err = aggregator.OpenEpoch(octx, brokers, app.Name(), cfg.Epoch)
	ocancel()
	if err != nil {
		return sum, fmt.Errorf("open epoch at the aggregator (is Kafka up?): %w", err)
	}
	log.Info("ingest: replaying log", "app", app.Name(), "epoch", cfg.Epoch, "policy", pol.String())
	rsum, err := rp.Run(ctx, cfg.Input)
	sum.Users, sum.Sent = rsum.Users, rsum.Reports
	sum.LogLines, sum.BadLines = rsum.Log.Lines, rsum.Log.Bad
	if rsum.Log.Bad > 0 {
		log.Warn("ingest: bad lines skipped", "summary", rsum.Log.String())
	}
	if err != nil {
		return sum, fmt.Errorf("ingest: %w", err)
	}
	if err := pub.Flush(ctx); err != nil {
		return sum, fmt.Errorf("ingest: flush: %w", err)
	}

	// 4. wait for the relays to drain, close the epoch, wait for the release
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := waitFor(wctx, "relays to drain", func() (bool, error) { return relays.Drained(wctx, js, "a", "b") }); err != nil {
		return sum, err
	}
	log.Info("relays drained; closing epoch", "epoch", cfg.Epoch)
	if err := aggregator.CloseEpoch(wctx, brokers, app.Name(), cfg.Epoch); err != nil {
		return sum, fmt.Errorf("close epoch: %w", err)
	}
	if err := waitFor(wctx, "the release in ClickHouse", func() (bool, error) {
		refusedMu.Lock()
		err := refused
		refusedMu.Unlock()
		if err != nil {
			return false, &permanent{err}
		}
		return writer.IsReleased(wctx, key)
	}); err != nil {
		return sum, err
	}
	items, err := writer.ReleasedItems(ctx, key.App, key.Epoch, key.Policy, key.K)
	if err != nil {
		return sum, err
	}
	if sum.Undecrypted, err = writer.UndecryptedSummary(ctx, key.App, key.Epoch, key.Policy, key.K); err != nil {
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
	sum.Elapsed = time.Since(start)
	return sum, nil
}

func (cfg *Config) defaults() error {
	if cfg.Input == "" {
		return errors.New("no input: give --input LOG (AOL TSV, plain or .gz)")
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

// waitFor polls cond every 200 ms until it holds or ctx ends.
func waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	var last error
	var once sync.Once
	t0 := time.Now()
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		var perm *permanent
		if errors.As(err, &perm) {
			return perm.err
		}
		if err != nil {
			last = err
		}
		if time.Since(t0) > 5*time.Second {
			once.Do(func() { slog.Info("waiting for " + what) })
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("timed out waiting for %s", what)
			if last != nil {
				msg += ": " + strings.TrimSpace(last.Error())
			}
			return errors.New(msg + " (are all roles running? see `crowdlog --help`)")
		case <-time.After(200 * time.Millisecond):
		}
	}
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

// CountUsers returns the number of distinct AnonIDs of the AOL log at path
// (bad lines are skipped).
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
