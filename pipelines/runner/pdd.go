package runner

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/crowdlog/crowdlog/aggregator/vectors"
	"github.com/crowdlog/crowdlog/coordinator"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/ingest/pdd"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/relays"
	"github.com/crowdlog/crowdlog/release"
	pddrelease "github.com/crowdlog/crowdlog/release/pdd"
)

// PDDConfig is one `crowdlog pdd`: a log replayed day by day as PDD
// clients (one per AnonID) through the coordinator, the relays, the vectors
// aggregator and the PDD release stage into ClickHouse.
type PDDConfig struct {
	Input     string   // AOL TSV log, plain or gzip
	Campaign  string   // default "pdd"
	Keywords  string   // keyword list file; "" = the embedded google-10000-english
	Blacklist []string // keywords every client keeps to itself (PDD §6.1)
	MaxUsers  int      // only the first MaxUsers AnonIDs (0 = all)
	MaxDays   int      // only rounds of the first MaxDays days of the log (0 = all)

	GroupSize    int  // default 100
	Delay        int  // δ, days; default 2
	RecoveryDays int  // default 1
	Heuristic    bool // PDD eq. 5

	// Online: "active" (default) — a client pings on the days it has log
	// records, as PDD's clients do; "all" — every client pings every day
	// (every client online). Dropout skips each ping with this probability
	// (seeded by Seed).
	Online  string
	Dropout float64
	Seed    uint64

	Epsilon  float64 // Laplace noise on daily counts; 0 = exact counts
	MaxCount int     // per-client per-keyword per-day clip with noise
	// Dataset and Budget: the privacy ledger a noisy day spends from (L·ε
	// per day, release/pdd.Stage); a day over budget ends the run with an
	// error wrapping release.ErrOverBudget.
	Dataset string
	Budget  release.Budget

	NATS, Kafka, ClickHouse string // "" = started locally; NATS and Kafka take comma-separated lists
	Database                string // default "crowdlog"
	StateDir                string // "" = temp dir removed at the end
	Partitions              int    // default 8

	Export   string // TSV of the released daily counts
	Workers  int    // concurrent clients per day; default 8
	Progress io.Writer
	Timeout  time.Duration // wait for the release after the last day; default 10 min
	Logger   *slog.Logger
}

// PDDSummary is what a PDD run did.
type PDDSummary struct {
	Users, Days, Rounds           int
	Pings, Submitted, Answered    int64
	Groups, Complete, Recovered   int
	Lost                          int
	RoundsReleased                int
	MeanConfidence                float64
	Released                      []pddrelease.Round
	AggregatorDropped, RelayDrops int64
	Elapsed                       time.Duration
}

// Print writes the summary for humans (counts only, never a user's data).
func (s *PDDSummary) Print(w io.Writer) {
	fmt.Fprintf(w, "crowdlog pdd: %d clients over %d days (%d rounds released)\n", s.Users, s.Days, s.RoundsReleased)
	fmt.Fprintf(w, "  pings %d, vectors submitted %d, recovery answers %d\n", s.Pings, s.Submitted, s.Answered)
	fmt.Fprintf(w, "  groups %d: complete %d, recovered %d, lost %d\n", s.Groups, s.Complete, s.Recovered, s.Lost)
	fmt.Fprintf(w, "  mean confidence %.3f (clients decrypted / clients active, PDD §4.5)\n", s.MeanConfidence)
	fmt.Fprintf(w, "  dropped: relays %d, aggregator %d (mostly recovery answers arriving after a group was recovered); elapsed %s\n",
		s.RelayDrops, s.AggregatorDropped, s.Elapsed.Round(time.Second))
}

type pddUser struct {
	active map[keywords.Day]bool
	counts map[keywords.Day]keywords.Sparse
	client *pdd.Client
}

// RunPDD runs PDD mode end to end; see PDDConfig.
func RunPDD(ctx context.Context, cfg PDDConfig) (*PDDSummary, error) {
	t0 := time.Now()
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Input == "" {
		return nil, errors.New("no input: give --input LOG (AOL TSV, plain or .gz)")
	}
	if cfg.Campaign == "" {
		cfg.Campaign = "pdd"
	}
	if cfg.Online == "" {
		cfg.Online = "active"
	}
	if cfg.Online != "active" && cfg.Online != "all" {
		return nil, fmt.Errorf("--online %q: use active or all", cfg.Online)
	}
	if cfg.Dropout < 0 || cfg.Dropout >= 1 {
		return nil, fmt.Errorf("--dropout %v outside [0, 1)", cfg.Dropout)
	}
	cfg.GroupSize = cmpOr(cfg.GroupSize, 100)
	if cfg.Delay < 0 {
		return nil, errors.New("--delay must be ≥ 0")
	}
	cfg.RecoveryDays = cmpOr(cfg.RecoveryDays, 1)
	cfg.Partitions = cmpOr(cfg.Partitions, 8)
	cfg.Workers = cmpOr(cfg.Workers, 8)
	if cfg.Database == "" {
		cfg.Database = "crowdlog"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	list, err := keywords.Load(cfg.Keywords)
	if err != nil {
		return nil, err
	}
	listName := cfg.Keywords
	if listName == "" {
		listName = keywords.DefaultName
	}
	black := map[string]bool{}
	for _, w := range cfg.Blacklist {
		black[w] = true
	}

	// 1. the log: per user, active days and keyword counts per day
	var users []*pddUser
	var first, last keywords.Day = 1 << 30, -1 << 30
	lst, err := aol.ReadUsers(cfg.Input, func(u aol.User) error {
		if cfg.MaxUsers > 0 && len(users) >= cfg.MaxUsers {
			return nil
		}
		pu := &pddUser{active: map[keywords.Day]bool{}, counts: list.Counts(u.Records, black)}
		for _, r := range u.Records {
			d := keywords.DayOf(r.QueryTime)
			pu.active[d] = true
			first, last = min(first, d), max(last, d)
		}
		users = append(users, pu)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", cfg.Input, err)
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("%s: no users (%d bad lines)", cfg.Input, lst.Bad)
	}
	if cfg.MaxDays > 0 {
		last = min(last, first+keywords.Day(cfg.MaxDays)-1)
		for _, u := range users {
			for d := range u.counts {
				if d > last {
					delete(u.counts, d)
				}
			}
			for d := range u.active {
				if d > last {
					delete(u.active, d)
				}
			}
		}
	}
	sum := &PDDSummary{Users: len(users)}

	// 2. services
	state := cfg.StateDir
	if state == "" {
		if state, err = os.MkdirTemp("", "crowdlog-pdd-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(state)
	}
	keysDir := filepath.Join(state, "keys")
	stopLocal, err := startLocal(ctx, state, &cfg.NATS, &cfg.Kafka, &cfg.ClickHouse, cfg.Partitions)
	if err != nil {
		return nil, err
	}
	defer stopLocal()
	brokers := strings.Split(cfg.Kafka, ",")
	if err := kafka.EnsureTopics(ctx, brokers[0], cfg.Partitions, protocol.VectorsTopic, protocol.GroupSumsTopic); err != nil {
		return nil, err
	}
	if err := keydir.EnsureKeys(keysDir); err != nil {
		return nil, err
	}
	nc, err := natsconn.Connect(cfg.NATS, "crowdlog-pdd")
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
	writer, err := release.Open(ctx, cfg.ClickHouse, cfg.Database)
	if err != nil {
		return nil, fmt.Errorf("open ClickHouse at %s: %w", cfg.ClickHouse, err)
	}
	defer writer.Close()

	svcCtx, stop := context.WithCancel(ctx)
	var svc errgroup.Group
	defer func() { stop(); svc.Wait() }()
	var relayStats []*relays.Stats
	for _, name := range []string{"a", "b"} {
		r, closeW, err := relays.New(svcCtx, js, relays.Options{Name: name, Kafka: brokers,
			KeyPaths: []string{filepath.Join(keysDir, "relay-"+name+".key")}}, log)
		if err != nil {
			return nil, err
		}
		relayStats = append(relayStats, r.Stats)
		svc.Go(func() error { defer closeW(); return r.Run(svcCtx) })
	}
	aggSign, err := keydir.EnsureSigningKey(filepath.Join(keysDir, keydir.AggregatorSignKey))
	if err != nil {
		return nil, err
	}
	opSign, err := keydir.EnsureSigningKey(filepath.Join(keysDir, keydir.OperatorSignKey))
	if err != nil {
		return nil, err
	}
	coord := &coordinator.Coordinator{NC: nc, Brokers: brokers, Logger: log,
		AggregatorKey: aggSign.Public().(ed25519.PublicKey), OperatorKey: opSign.Public().(ed25519.PublicKey), Campaign: coordinator.Campaign{
			Name: cfg.Campaign, List: list, ListName: listName, GroupSize: cfg.GroupSize, Delay: cfg.Delay,
			RecoveryDays: cfg.RecoveryDays, Heuristic: cfg.Heuristic, End: int32(last)}}
	if err := coord.Start(svcCtx); err != nil {
		return nil, err
	}
	defer coord.Close()
	aggKey, err := onion.LoadKeyPair(filepath.Join(keysDir, keydir.AggregatorKey))
	if err != nil {
		return nil, err
	}
	agg := &vectors.Service{Brokers: brokers, Keys: []*onion.KeyPair{aggKey}, Recoverer: coordinator.NATSRecoverer{NC: nc, Key: aggSign}, Logger: log}
	svc.Go(func() error { return agg.Run(svcCtx) })
	var relMu sync.Mutex
	var released []pddrelease.Round
	var refused error
	rel := &pddrelease.Stage{Brokers: brokers, Writer: writer, List: list, Epsilon: cfg.Epsilon, MaxCount: int64(cfg.MaxCount),
		Dataset: cfg.Dataset, Budget: cfg.Budget, OnRefused: func(_ string, _ time.Time, err error) {
			relMu.Lock()
			defer relMu.Unlock()
			refused = cmp.Or(refused, err)
		},
		Logger: log, OnRound: func(r pddrelease.Released) {
			relMu.Lock()
			defer relMu.Unlock()
			released = append(released, r.Round)
		}}
	svc.Go(func() error { return rel.Run(svcCtx) })

	// 3. clients register
	a, b, ag, err := keydir.LoadRoute(keysDir)
	if err != nil {
		return nil, err
	}
	pub := &publish.Publisher{JS: js, Subject: protocol.RelaySubject("a")}
	defer pub.Close(context.Background())
	tr := &pdd.Transport{NC: nc, Route: ingest.Route{RelayA: a, RelayB: b, Aggregator: ag, SubjectB: protocol.RelaySubject("b")}, Publish: pub.Publish}
	if err := forEach(ctx, cfg.Workers, users, func(ctx context.Context, u *pddUser) error {
		c, err := pdd.Register(ctx, tr, cfg.Campaign, list, "")
		if err != nil {
			return err
		}
		c.Counts = u.counts
		if cfg.Epsilon > 0 {
			c.MaxCount = uint64(cmpOr(cfg.MaxCount, int(pddrelease.DefaultMaxCount)))
		}
		u.client = c
		return nil
	}); err != nil {
		return nil, err
	}

	// 4. the days: advance the clock, the online clients ping, drain
	// the last round is the log's last day; its recovery window closes on
	// day last+1+δ+R, and the tick of the day after finalizes it
	end := last + keywords.Day(2+cfg.Delay+cfg.RecoveryDays)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9dd))
	expect := 0
	var pings, submitted, answered atomic.Int64
	for d := first; d <= end; d++ {
		rep, err := coord.Advance(ctx, int32(d))
		if err != nil {
			return nil, err
		}
		// the aggregator must have applied the day's tick (and asked for its
		// recoveries) before clients ping, as it would within a real day
		if err := waitFor(ctx, "the vectors aggregator to reach the day", func() (bool, error) {
			got, ok := agg.Day(cfg.Partitions)
			return ok && got >= int32(d), nil
		}); err != nil {
			return nil, err
		}
		if rep.Groups > 0 {
			expect++
			sum.Groups += rep.Groups
		}
		var online []*pddUser
		for _, u := range users {
			// after the log's last day the clients are still around (the
			// log ended, not them): they ping to settle the last rounds
			on := cfg.Online == "all" || u.active[d] || d > last
			if cfg.Dropout > 0 && rng.Float64() < cfg.Dropout {
				on = false
			}
			if on {
				online = append(online, u)
			}
		}
		if err := forEach(ctx, cfg.Workers, online, func(ctx context.Context, u *pddUser) error {
			st, err := u.client.Ping(ctx, tr)
			if err != nil {
				return err
			}
			pings.Add(1)
			submitted.Add(int64(st.Submitted))
			answered.Add(int64(st.Answered))
			return nil
		}); err != nil {
			return nil, err
		}
		if err := pub.Flush(ctx); err != nil {
			return nil, err
		}
		if err := waitFor(ctx, "relays to drain", func() (bool, error) { return relays.Drained(ctx, js, "a", "b") }); err != nil {
			return nil, err
		}
		sum.Days++
		log.Info("pdd: day done", "day", d.String(), "online", len(online), "groups_formed", rep.Groups)
	}
	sum.Rounds = expect
	sum.Pings, sum.Submitted, sum.Answered = pings.Load(), submitted.Load(), answered.Load()

	// 5. wait for every round with groups to be released
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := waitFor(wctx, "the PDD release of every round", func() (bool, error) {
		relMu.Lock()
		defer relMu.Unlock()
		if refused != nil {
			return false, &permanent{fmt.Errorf("pdd: a day was refused over the privacy budget: %w", refused)}
		}
		return len(released) >= expect, nil
	}); err != nil {
		return nil, err
	}
	relMu.Lock()
	sum.Released = slices.Clone(released)
	relMu.Unlock()
	slices.SortFunc(sum.Released, func(x, y pddrelease.Round) int { return int(x.Day) - int(y.Day) })
	sum.RoundsReleased = len(sum.Released)
	var conf float64
	for _, r := range sum.Released {
		sum.Complete += int(r.Complete)
		sum.Recovered += int(r.Recovered)
		sum.Lost += int(r.Lost)
		conf += r.Confidence
	}
	if len(sum.Released) > 0 {
		sum.MeanConfidence = conf / float64(len(sum.Released))
	}
	for _, st := range relayStats {
		sum.RelayDrops += int64(st.Snapshot().Dropped())
	}
	sum.AggregatorDropped = agg.Dropped.Load()
	if cfg.Export != "" {
		if err := exportPDD(ctx, writer, cfg.Campaign, cfg.Export); err != nil {
			return sum, err
		}
	}
	sum.Elapsed = time.Since(t0)
	return sum, nil
}

func cmpOr(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

// forEach runs f over items with n workers; the first error stops it.
func forEach[T any](ctx context.Context, n int, items []T, f func(context.Context, T) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(n)
	for _, it := range items {
		g.Go(func() error { return f(gctx, it) })
	}
	return g.Wait()
}

// exportPDD writes the campaign's keyword_daily rows as TSV
// (release.KeywordDailyTSVHeader).
func exportPDD(ctx context.Context, w *release.Writer, campaign, path string) error {
	rows, err := w.ReadKeywordDaily(ctx, campaign)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := release.WriteKeywordDailyTSV(f, rows); err != nil {
		f.Close()
		return fmt.Errorf("export: %w", err)
	}
	return f.Close()
}
