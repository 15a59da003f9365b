package runner

import (
	"bytes"
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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/crowdlog/crowdlog/aggregator/vectors"
	"github.com/crowdlog/crowdlog/coordinator"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/ingest/pdd"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/relays"
	"github.com/crowdlog/crowdlog/release"
	pddrelease "github.com/crowdlog/crowdlog/release/pdd"
)

// PDDConfig is one `crowdlog pdd`: a log replayed day by day as PDD
// clients (one per AnonID) through the coordinator, the relays, the vectors
// aggregator and the PDD release stage into ClickHouse.
type PDDConfig struct {
	// Mode is ModeGroups (default: blinded groups, one aggregator) or
	// ModePrio3 (two aggregators, the Prio3 VDAF; no groups).
	Mode string
	// PipelineFile, when set, gives Mode and the measurement from a
	// pipeline file's pdd section (Complete applies it).
	PipelineFile string
	Input        string   // AOL TSV log, plain or gzip
	Campaign     string   // default "pdd"
	Keywords     string   // keyword list file; "" = the embedded google-10000-english
	Blacklist    []string // keywords every client keeps to itself (PDD §6.1)
	MaxUsers     int      // only the first MaxUsers AnonIDs (0 = all)
	MaxDays      int      // only rounds of the first MaxDays days of the log (0 = all)
	// Timezone names the IANA time zone (time.LoadLocation, e.g.
	// "Asia/Shanghai") whose calendar days are the rounds: a query
	// instance ends at its midnight (keywords.CountsIn). "" = UTC.
	Timezone string

	// Prio3 mode's measurement: Measurement MeasureCounts (default; per
	// keyword the day's count clipped to 2^Bits − 1, Bits default 4) or
	// MeasurePresence (0/1, at most MaxWeight keywords per client and day);
	// Chunk the proof's chunk length (0 = protocol/prio3.DefaultChunk);
	// MinBatchSize the fewest reports a day is released with (default
	// DefaultMinBatchSize). L1 (MeasureCounts) is the bound S each client
	// keeps its daily sum of clipped counts within, the noise's
	// sensitivity (0 = protocol/prio3.DefaultL1).
	Measurement            string
	Bits, MaxWeight, Chunk int
	L1                     int
	MinBatchSize           int

	GroupSize    int  // default 100
	Delay        int  // δ, days; default 2
	RecoveryDays int  // default 1
	Heuristic    bool // PDD eq. 5

	// Online: "active" (default) — a client pings on the days it has log
	// records, as PDD's clients do; "all" — every client pings every day
	// (every client online). Dropout takes a client offline on a day with
	// this probability (seeded by Seed): in groups mode it sends no ping
	// that day, in prio3 mode no upload.
	Online  string
	Dropout float64
	Seed    uint64

	Epsilon float64 // Laplace noise on daily counts; 0 = exact counts (prio3: 0 = aggregator/prio3.DefaultEpsilon unless ExactShares)
	// StatusEpsilon and StatusDelta (prio3): the (ε_c, δ) of each day's
	// released/withheld status, decided by the leader from a noisy count
	// (aggregate-prio3 --status-epsilon; aggregator/prio3 status.go) and
	// charged on each noisy day's ledger row. p3.AutoStatusEpsilon (the
	// CLI's default) = 0.1 × Epsilon; 0 (the zero value) = the exact
	// minimum batch rule, whose status tells one person's presence on a
	// day of MinBatchSize − 1 reports. StatusDelta 0 = p3.DefaultStatusDelta.
	StatusEpsilon, StatusDelta float64
	MaxCount                   int // groups with Epsilon > 0: each client's per-keyword per-day clip, the noise's sensitivity (0 = release/pdd.DefaultMaxCount); no clip without noise
	// ExactShares (prio3): the aggregators release exact shares (Epsilon
	// must be 0), giving up the noise that protects a client against a
	// malicious leader padding its batch.
	ExactShares bool
	// Dataset and Budget: the privacy ledger a noisy day spends from (L·ε
	// per day in groups mode, release/pdd.Stage; ε per person-day in prio3
	// mode, whose zero budget means release/prio3.DefaultBudgetEpsilon); a
	// day over budget is refused, not released, recorded as withheld
	// (release.WithheldBudget) and listed so in the export, and the run
	// ends with an error (groups mode: wrapping release.ErrOverBudget)
	// once every other day is released.
	Dataset string
	Budget  release.Budget

	NATS, Kafka, ClickHouse string // "" = started locally; NATS and Kafka take comma-separated lists
	Database                string // default "crowdlog"
	StateDir                string // "" = temp dir removed at the end
	Partitions              int    // default 8

	Export string // TSV of the released daily counts and the withheld days (release.PDDExportHeader)
	// ExportNonZero (--export-nonzero) leaves the zero counts of released
	// days out of Export.
	ExportNonZero bool
	Workers       int       // concurrent clients per day; default 8
	Progress      io.Writer // a line per day and phase (prio3 mode); nil = none
	// NoProgress (--no-progress): the command leaves Progress nil.
	NoProgress bool
	Timeout    time.Duration // wait for the release after the last day; default 10 min
	Logger     *slog.Logger
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
	// Prio3 is set by a Prio3-mode run (the group fields are then zero).
	Prio3 *Prio3Summary
}

// Print writes the summary for humans (counts only, never a user's data).
func (s *PDDSummary) Print(w io.Writer) {
	if s.Prio3 != nil {
		s.printPrio3(w)
		return
	}
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
	p := &pddRun{cfg: cfg, log: cfg.Logger}
	if p.log == nil {
		p.log = slog.Default()
	}
	defer func() {
		for i := len(p.cleanup) - 1; i >= 0; i-- {
			p.cleanup[i]()
		}
	}()
	if cfg.Mode == ModePrio3 {
		return runPrio3(ctx, p)
	}
	if err := p.prepare(); err != nil {
		return nil, err
	}
	if err := p.readLog(); err != nil {
		return nil, err
	}
	if err := p.startServices(ctx); err != nil {
		return nil, err
	}
	if err := p.startRoles(ctx); err != nil {
		return nil, err
	}
	if err := p.register(ctx); err != nil {
		return nil, err
	}
	if err := p.runDays(ctx); err != nil {
		return nil, err
	}
	if err := p.waitReleased(ctx); err != nil {
		return nil, err
	}
	if err := p.finish(ctx); err != nil {
		return p.sum, err
	}
	p.sum.Elapsed = time.Since(t0)
	if p.refused != nil {
		return p.sum, fmt.Errorf("pdd: %d days refused over the privacy budget (raise --budget-epsilon, or give campaigns that share days their own --dataset; the export lists them as withheld): %w", p.nRefused, p.refused)
	}
	return p.sum, nil
}

// pddRun is the state of one RunPDD between its phases.
type pddRun struct {
	cfg     PDDConfig
	log     *slog.Logger
	sum     *PDDSummary
	cleanup []func() // run in reverse order when RunPDD returns

	list        *keywords.List
	listName    string
	loc         *time.Location // the days' time zone (PDDConfig.Timezone)
	black       map[string]bool
	users       []*pddUser
	first, last keywords.Day

	keysDir    string
	brokers    []string
	nc         *nats.Conn          // the clients' (natsauth.Client)
	js         jetstream.JetStream // on nc
	opjs       relayJS             // the operator's: relay streams, drain checks
	natsKeys   string              // the embedded server's role NKeys; "" when NATS was given
	conns      []func()            // Close of every NATS connection, run after the roles stopped
	writer     *release.Writer
	relayStats []*relays.Stats
	coord      *coordinator.Coordinator
	agg        *vectors.Service
	relMu      sync.Mutex
	released   []pddrelease.Round // guarded by relMu
	refused    error              // guarded by relMu: the first refusal
	nRefused   int                // guarded by relMu: days refused over the budget
	pub        *publish.Publisher
	tr         *pdd.Transport

	expect                     int // rounds with groups
	pings, submitted, answered atomic.Int64
}

// defaults checks the configuration and fills in its defaults.
func (cfg *PDDConfig) defaults() error {
	if cfg.Input == "" {
		return errors.New("no input: give --input LOG (AOL TSV, plain or .gz)")
	}
	if cfg.Campaign == "" {
		cfg.Campaign = "pdd"
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeGroups
	}
	switch cfg.Mode {
	case ModeGroups:
	case ModePrio3:
		if err := cfg.prio3Defaults(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--mode %q: use groups or prio3", cfg.Mode)
	}
	if cfg.Online == "" {
		cfg.Online = "active"
	}
	if cfg.Online != "active" && cfg.Online != "all" {
		return fmt.Errorf("--online %q: use active or all", cfg.Online)
	}
	if cfg.Dropout < 0 || cfg.Dropout >= 1 {
		return fmt.Errorf("--dropout %v outside [0, 1)", cfg.Dropout)
	}
	cfg.GroupSize = cmpOr(cfg.GroupSize, 100)
	if cfg.Delay < 0 {
		return errors.New("--delay must be ≥ 0")
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
	return nil
}

// prepare checks the configuration and loads the keyword list and the
// blacklist.
func (p *pddRun) prepare() error {
	if err := p.cfg.defaults(); err != nil {
		return err
	}
	var err error
	if p.list, err = keywords.Load(p.cfg.Keywords); err != nil {
		return err
	}
	p.loc = time.UTC
	if p.cfg.Timezone != "" {
		if p.loc, err = time.LoadLocation(p.cfg.Timezone); err != nil {
			return fmt.Errorf("--timezone %q: %w (give an IANA name such as Asia/Shanghai, or UTC)", p.cfg.Timezone, err)
		}
	}
	p.listName = p.cfg.Keywords
	if p.listName == "" {
		p.listName = keywords.DefaultName
	}
	p.black = map[string]bool{}
	for _, w := range p.cfg.Blacklist {
		// normalized like the list: "Free" blacklists "free"
		if i := p.list.Lookup(w); i >= 0 {
			p.black[p.list.Words[i]] = true
		}
	}
	return nil
}

// readLog reads the log: per user, active days and keyword counts per day
// (only MaxUsers users and MaxDays days), and the first and last day.
func (p *pddRun) readLog() error {
	cfg := &p.cfg
	p.first, p.last = 1<<30, -1<<30
	lst, err := aol.ReadUsers(cfg.Input, func(u aol.User) error {
		if cfg.MaxUsers > 0 && len(p.users) >= cfg.MaxUsers {
			return nil
		}
		pu := &pddUser{active: map[keywords.Day]bool{}, counts: p.list.CountsIn(u.Records, p.black, p.loc)}
		for _, r := range u.Records {
			d := keywords.DayIn(r.QueryTime, p.loc)
			pu.active[d] = true
			p.first, p.last = min(p.first, d), max(p.last, d)
		}
		p.users = append(p.users, pu)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", cfg.Input, err)
	}
	if len(p.users) == 0 {
		return fmt.Errorf("%s: no users (%d bad lines)", cfg.Input, lst.Bad)
	}
	if cfg.MaxDays > 0 {
		p.last = min(p.last, p.first+keywords.Day(cfg.MaxDays)-1)
		for _, u := range p.users {
			for d := range u.counts {
				if d > p.last {
					delete(u.counts, d)
				}
			}
			for d := range u.active {
				if d > p.last {
					delete(u.active, d)
				}
			}
		}
	}
	p.sum = &PDDSummary{Users: len(p.users)}
	return nil
}

// startServices starts the local services (those without an address),
// creates the topics, keys and relay stream, connects to NATS and opens
// the ClickHouse writer.
func (p *pddRun) startServices(ctx context.Context) error {
	cfg := &p.cfg
	state := cfg.StateDir
	if state == "" {
		var err error
		if state, err = os.MkdirTemp("", "crowdlog-pdd-"); err != nil {
			return err
		}
		p.cleanup = append(p.cleanup, func() { os.RemoveAll(state) })
	}
	p.keysDir = filepath.Join(state, "keys")
	localCH := cfg.ClickHouse == ""
	stopLocal, err := startLocal(ctx, state, &cfg.NATS, &cfg.Kafka, &cfg.ClickHouse, cfg.Partitions, &p.natsKeys)
	if err != nil {
		return err
	}
	p.cleanup = append(p.cleanup, stopLocal, func() { closeAll(p.conns) })
	p.brokers = strings.Split(cfg.Kafka, ",")
	if err := kafka.EnsureTopics(ctx, p.brokers[0], cfg.Partitions, protocol.VectorsTopic, protocol.GroupSumsTopic); err != nil {
		return err
	}
	if err := keydir.EnsureKeys(p.keysDir); err != nil {
		return err
	}
	if p.nc, p.js, err = p.connect(natsauth.Client, "crowdlog-pdd"); err != nil {
		return err
	}
	if p.opjs, err = operatorJS(p.connect, "crowdlog-pdd-operator", p.natsKeys != ""); err != nil {
		return err
	}
	if err := ensureStreams(ctx, p.connect, false, p.natsKeys != "", p.opjs); err != nil {
		return err
	}
	if p.writer, err = openPDDWriter(ctx, cfg.ClickHouse, cfg.Database, localCH); err != nil {
		return err
	}
	p.cleanup = append(p.cleanup, func() { p.writer.Close() })
	return nil
}

// openPDDWriter opens the release database on the ClickHouse at addr
// (release.Open). On the local server a one-process run started itself
// (local), it also creates the analyst database (<database>_analyst:
// copies of the released days and the view keyword_daily,
// release.OpenAnalystDatabase), so the analyst SQL of docs/pdd.md runs on
// that server after the run (`crowdlog clickhouse --dir STATE/clickhouse`
// serves it again). A server given by address is left to its operator's
// `crowdlog clickhouse init`.
func openPDDWriter(ctx context.Context, addr, database string, local bool) (*release.Writer, error) {
	w, err := release.Open(ctx, addr, database)
	if err != nil {
		return nil, fmt.Errorf("open ClickHouse at %s: %w", addr, err)
	}
	if local {
		if _, err := release.OpenAnalystDatabase(ctx, addr, database); err != nil {
			w.Close()
			return nil, fmt.Errorf("create the analyst database on the local ClickHouse at %s: %w", addr, err)
		}
	}
	return w, nil
}

// connect returns a NATS connection for role: with the embedded server's
// permission table on (natsKeys), a new one with role's own NKey;
// otherwise the run's one connection (the first call makes it).
func (p *pddRun) connect(role natsauth.Role, name string) (*nats.Conn, jetstream.JetStream, error) {
	if p.natsKeys == "" && p.nc != nil {
		return p.nc, p.js, nil
	}
	sec := natsconn.Security{Role: role}
	if p.natsKeys != "" {
		sec = natsconn.RoleSecurity(p.natsKeys, role)
	}
	return connectRole(p.cfg.NATS, name, sec, &p.conns)
}

// startRoles starts the roles in process on their own context (stopped
// when RunPDD returns): relays a and b, the coordinator, the vectors
// aggregator and the PDD release stage.
func (p *pddRun) startRoles(ctx context.Context) error {
	svcCtx, stop := context.WithCancel(ctx)
	svc := &errgroup.Group{}
	p.cleanup = append(p.cleanup, func() { stop(); svc.Wait() })
	for _, name := range []string{"a", "b"} {
		_, js, err := p.connect(natsauth.RelayRole(name), "crowdlog-relay-"+name)
		if err != nil {
			return err
		}
		ro := relays.NewOptions()
		ro.Relay.Name, ro.Relay.Kafka, ro.Relay.KeyPaths = name, p.brokers, []string{filepath.Join(p.keysDir, "relay-"+name+".key")}
		rcfg, err := ro.Config()
		if err != nil {
			return err
		}
		r, closeW, err := relays.New(svcCtx, js, rcfg, p.log)
		if err != nil {
			return err
		}
		p.relayStats = append(p.relayStats, r.Stats)
		svc.Go(func() error { defer closeW(); return r.Run(svcCtx) })
	}
	aggSign, err := keydir.EnsureSigningKey(filepath.Join(p.keysDir, keydir.AggregatorSignKey))
	if err != nil {
		return err
	}
	opSign, err := keydir.EnsureSigningKey(filepath.Join(p.keysDir, keydir.OperatorSignKey))
	if err != nil {
		return err
	}
	// the coordinator signs its rosters, ticks and commitments; the
	// vectors aggregator verifies them with coordinator-sign.key.pub
	coordSign, err := keydir.EnsureSigningKey(filepath.Join(p.keysDir, keydir.CoordinatorSignKey))
	if err != nil {
		return err
	}
	cfg := &p.cfg
	cnc, _, err := p.connect(natsauth.Coordinator, "crowdlog-coordinator")
	if err != nil {
		return err
	}
	p.coord = coordinator.New(cnc, coordinator.Config{Brokers: p.brokers,
		AggregatorKey: aggSign.Public().(ed25519.PublicKey), OperatorKey: opSign.Public().(ed25519.PublicKey), SignKey: coordSign, Campaign: coordinator.Campaign{
			Name: cfg.Campaign, List: p.list, ListName: p.listName, GroupSize: cfg.GroupSize, Delay: cfg.Delay,
			RecoveryDays: cfg.RecoveryDays, Heuristic: cfg.Heuristic, End: int32(p.last)}}, p.log)
	if err := p.coord.Start(svcCtx); err != nil {
		return err
	}
	p.cleanup = append(p.cleanup, p.coord.Close)
	return p.startServers(svcCtx, svc)
}

// startServers starts the vectors aggregator (the options of `crowdlog
// aggregate-vectors` on the run's keys directory, brokers and NATS
// connection; recovering through the coordinator with the key of
// aggregator-sign.key; applying only control records signed with
// coordinator-sign.key) and the PDD release stage of startRoles.
func (p *pddRun) startServers(svcCtx context.Context, svc *errgroup.Group) error {
	cfg := &p.cfg
	o := vectors.DefaultOptions()
	o.Kafka, o.KeyPaths = p.brokers, []string{filepath.Join(p.keysDir, keydir.AggregatorKey)}
	o.SignKey = filepath.Join(p.keysDir, keydir.AggregatorSignKey)
	o.CoordinatorPub = filepath.Join(p.keysDir, keydir.CoordinatorSignKey+".pub")
	o.Campaigns = []string{cfg.Campaign}
	var err error
	p.agg, _, err = o.Service(func() (*nats.Conn, error) {
		nc, _, err := p.connect(natsauth.Aggregator, "crowdlog-aggregate-vectors")
		return nc, err
	}, VectorsRecoverer, p.log)
	if err != nil {
		return err
	}
	svc.Go(func() error { return p.agg.Run(svcCtx) })
	rel := &pddrelease.Stage{Brokers: p.brokers, Writer: p.writer, List: p.list, Epsilon: cfg.Epsilon, MaxCount: int64(cfg.MaxCount), GroupSize: cfg.GroupSize,
		Dataset: cfg.Dataset, Budget: cfg.Budget, OnRefused: func(_ string, _ time.Time, err error) {
			p.relMu.Lock()
			defer p.relMu.Unlock()
			p.refused = cmp.Or(p.refused, err)
			p.nRefused++
		},
		Logger: p.log, OnRound: func(r pddrelease.Released) {
			p.relMu.Lock()
			defer p.relMu.Unlock()
			p.released = append(p.released, r.Round)
		}}
	svc.Go(func() error { return rel.Run(svcCtx) })
	return nil
}

// register builds the clients' transport and registers one client per
// user.
func (p *pddRun) register(ctx context.Context) error {
	cfg := &p.cfg
	a, b, ag, err := keydir.LoadRoute(p.keysDir)
	if err != nil {
		return err
	}
	p.pub = &publish.Publisher{JS: p.js, Subject: protocol.RelaySubject("a")}
	p.cleanup = append(p.cleanup, func() { p.pub.Close(context.Background()) })
	coord, err := keydir.LoadSigningPublic(filepath.Join(p.keysDir, keydir.CoordinatorSignKey+".pub"))
	if err != nil {
		return err
	}
	p.tr = &pdd.Transport{NC: p.nc, Route: ingest.Route{RelayA: a, RelayB: b, Aggregator: ag, SubjectB: protocol.RelaySubject("b")}, Publish: p.pub.Publish,
		CoordinatorKey: coord}
	return forEach(ctx, cfg.Workers, p.users, func(ctx context.Context, u *pddUser) error {
		c, err := pdd.Register(ctx, p.tr, cfg.Campaign, p.list, "")
		if err != nil {
			return err
		}
		c.Counts = u.counts
		if cfg.Epsilon > 0 {
			c.MaxCount = uint64(cmpOr(cfg.MaxCount, int(pddrelease.DefaultMaxCount)))
		}
		u.client = c
		return nil
	})
}

// runDays runs the days from the log's first until every round is settled.
func (p *pddRun) runDays(ctx context.Context) error {
	// the last round is the log's last day; its recovery window closes on
	// day last+1+δ+R, and the tick of the day after finalizes it
	end := p.last + keywords.Day(2+p.cfg.Delay+p.cfg.RecoveryDays)
	rng := rand.New(rand.NewPCG(p.cfg.Seed, 0x9dd))
	for d := p.first; d <= end; d++ {
		if err := p.runDay(ctx, d, rng); err != nil {
			return err
		}
	}
	p.sum.Rounds = p.expect
	p.sum.Pings, p.sum.Submitted, p.sum.Answered = p.pings.Load(), p.submitted.Load(), p.answered.Load()
	return nil
}

// runDay advances the clock to day d, has the online clients ping and
// waits for the relays to drain.
func (p *pddRun) runDay(ctx context.Context, d keywords.Day, rng *rand.Rand) error {
	rep, err := p.coord.Advance(ctx, int32(d))
	if err != nil {
		return err
	}
	// the aggregator must have applied the day's tick (and asked for its
	// recoveries) before clients ping, as it would within a real day
	if err := waitFor(ctx, "the vectors aggregator to reach the day", func() (bool, error) {
		got, ok := p.agg.Day(p.cfg.Partitions)
		return ok && got >= int32(d), nil
	}); err != nil {
		return err
	}
	if rep.Groups > 0 {
		p.expect++
		p.sum.Groups += rep.Groups
	}
	online := p.online(d, rng)
	if err := forEach(ctx, p.cfg.Workers, online, func(ctx context.Context, u *pddUser) error {
		st, err := u.client.Ping(ctx, p.tr)
		if err != nil {
			return err
		}
		p.pings.Add(1)
		p.submitted.Add(int64(st.Submitted))
		p.answered.Add(int64(st.Answered))
		return nil
	}); err != nil {
		return err
	}
	if err := p.pub.Flush(ctx); err != nil {
		return err
	}
	if err := waitFor(ctx, "relays to drain", func() (bool, error) { return relays.DrainedEach(ctx, p.opjs, "a", "b") }); err != nil {
		return err
	}
	p.sum.Days++
	p.log.Info("pdd: day done", "day", d.String(), "online", len(online), "groups_formed", rep.Groups)
	return nil
}

// online returns the users who ping on day d (Online, Dropout).
func (p *pddRun) online(d keywords.Day, rng *rand.Rand) []*pddUser {
	var online []*pddUser
	for _, u := range p.users {
		// after the log's last day the clients are still around (the
		// log ended, not them): they ping to settle the last rounds
		on := p.cfg.Online == "all" || u.active[d] || d > p.last
		if p.cfg.Dropout > 0 && rng.Float64() < p.cfg.Dropout {
			on = false
		}
		if on {
			online = append(online, u)
		}
	}
	return online
}

// waitReleased waits, at most Timeout, for every round with groups to be
// released or refused over the privacy budget.
func (p *pddRun) waitReleased(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	return waitFor(wctx, "the PDD release of every round", func() (bool, error) {
		p.relMu.Lock()
		defer p.relMu.Unlock()
		return len(p.released)+p.nRefused >= p.expect, nil
	})
}

// finish fills the summary with the released rounds and the drops, and
// exports the released daily counts.
func (p *pddRun) finish(ctx context.Context) error {
	sum := p.sum
	p.relMu.Lock()
	sum.Released = slices.Clone(p.released)
	p.relMu.Unlock()
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
	for _, st := range p.relayStats {
		sum.RelayDrops += int64(st.Snapshot().Dropped())
	}
	sum.AggregatorDropped = p.agg.Dropped.Load()
	if p.cfg.Export != "" {
		return p.exportPDD(ctx)
	}
	return nil
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

// exportPDD writes the campaign's export to cfg.Export
// (release.WritePDDExport: every keyword of the list but the blacklisted
// ones for each released day, zeros unless cfg.ExportNonZero, and one line
// per withheld day).
func (p *pddRun) exportPDD(ctx context.Context) error {
	var words []string
	for _, w := range p.list.Words {
		if !p.black[w] {
			words = append(words, w)
		}
	}
	var buf bytes.Buffer
	if err := pddrelease.Export(ctx, p.writer, p.cfg.Campaign, words, !p.cfg.ExportNonZero, &buf); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := os.WriteFile(p.cfg.Export, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("export: write %s (is the folder writable?): %w", p.cfg.Export, err)
	}
	return nil
}
