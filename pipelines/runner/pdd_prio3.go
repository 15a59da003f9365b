package runner

import (
	"cmp"
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	aggprio3 "github.com/crowdlog/crowdlog/aggregator/prio3"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	ingestprio3 "github.com/crowdlog/crowdlog/ingest/prio3"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/relays"
	"github.com/crowdlog/crowdlog/release"
	pddrelease "github.com/crowdlog/crowdlog/release/pdd"
	prio3release "github.com/crowdlog/crowdlog/release/prio3"
)

// PDD modes (PDDConfig.Mode, `crowdlog pdd --mode`, the pipeline file's
// pdd.mode).
const (
	// ModeGroups is PDD's protocol: blinded groups with pairwise masking
	// and dropout recovery (one aggregator).
	ModeGroups = "groups"
	// ModePrio3 is the two-aggregator Prio3 VDAF: one upload per client and
	// day, proved in range, split between a leader and a helper.
	ModePrio3 = "prio3"
)

// Measurements of Prio3 mode (PDDConfig.Measurement).
const (
	MeasureCounts   = "counts"   // per keyword the day's count clipped to 2^Bits − 1 (SumVec)
	MeasurePresence = "presence" // per keyword 0/1, at most MaxWeight ones (MultihotCountVec)
)

// Prio3Summary is what a Prio3-mode run did, besides PDDSummary's users and
// days.
type Prio3Summary struct {
	Measurement p3.Config
	// Uploads is the number of reports clients sent, Clipped the keyword
	// counts they reduced to the measurement's maximum, UploadBytes the
	// onion length of one upload (all have one size class).
	Uploads, Clipped int64
	UploadBytes      int
	// PerDay: reports sent per day (YYYY-MM-DD) and reports released.
	Sent, Released map[string]uint64
	// Active are the clients active in the log per day (YYYY-MM-DD; every
	// client with --online all), --dropout's skipped uploads included:
	// only the log replay knows them. MeanCoverage is the mean over
	// released days of reports released / Active, the groups mode's
	// confidence definition (clients counted / clients active). The
	// released confidence of a Prio3 day is 1: no server learns of a
	// client that never uploaded, so a missing upload lowers coverage,
	// never confidence.
	Active       map[string]uint64
	MeanCoverage float64
	// Rejected by reason at the leader and at the helper.
	LeaderRejected, HelperRejected map[string]uint64
	Days                           []prio3release.Released
	// Epsilon is the aggregators' ε per person-day (0: exact shares);
	// Ledger the ε the privacy ledger charged each released day
	// (YYYY-MM-DD), and Budget the budget per day it was checked against.
	Epsilon float64
	Ledger  map[string]float64
	Budget  float64
	// TopMRE is the mean relative error |released − exact| / exact of the
	// daily counts of the 100 keywords with the largest exact totals over
	// the released days, over their TopCells (day, keyword) pairs with an
	// exact count > 0; exact = the sum of the sent reports' measurements
	// as each client bounds them (p3.Config.Clip), what an --exact-shares
	// run releases when no report is rejected. 0 cells: nothing released.
	TopMRE   float64
	TopCells int
}

// prio3Defaults checks the Prio3 fields of cfg and fills in their defaults.
func (cfg *PDDConfig) prio3Defaults() error {
	if math.IsNaN(cfg.Epsilon) || math.IsInf(cfg.Epsilon, 0) || cfg.Epsilon < 0 {
		return fmt.Errorf("--epsilon %v: must be finite and ≥ 0 (in --mode prio3 both aggregators add Laplace noise of this ε per person-day)", cfg.Epsilon)
	}
	switch {
	case cfg.ExactShares && cfg.Epsilon > 0:
		return fmt.Errorf("--exact-shares with --epsilon %v: exact shares carry no noise; give one of the two", cfg.Epsilon)
	case !cfg.ExactShares && cfg.Epsilon == 0:
		cfg.Epsilon = aggprio3.DefaultEpsilon
	}
	if cfg.L1 < 0 {
		return fmt.Errorf("--l1 %d: want ≥ 0 (0 = %d)", cfg.L1, p3.DefaultL1)
	}
	if cfg.L1 == 0 {
		cfg.L1 = p3.DefaultL1
	}
	if cfg.Budget.Epsilon == 0 {
		cfg.Budget.Epsilon = prio3release.DefaultBudgetEpsilon
	}
	if cfg.Measurement == "" {
		cfg.Measurement = MeasureCounts
	}
	switch cfg.Measurement {
	case MeasureCounts:
		cfg.Bits = cmpOr(cfg.Bits, pipeline.DefaultBits)
	case MeasurePresence:
		if cfg.MaxWeight <= 0 {
			return errors.New("--measurement presence needs --max-weight W (the most keywords one client reports per day)")
		}
	default:
		return fmt.Errorf("--measurement %q: use counts or presence", cfg.Measurement)
	}
	if cfg.MinBatchSize <= 0 {
		cfg.MinBatchSize = DefaultMinBatchSize
	}
	if cfg.StatusDelta == 0 {
		cfg.StatusDelta = p3.DefaultStatusDelta
	}
	cfg.StatusEpsilon = p3.StatusEpsilonOf(cfg.StatusEpsilon, cfg.Epsilon)
	if cfg.ExactShares {
		cfg.StatusEpsilon = p3.StatusEpsilonOf(cfg.StatusEpsilon, 0)
	}
	if err := p3.CheckStatus(cfg.StatusEpsilon, cfg.StatusDelta); err != nil {
		return fmt.Errorf("--status-epsilon %v, --status-delta %v: %w", cfg.StatusEpsilon, cfg.StatusDelta, err)
	}
	return nil
}

// DefaultMinBatchSize is the default PDDConfig.MinBatchSize: a day with
// fewer reports is never revealed.
const DefaultMinBatchSize = pipeline.DefaultMinBatchSize

// prio3Measurement is the campaign's measurement for a list of L keywords.
func (cfg *PDDConfig) prio3Measurement(L int) p3.Config {
	if cfg.Measurement == MeasurePresence {
		return p3.Config{Kind: p3.KindPresence, Length: L, MaxWeight: cfg.MaxWeight, Chunk: cfg.Chunk}
	}
	return p3.Config{Kind: p3.KindSumVec, Length: L, Bits: cfg.Bits, Chunk: cfg.Chunk, L1: uint64(cfg.L1)}
}

// ReplayClock is the shared clock of a log replay's two aggregators: they
// read it for every event, the replay moves it (Set). Safe for concurrent
// use.
type ReplayClock struct{ ns atomic.Int64 }

// Now returns the clock's time.
func (c *ReplayClock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// Set moves the clock to t.
func (c *ReplayClock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// ReplayTimes returns the times a replay of the days first..last sets its
// aggregators' clock to, and the grace they run with: open is the last
// day's noon, when every day's batch is open if grace ≥ the log's length;
// closed is past the last day's end + grace, when every batch is closed
// and may be collected.
func ReplayTimes(first, last keywords.Day) (open, closed time.Time, grace time.Duration) {
	grace = time.Duration(last-first+1) * 24 * time.Hour
	open = last.Time().Add(12 * time.Hour)
	closed = (last + 1).Time().Add(grace + time.Minute)
	return open, closed, grace
}

// prio3User is one client of the replay.
type prio3User struct {
	active   map[keywords.Day]bool
	client   *ingestprio3.Client
	identity ed25519.PrivateKey // enrolled at both aggregator operators' attesters
}

// prio3Run is the state of one Prio3-mode run.
type prio3Run struct {
	*pddRun
	m       p3.Config
	clients []*prio3User
	clock   ReplayClock
	leader  prio3Aggregator
	helper  prio3Aggregator
	ptr     *ingestprio3.Transport
	pub     *publish.Publisher
	keyDirs map[string]string // role → key directory
	verify  string            // the verify key file both aggregators read

	relMu    sync.Mutex
	days     []prio3release.Released // guarded by relMu
	stage    *prio3release.Stage     // its Refused counts the days refused over the budget
	uploads  atomic.Int64
	clipped  atomic.Int64
	bytes    atomic.Int64
	sentMu   sync.Mutex
	sentDays map[keywords.Day]uint64  // guarded by sentMu
	exact    map[keywords.Day][]int64 // the sent reports' bounded sums (TopMRE); guarded by sentMu
	// activeDays are the clients active in the log each day (every
	// client with --online all), before --dropout: guarded by sentMu
	activeDays map[keywords.Day]uint64
}

// runPrio3 runs Prio3 mode end to end; see PDDConfig.
func runPrio3(ctx context.Context, p *pddRun) (*PDDSummary, error) {
	t0 := time.Now()
	r := &prio3Run{pddRun: p, sentDays: map[keywords.Day]uint64{}, exact: map[keywords.Day][]int64{}, activeDays: map[keywords.Day]uint64{}}
	if err := p.prepare(); err != nil {
		return nil, err
	}
	if err := p.readLog(); err != nil {
		return nil, err
	}
	r.m = p.cfg.prio3Measurement(p.list.Len())
	if err := r.m.Check(); err != nil {
		return nil, fmt.Errorf("--mode prio3: %w", err)
	}
	r.buildClients()
	open, closed, grace := ReplayTimes(p.first, p.last)
	r.clock.Set(open)
	if err := r.startServices(ctx); err != nil {
		return nil, err
	}
	if err := r.startRoles(ctx, grace); err != nil {
		return nil, err
	}
	if err := r.runDays(ctx); err != nil {
		return nil, err
	}
	if err := r.waitPrepared(ctx); err != nil {
		return nil, err
	}
	r.progress("all %d reports prepared at both aggregators; closing every day's batch", r.uploads.Load())
	r.clock.Set(closed)
	if err := r.waitReleased(ctx); err != nil {
		return nil, err
	}
	if err := r.finish(ctx); err != nil {
		return p.sum, err
	}
	p.sum.Elapsed = time.Since(t0)
	if n := r.stage.Refused.Load(); n > 0 {
		return p.sum, fmt.Errorf("pdd prio3: %d days refused over the privacy budget of dataset %q (ε %g per day; another campaign may have spent it): raise --budget-epsilon, or give campaigns that share days their own --dataset; the export lists them as withheld", n, cmp.Or(r.cfg.Dataset, pddrelease.DefaultDataset), r.cfg.Budget.Epsilon)
	}
	return p.sum, nil
}

// progress writes one progress line (counts only) when Progress is set.
func (r *prio3Run) progress(format string, a ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "pdd prio3: "+format+"\n", a...)
	}
}

// buildClients makes one client per user of the log, with the counts the
// log gives it per day.
func (r *prio3Run) buildClients() {
	for _, u := range r.pddRun.users {
		_, id, err := ed25519.GenerateKey(crand.Reader)
		if err != nil {
			panic(err) // crypto/rand does not fail
		}
		r.clients = append(r.clients, &prio3User{active: u.active, identity: id,
			client: &ingestprio3.Client{Campaign: r.cfg.Campaign, List: r.list, Counts: u.counts, Config: r.m}})
	}
}

// startServices starts the local services (those without an address),
// creates the Prio3 topics, the relays' keys, each aggregator's and the
// collector's key directory and the verify key, connects to NATS and opens
// the ClickHouse writer.
func (r *prio3Run) startServices(ctx context.Context) error {
	cfg := &r.cfg
	state := cfg.StateDir
	if state == "" {
		var err error
		if state, err = os.MkdirTemp("", "crowdlog-pdd-prio3-"); err != nil {
			return err
		}
		r.cleanup = append(r.cleanup, func() { os.RemoveAll(state) })
	}
	r.keysDir = filepath.Join(state, "keys")
	localCH := cfg.ClickHouse == ""
	stopLocal, err := startLocal(ctx, state, &cfg.NATS, &cfg.Kafka, &cfg.ClickHouse, cfg.Partitions, &r.natsKeys)
	if err != nil {
		return err
	}
	r.cleanup = append(r.cleanup, stopLocal, func() { closeAll(r.conns) })
	r.brokers = strings.Split(cfg.Kafka, ",")
	if err := kafka.EnsureTopics(ctx, r.brokers[0], cfg.Partitions, protocol.Prio3UploadsTopic, protocol.Prio3SharesTopic); err != nil {
		return err
	}
	// an upload of L = 10,000 keywords at b = 4 is 655,204 bytes (with both tokens): over
	// Kafka's default 1 MiB batch once framed with others; both topics
	// carry up to 2 MiB, as `crowdlog topics` makes them
	if err := kafka.EnsureMaxMessageBytes(ctx, r.brokers[0], kafka.TopicMaxMessageBytes, protocol.Prio3UploadsTopic, protocol.Prio3SharesTopic); err != nil {
		return err
	}
	// uploads of up to ~1 MiB, batched by relay b: over Kafka's default limit
	if err := kafka.EnsureMaxMessageBytes(ctx, r.brokers[0], kafka.TopicMaxMessageBytes, protocol.Prio3UploadsTopic, protocol.Prio3SharesTopic); err != nil {
		return err
	}
	if err := keydir.EnsureKeys(r.keysDir); err != nil {
		return err
	}
	if err := r.ensureRoleKeys(state); err != nil {
		return err
	}
	if r.nc, r.js, err = r.connect(natsauth.Client, "crowdlog-pdd-prio3"); err != nil {
		return err
	}
	if r.opjs, err = operatorJS(r.connect, "crowdlog-pdd-operator", r.natsKeys != ""); err != nil {
		return err
	}
	if err := ensureStreams(ctx, r.connect, false, r.natsKeys != "", r.opjs); err != nil {
		return err
	}
	if r.writer, err = openPDDWriter(ctx, cfg.ClickHouse, cfg.Database, localCH); err != nil {
		return err
	}
	r.cleanup = append(r.cleanup, func() { r.writer.Close() })
	return nil
}

// ensureRoleKeys creates (or keeps) one key directory per Prio3 role under
// state, as each operator generates its own (keydir.GenerateRole): the
// leader's report key pair, the helper's input-share key pair, the
// collector's key pair; and the campaign's verify key file, which the
// leader and the helper read (each operator holds a copy).
func (r *prio3Run) ensureRoleKeys(state string) error {
	r.keyDirs = map[string]string{}
	for _, role := range []string{keydir.RolePrio3Leader, keydir.RolePrio3Helper, keydir.RolePrio3Collector} {
		dir := filepath.Join(state, "keys-"+role)
		r.keyDirs[role] = dir
		if err := keydir.GenerateRole(dir, role); err != nil {
			return err
		}
	}
	r.verify = filepath.Join(state, "prio3-verify.keys")
	if _, err := os.Stat(r.verify); errors.Is(err, os.ErrNotExist) {
		if _, err := keydir.AddVerifyKeyEpoch(r.verify); err != nil {
			return err
		}
	}
	return nil
}

// keyPath is the key file of a Prio3 role.
func (r *prio3Run) keyPath(role, file string) string { return filepath.Join(r.keyDirs[role], file) }

// startRoles starts, on their own context (stopped when the run returns),
// relays a and b, the helper, the leader (each with its own NATS
// credential when the embedded server's permission table is on) and the
// Prio3 release stage.
func (r *prio3Run) startRoles(ctx context.Context, grace time.Duration) error {
	svcCtx, stop := context.WithCancel(ctx)
	svc := &errgroup.Group{}
	r.cleanup = append(r.cleanup, func() { stop(); svc.Wait() })
	for _, name := range []string{"a", "b"} {
		_, js, err := r.connect(natsauth.RelayRole(name), "crowdlog-relay-"+name)
		if err != nil {
			return err
		}
		ro := relays.NewOptions()
		ro.Relay.Name, ro.Relay.Kafka, ro.Relay.KeyPaths = name, r.brokers, []string{filepath.Join(r.keysDir, "relay-"+name+".key")}
		rcfg, err := ro.Config()
		if err != nil {
			return err
		}
		rl, closeW, err := relays.New(svcCtx, js, rcfg, r.log)
		if err != nil {
			return err
		}
		r.relayStats = append(r.relayStats, rl.Stats)
		svc.Go(func() error { defer closeW(); return rl.Run(svcCtx) })
	}
	var err error
	if r.helper, err = r.startAggregator(svcCtx, svc, aggprio3.RoleHelper, grace); err != nil {
		return err
	}
	if err := r.startTokenIssuer(svcCtx, svc, keydir.RolePrio3Helper); err != nil {
		return err
	}
	if err := r.startTokenIssuer(svcCtx, svc, keydir.RolePrio3Leader); err != nil {
		return err
	}
	if r.leader, err = r.startAggregator(svcCtx, svc, aggprio3.RoleLeader, grace); err != nil {
		return err
	}
	return r.startRelease(svcCtx, svc)
}

// startTokenIssuer enrolls every client's identity at one aggregator's
// operator (role keydir.RolePrio3Helper or RolePrio3Leader) and runs that
// operator's issuer of report tokens (its keys directory: the token seed
// its aggregator verifies with; its NATS credential), one per identity
// per campaign-day; each client fetches its day's token with its own
// identity (tokenclient.Prio3HelperToken, Prio3LeaderToken).
func (r *prio3Run) startTokenIssuer(svcCtx context.Context, svc *errgroup.Group, role string) error {
	dir := r.keyDirs[role]
	pubs := make([]ed25519.PublicKey, 0, len(r.clients))
	for _, u := range r.clients {
		pubs = append(pubs, u.identity.Public().(ed25519.PublicKey))
	}
	if err := keydir.EnrollIdentities(dir, pubs); err != nil {
		return fmt.Errorf("pdd prio3: enroll the clients at the %s's operator: %w", role, err)
	}
	nc, _, err := r.connect(natsauth.Role(role), "crowdlog-issuer-"+role)
	if err != nil {
		return err
	}
	is, err := issuer.New(nc, dir, issuer.Limits{}, r.log)
	if err != nil {
		return err
	}
	svc.Go(func() error { return is.Run(svcCtx) })
	for _, u := range r.clients {
		tc := &tokenclient.Client{NC: r.nc, Identity: u.identity, Logger: r.log}
		if role == keydir.RolePrio3Leader {
			u.client.LeaderToken = func(ctx context.Context, campaign string, day p3.Day, nonce [32]byte) ([]byte, error) {
				return tc.Prio3LeaderToken(ctx, campaign, uint32(day), nonce)
			}
			continue
		}
		u.client.HelperToken = func(ctx context.Context, campaign string, day p3.Day, nonce [32]byte) ([]byte, error) {
			return tc.Prio3HelperToken(ctx, campaign, uint32(day), nonce)
		}
	}
	// ready: it answers the first day's public-key request
	epoch := token.Prio3Epoch(r.cfg.Campaign, uint32(r.first))
	b, _ := (&token.KeysRequest{Epoch: epoch}).MarshalBinary()
	subject := protocol.IssuerPrio3HelperPublicKeySubject
	if role == keydir.RolePrio3Leader {
		subject = protocol.IssuerPrio3LeaderPublicKeySubject
	}
	return waitBounded(svcCtx, "the "+role+" operator's issuer to answer", time.Minute, func(ctx context.Context) (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := r.nc.RequestWithContext(rctx, subject, b)
		return err == nil, nil
	}, func(context.Context) string { return "no answer yet" })
}

// startRelease starts the Prio3 release stage with the collector's key.
func (r *prio3Run) startRelease(svcCtx context.Context, svc *errgroup.Group) error {
	ck, err := onion.LoadKeyPair(r.keyPath(keydir.RolePrio3Collector, keydir.Prio3CollectorKey))
	if err != nil {
		return err
	}
	st := &prio3release.Stage{Brokers: r.brokers, Writer: r.writer, List: r.list, Blacklist: r.cfg.Blacklist, Logger: r.log,
		Epsilon: r.cfg.Epsilon, Dataset: r.cfg.Dataset, Budget: r.cfg.Budget,
		StatusEpsilon: r.cfg.StatusEpsilon, StatusDelta: r.cfg.StatusDelta,
		Collector: p3.Collector{Campaign: r.cfg.Campaign, Measurement: r.m, Key: ck, MinBatchSize: uint64(r.cfg.MinBatchSize)},
		OnDay: func(d prio3release.Released) {
			r.relMu.Lock()
			defer r.relMu.Unlock()
			r.days = append(r.days, d)
		}}
	r.stage = st
	svc.Go(func() error { return st.Run(svcCtx) })
	return nil
}

// runDays sends, day by day, the report of every client online that day
// (Online, Dropout), and waits for the relays to drain after each day.
func (r *prio3Run) runDays(ctx context.Context) error {
	a, b, _, err := keydir.LoadRoute(r.keysDir)
	if err != nil {
		return err
	}
	lk, err := onion.LoadPublicKey(r.keyPath(keydir.RolePrio3Leader, keydir.Prio3LeaderKey) + ".pub")
	if err != nil {
		return err
	}
	hk, err := onion.LoadPublicKey(r.keyPath(keydir.RolePrio3Helper, keydir.Prio3HelperKey) + ".pub")
	if err != nil {
		return err
	}
	// the leader's signed campaign settings, checked as a device checks
	// them (ingest/prio3 Device), before any client uploads
	sign, err := keydir.LoadSigningPublic(r.keyPath(keydir.RolePrio3Leader, keydir.Prio3LeaderSignKey) + ".pub")
	if err != nil {
		return err
	}
	// The run's operator is also its devices' app: the floor is what it
	// told the aggregators to run (--epsilon, --min-batch-size,
	// --exact-shares, --status-epsilon, --status-delta), each weaker
	// setting allowed explicitly, so a leader announcing anything weaker
	// than the run's own settings is refused as a device refuses it.
	floor := ingestprio3.Config{Campaign: r.cfg.Campaign, Keywords: r.list, Measurement: r.m, Logger: r.log,
		MaxEpsilon: r.cfg.Epsilon, MinBatchFloor: uint64(r.cfg.MinBatchSize), AllowExactShares: r.cfg.ExactShares,
		MaxStatusEpsilon: r.cfg.StatusEpsilon, MaxStatusDelta: r.cfg.StatusDelta, AllowExactStatus: r.cfg.StatusEpsilon == 0}
	if _, err := ingestprio3.VerifySettings(ctx, r.nc, sign, floor, lk); err != nil {
		return fmt.Errorf("pdd prio3: %w", err)
	}
	r.pub = &publish.Publisher{JS: r.js, Subject: protocol.RelaySubject("a")}
	r.cleanup = append(r.cleanup, func() { r.pub.Close(context.Background()) })
	r.ptr = &ingestprio3.Transport{Route: ingest.Route{RelayA: a, RelayB: b, SubjectB: protocol.RelaySubject("b")},
		Leader: lk, Helper: hk, Publish: r.pub.Publish}
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0x9dd))
	for d := r.first; d <= r.last; d++ {
		if err := r.runDay(ctx, d, rng); err != nil {
			return err
		}
	}
	r.sum.Days = int(r.last - r.first + 1)
	return nil
}

// runDay has the online clients of day d upload, Workers at a time (each
// worker with its own VDAF: circl's is not safe for concurrent use).
func (r *prio3Run) runDay(ctx context.Context, d keywords.Day, rng *rand.Rand) error {
	var online []*prio3User
	active := 0
	for _, u := range r.clients {
		on := r.cfg.Online == "all" || u.active[d]
		if on {
			active++
		}
		if r.cfg.Dropout > 0 && rng.Float64() < r.cfg.Dropout {
			on = false
		}
		if on {
			online = append(online, u)
		}
	}
	vdafs := make(chan *p3.VDAF, r.cfg.Workers)
	for range r.cfg.Workers {
		v, err := p3.New(r.cfg.Campaign, r.m)
		if err != nil {
			return err
		}
		vdafs <- v
	}
	if err := forEach(ctx, r.cfg.Workers, online, func(ctx context.Context, u *prio3User) error {
		v := <-vdafs
		defer func() { vdafs <- v }()
		s, err := u.client.Upload(ctx, r.ptr, v, d)
		if err != nil {
			return err
		}
		r.uploads.Add(1)
		r.clipped.Add(int64(s.Clipped))
		r.bytes.Store(int64(s.Bytes))
		m, _ := u.client.Measurement(d)
		b, _ := r.m.Clip(m)
		r.sentMu.Lock()
		if r.exact[d] == nil {
			r.exact[d] = make([]int64, len(b))
		}
		for i, x := range b {
			r.exact[d][i] += int64(x)
		}
		r.sentMu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	if err := r.pub.Flush(ctx); err != nil {
		return err
	}
	if err := waitBounded(ctx, "relays to drain", r.cfg.Timeout, func(ctx context.Context) (bool, error) { return relays.DrainedEach(ctx, r.opjs, "a", "b") },
		r.relayProgress); err != nil {
		return err
	}
	r.sentMu.Lock()
	r.sentDays[d] = uint64(len(online))
	r.activeDays[d] = uint64(active)
	r.sentMu.Unlock()
	r.progress("%s: %d reports sent (%d in all)", d, len(online), r.uploads.Load())
	r.log.Info("pdd prio3: day sent", "day", d.String(), "reports", len(online))
	return nil
}

// relayProgress says what the relays did (a wait's progress): messages
// fetched, forwarded and dropped, and forwards that failed (a Kafka
// refusal is retried for ever; the relay's log has the broker's error).
func (r *prio3Run) relayProgress(context.Context) string {
	var parts []string
	for i, st := range r.relayStats {
		s := st.Snapshot()
		parts = append(parts, fmt.Sprintf("relay %c: %d in, %d forwarded, %d dropped, %d failed forwards (retried; see its log)",
			'a'+i, s.In, s.Forwarded, s.Dropped(), s.ForwardFailures))
	}
	return strings.Join(parts, "; ")
}

// waitPrepared waits, at most Timeout, until the leader has handled every
// upload sent (prepared at both, or rejected with a reason): only then
// may the clock close the batches without making reports late.
func (r *prio3Run) waitPrepared(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	want := uint64(r.uploads.Load())
	return waitFor(wctx, fmt.Sprintf("the leader to prepare or reject all %d uploads", want), func() (bool, error) {
		st := r.leader.Stats()
		return st.Prepared+rejectedTotal(st.Rejected) >= want, nil
	})
}

func rejectedTotal(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// waitReleased waits, at most Timeout, until every day of at least the
// minimum batch size is in ClickHouse or refused over the privacy budget;
// with a status ε_c > 0 (the leader's noisy status, which may withhold
// any day) until every day of the log is released, refused or withheld.
func (r *prio3Run) waitReleased(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	want, withheld := 0, func() int { return 0 }
	for _, n := range r.sentDays {
		if n >= uint64(r.cfg.MinBatchSize) {
			want++
		}
	}
	if r.cfg.StatusEpsilon > 0 {
		want, withheld = int(r.last-r.first+1), func() int { return int(r.stage.Withheld.Load()) }
	}
	return waitFor(wctx, fmt.Sprintf("the Prio3 release (or withheld notice) of %d days", want), func() (bool, error) {
		r.relMu.Lock()
		defer r.relMu.Unlock()
		return len(r.days)+int(r.stage.Refused.Load())+withheld() >= want, nil
	})
}

// finish fills the summary and exports the released daily counts.
func (r *prio3Run) finish(ctx context.Context) error {
	sum := r.sum
	ps := &Prio3Summary{Measurement: r.m, Uploads: r.uploads.Load(), Clipped: r.clipped.Load(), UploadBytes: int(r.bytes.Load()),
		Sent: map[string]uint64{}, Released: map[string]uint64{}}
	for d, n := range r.sentDays {
		ps.Sent[d.String()] = n
	}
	ps.Active = map[string]uint64{}
	for d, n := range r.activeDays {
		ps.Active[d.String()] = n
	}
	r.relMu.Lock()
	ps.Days = slices.Clone(r.days)
	r.relMu.Unlock()
	slices.SortFunc(ps.Days, func(x, y prio3release.Released) int { return int(x.Batch.Day) - int(y.Batch.Day) })
	for _, d := range ps.Days {
		ps.Released[d.Batch.Day.String()] = d.Batch.Count
	}
	ps.LeaderRejected, ps.HelperRejected = r.leader.Stats().Rejected, r.helper.Stats().Rejected
	ps.Epsilon, ps.Budget, ps.Ledger = r.cfg.Epsilon, r.cfg.Budget.Epsilon, map[string]float64{}
	if r.cfg.Epsilon > 0 {
		dataset := r.cfg.Dataset
		if dataset == "" {
			dataset = pddrelease.DefaultDataset
		}
		for _, d := range ps.Days {
			spends, err := r.writer.Ledger(ctx, dataset, d.Batch.Day.String())
			if err != nil {
				return fmt.Errorf("read the privacy ledger of %s: %w", d.Batch.Day, err)
			}
			for _, sp := range spends {
				ps.Ledger[d.Batch.Day.String()] += sp.Epsilon
			}
		}
	}
	r.sentMu.Lock()
	ps.TopMRE, ps.TopCells = topMRE(ps.Days, r.exact, 100)
	r.sentMu.Unlock()
	sum.Prio3 = ps
	sum.RoundsReleased = len(ps.Days)
	if len(ps.Days) > 0 {
		sum.MeanConfidence = 1
		for _, d := range ps.Days {
			if a := ps.Active[d.Batch.Day.String()]; a > 0 {
				ps.MeanCoverage += float64(d.Batch.Count) / float64(a)
			}
		}
		ps.MeanCoverage /= float64(len(ps.Days))
	}
	for _, st := range r.relayStats {
		sum.RelayDrops += int64(st.Snapshot().Dropped())
	}
	r.stage.RecordCampaign(ctx, r.log)
	// days the leader never collected: fewer reports than the minimum
	// batch (with a status ε_c > 0 the leader's notices, recorded by the
	// stage, are the only record: every day of the log it withheld, empty
	// ones included, and no day an exact count would tell)
	for d, n := range r.sentDays {
		if r.cfg.StatusEpsilon == 0 && n > 0 && n < uint64(r.cfg.MinBatchSize) {
			pddrelease.RecordWithheld(ctx, r.writer, release.PDDWithheld{Campaign: r.cfg.Campaign, Day: d.Time(),
				Reason: release.WithheldMinBatch, Detail: fmt.Sprintf("fewer reports than the minimum batch size %d: the aggregators never revealed the batch", r.cfg.MinBatchSize)}, r.log)
		}
	}
	if r.cfg.Export != "" {
		return r.exportPDD(ctx)
	}
	return nil
}

// printPrio3 writes a Prio3-mode summary for humans (counts only).
func (s *PDDSummary) printPrio3(w io.Writer) {
	ps := s.Prio3
	m := "counts clipped to " + strconv.FormatUint(ps.Measurement.Max(), 10)
	if ps.Measurement.Kind == p3.KindPresence {
		m = fmt.Sprintf("presence, at most %d keywords", ps.Measurement.MaxWeight)
	}
	fmt.Fprintf(w, "crowdlog pdd --mode prio3: %d clients over %d days (%d days released)\n", s.Users, s.Days, s.RoundsReleased)
	fmt.Fprintf(w, "  measurement: L = %d keywords, %s; upload %d bytes at relay a\n", ps.Measurement.Length, m, ps.UploadBytes)
	fmt.Fprintf(w, "  reports sent %d, keyword counts clipped by clients %d\n", ps.Uploads, ps.Clipped)
	if ps.Epsilon > 0 {
		fmt.Fprintf(w, "  noise: ε = %g per person-day (L1 bound S = %d; each aggregator's Laplace scale S/ε = %g per keyword); budget ε %g per day; report counts not published\n",
			ps.Epsilon, ps.Measurement.Sensitivity(), float64(ps.Measurement.Sensitivity())/ps.Epsilon, ps.Budget)
	} else {
		fmt.Fprintf(w, "  exact shares (--exact-shares): no noise; a malicious leader could read one client's vector\n")
	}
	days := slices.Sorted(maps.Keys(ps.Sent))
	for _, d := range days {
		fmt.Fprintf(w, "  %s: clients active in the log %d, reports sent %d, released %d", d, ps.Active[d], ps.Sent[d], ps.Released[d])
		if a := ps.Active[d]; a > 0 {
			fmt.Fprintf(w, " (coverage %.3f)", float64(ps.Released[d])/float64(a))
		}
		if ps.Epsilon > 0 {
			if e, ok := ps.Ledger[d]; ok {
				fmt.Fprintf(w, "; ledger ε %g per person", e)
			}
		}
		fmt.Fprintln(w)
	}
	if ps.TopCells > 0 {
		fmt.Fprintf(w, "  top-100 keywords' daily counts: mean relative error %.3g against the exact sums of the reports sent (%d (day, keyword) pairs with a count > 0)\n", ps.TopMRE, ps.TopCells)
	}
	fmt.Fprintf(w, "  mean coverage %.3f (reports released / clients active in the log; the released confidence is %.0f: no server learns of a client that did not upload)\n",
		ps.MeanCoverage, s.MeanConfidence)
	fmt.Fprintf(w, "  rejected: leader %d, helper %d; relay drops %d; elapsed %s\n",
		rejectedTotal(ps.LeaderRejected), rejectedTotal(ps.HelperRejected), s.RelayDrops, s.Elapsed.Round(time.Second))
}

// topMRE is the mean relative error of the released daily counts of the
// top keywords (the n with the largest exact totals over the released
// days; ties: the earlier keyword) against exact, over the (day, keyword)
// pairs with an exact count > 0, and the number of those pairs. Days
// released without a written row (an earlier run's) are skipped.
func topMRE(days []prio3release.Released, exact map[keywords.Day][]int64, n int) (float64, int) {
	total := map[int]int64{}
	for _, d := range days {
		for i, x := range exact[keywords.Day(d.Batch.Day)] {
			total[i] += x
		}
	}
	top := slices.Collect(maps.Keys(total))
	slices.SortFunc(top, func(a, b int) int {
		if total[a] != total[b] {
			return cmp.Compare(total[b], total[a])
		}
		return a - b
	})
	top = top[:min(n, len(top))]
	var sum float64
	cells := 0
	for _, d := range days {
		ex := exact[keywords.Day(d.Batch.Day)]
		if ex == nil || len(d.Batch.Totals) != len(ex) {
			continue
		}
		for _, i := range top {
			if ex[i] > 0 {
				sum += math.Abs(float64(d.Batch.Totals[i]-ex[i])) / float64(ex[i])
				cells++
			}
		}
	}
	if cells == 0 {
		return 0, 0
	}
	return sum / float64(cells), cells
}

// prio3Aggregator is a running leader or helper service, as the replay
// watches it.
type prio3Aggregator interface{ Stats() aggprio3.Stats }

// startAggregator starts the leader or the helper service in process from
// the options of `crowdlog aggregate-prio3` (its own key directory, state
// directory, NATS connection — its own NKey when the embedded server's
// permission table is on — and the shared verify key file), on the replay
// clock.
func (r *prio3Run) startAggregator(svcCtx context.Context, svc *errgroup.Group, role string, grace time.Duration) (prio3Aggregator, error) {
	o := aggprio3.DefaultOptions()
	o.Role, o.Campaign, o.Keywords, o.Chunk = role, r.cfg.Campaign, r.cfg.Keywords, r.cfg.Chunk
	o.Kind, o.Bits, o.MaxWeight = "sumvec", r.cfg.Bits, r.cfg.MaxWeight
	if r.m.Kind == p3.KindPresence {
		o.Kind = "presence"
	}
	o.MinBatchSize, o.Grace, o.VerifyKey = uint64(r.cfg.MinBatchSize), grace, r.verify
	o.Epsilon, o.ExactShares, o.L1 = r.cfg.Epsilon, r.cfg.ExactShares, r.m.L1 // each aggregator's own draw (docs/pdd.md, "Noise")
	// the day's status (aggregator/prio3 status.go), over the log's span
	o.StatusEpsilon, o.StatusDelta, o.CampaignStart = r.cfg.StatusEpsilon, r.cfg.StatusDelta, r.first.Time().Format(time.DateOnly)
	custody := "prio3-" + role
	o.KeysDir, o.StateDir = r.keyDirs[custody], filepath.Join(filepath.Dir(r.keysDir), "state-"+custody)
	o.CollectorPub = r.keyPath(keydir.RolePrio3Collector, keydir.Prio3CollectorKey) + ".pub"
	// the helper verifies the leader's requests with the leader operator's
	// public signing key (its bundle, in a deployment)
	o.LeaderPub = r.keyPath(keydir.RolePrio3Leader, keydir.Prio3LeaderSignKey) + ".pub"
	o.Kafka = r.brokers
	connect := func() (*nats.Conn, error) {
		nc, _, err := r.connect(natsauth.Role(custody), "crowdlog-aggregate-prio3-"+role)
		return nc, err
	}
	log := r.log
	if role == aggprio3.RoleHelper {
		h, _, err := o.Helper(connect, log)
		if err != nil {
			return nil, err
		}
		h.Now, h.Ready = r.clock.Now, make(chan struct{})
		svc.Go(func() error { return h.Run(svcCtx) })
		select {
		case <-h.Ready:
		case <-time.After(time.Minute):
			return nil, errors.New("pdd prio3: the helper did not subscribe within a minute (see its log lines)")
		case <-svcCtx.Done():
			return nil, svcCtx.Err()
		}
		return h, nil
	}
	l, _, err := o.Leader(connect, log)
	if err != nil {
		return nil, err
	}
	l.Now = r.clock.Now
	svc.Go(func() error { return l.Run(svcCtx) })
	return l, nil
}
