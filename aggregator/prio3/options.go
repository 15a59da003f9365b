package prio3

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// Roles of `crowdlog aggregate-prio3 --role`.
const (
	RoleLeader = "leader"
	RoleHelper = "helper"
)

// Options are the settings of one Prio3 aggregator process (`crowdlog
// aggregate-prio3 --role leader|helper`). DefaultOptions gives the
// defaults; Validate checks what needs no file; Config reads the files;
// Leader and Helper build the services.
type Options struct {
	Role     string // RoleLeader or RoleHelper
	Campaign string
	// Measurement: Kind "sumvec" (counts clipped to 2^Bits − 1) or
	// "presence" (at most MaxWeight keywords per report); the vector
	// length is the keyword list's (Keywords: a file, "" the embedded
	// list); Chunk 0 = p3.DefaultChunk.
	Kind      string
	Bits      int
	MaxWeight int
	// L1 is the SumVec campaign's per-client daily L1 bound S
	// (p3.Config.L1): the noise's sensitivity; 0 = L·(2^Bits − 1).
	L1       uint64
	Keywords string
	Chunk    int
	// MinBatchSize: the fewest reports a batch is revealed with.
	MinBatchSize uint64
	Grace        time.Duration // after a day's end (UTC), its batch still takes reports
	Retain       time.Duration // after a batch closes, a collected batch's state is kept this long (0: forever; default DefaultRetain)
	// Epsilon > 0: Laplace noise of scale S/ε on each entry of this
	// aggregator's aggregate share (Config.Epsilon): ε per person-day.
	// Epsilon 0 (exact shares) needs ExactShares: with exact shares a
	// malicious leader that pads a batch with reports of its own reads
	// one client's vector from the release.
	Epsilon     float64
	ExactShares bool
	// StatusEpsilon (leader) is ε_c of the day's status
	// (Config.StatusEpsilon); p3.AutoStatusEpsilon (the default) means
	// 0.1 × Epsilon, 0 the exact minimum batch rule. StatusDelta is its δ
	// (Config.StatusDelta). CampaignStart (leader), "YYYY-MM-DD" or "",
	// is the first day of the campaign's span
	// (LeaderService.CampaignStart).
	StatusEpsilon float64
	StatusDelta   float64
	CampaignStart string
	VerifyKey     string // the verify key file (keydir.ParseVerifyKeys)
	KeyEpoch      uint32 // leader: the verify-key epoch to prepare under; 0 = the file's newest
	// KeysDir is the role's keys directory: the leader's prio3-leader.key
	// or the helper's prio3-helper.key (with rotated-out ROLE.N.key files,
	// accepted too) and the collector's public key.
	KeysDir      string
	CollectorPub string // the collector's public key file; "" = KeysDir/prio3-collector.key.pub
	// SignKey (leader) is the leader's Ed25519 key that signs every
	// request to the helper; "" = KeysDir/prio3-leader-sign.key. LeaderPub
	// (helper) is its public half; "" = KeysDir/prio3-leader-sign.key.pub
	// (imported from the leader's public bundle).
	SignKey   string
	LeaderPub string
	// TokenSeed (helper) is the helper operator's helper-token seed file
	// (Config.TokenSeed); "" = KeysDir/prio3-helper-token.key.
	// NoHelperTokens (helper) prepares reports without helper tokens.
	TokenSeed      string
	NoHelperTokens bool
	// NoLeaderTokens (leader) prepares reports without leader tokens;
	// otherwise the leader loads its operator's seed (Config.LeaderTokenSeed)
	// from TokenSeed, "" = KeysDir/prio3-leader-token.key.
	NoLeaderTokens bool
	StateDir       string // the snapshot's directory
	// ClockFile, set, replaces the wall clock: the file holds the current
	// time as RFC 3339, re-read at every step (log replays and tests).
	ClockFile       string
	MaxRequestBytes int           // leader: bound of one AggregateReq
	RequestTimeout  time.Duration // leader: bound of one helper request
	// PartitionRefresh (leader) is how often the uploads topic's
	// partitions are listed (LeaderService.PartitionRefresh).
	PartitionRefresh time.Duration
	// StepFill (leader): how long a step waits for more uploads after its
	// first (LeaderService.StepFill; negative: no wait).
	StepFill time.Duration
	// DeleteApplied (leader): delete the uploads its snapshots passed,
	// every DeleteEvery (LeaderService.DeleteApplied, DeleteEvery).
	DeleteApplied bool
	DeleteEvery   time.Duration
	NATS          natsconn.Options
	Kafka         []string // leader: bootstrap brokers
}

// DefaultEpsilon is the default --epsilon of each aggregator: ε = 1 per
// person-day (Laplace of scale S/1 on every total).
const DefaultEpsilon = 1.0

// ExactSharesHelp is the help of --exact-shares: what an exact share gives
// up.
const ExactSharesHelp = "release this aggregator's aggregate shares without noise (needs --epsilon 0). Gives up the privacy of every client against the other aggregator: a malicious leader that keeps one client's report and pads the batch to --min-batch-size with reports of its own reads that client's whole daily vector from the release; only the noise of --epsilon > 0 protects against it. For tests and exact comparisons only"

// DefaultRetain is the default Options.Retain: 30 days after a batch's
// close, longer than any outage the services are meant to ride out.
const DefaultRetain = 30 * 24 * time.Hour

// DefaultOptions returns the options of `crowdlog aggregate-prio3` without
// flags.
func DefaultOptions() Options {
	return Options{Campaign: "pdd", Kind: "sumvec", Bits: p3.DefaultBits, MaxWeight: 100, L1: p3.DefaultL1, MinBatchSize: 100, Epsilon: DefaultEpsilon,
		StatusEpsilon: p3.AutoStatusEpsilon, StatusDelta: p3.DefaultStatusDelta,
		Grace: 2 * time.Hour, Retain: DefaultRetain, KeysDir: "keys", MaxRequestBytes: DefaultMaxRequestBytes, RequestTimeout: DefaultRequestTimeout,
		PartitionRefresh: DefaultPartitionRefresh, StepFill: DefaultStepFill, DeleteEvery: DefaultDeleteEvery,
		Kafka: []string{infrakafka.DefaultBroker}}
}

// AddFlags adds the flags of `crowdlog aggregate-prio3` (but --metrics) to
// f, filling o; the values in o are the defaults shown.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Role, "role", o.Role, "which aggregator this process is: leader or helper (required)")
	f.StringVar(&o.Campaign, "campaign", o.Campaign, "campaign name (the same at the leader, the helper, the clients and the release stage)")
	f.StringVar(&o.Kind, "kind", o.Kind, "measurement: sumvec (per keyword the day's count clipped to 2^bits − 1) or presence (per keyword 0/1, at most --max-weight ones)")
	f.IntVar(&o.Bits, "bits", o.Bits, "sumvec: bits per count (1..16): counts are clipped to 2^bits − 1")
	f.IntVar(&o.MaxWeight, "max-weight", o.MaxWeight, "presence: the most keywords one report may set")
	f.Uint64Var(&o.L1, "l1", o.L1, "sumvec: the campaign's bound S on one client's daily sum of counts (clients keep their most searched keywords within it); the noise's sensitivity; 0 = L·(2^bits − 1). The same at both aggregators, the clients and release-pdd")
	f.StringVar(&o.Keywords, "keywords", o.Keywords, "monitored keyword list, one per line (default: embedded "+keywords.DefaultName+"); its length is the vector length")
	f.IntVar(&o.Chunk, "chunk", o.Chunk, "FLP chunk length (0: about √(length·bits), the fastest)")
	f.Uint64Var(&o.MinBatchSize, "min-batch-size", o.MinBatchSize, "fewest reports a day's batch is revealed with (both aggregators refuse smaller batches)")
	f.DurationVar(&o.Grace, "grace", o.Grace, "after a day's end (UTC) its batch takes reports this long, then closes and is collected")
	f.DurationVar(&o.Retain, "retain", o.Retain, "after a batch closes its state (aggregate, noise draw, batch log) is kept this long, then dropped, but only once the batch was collected or can never be (refused, or closed with fewer than --min-batch-size reports): a batch that could still be collected is kept whatever its age; 0 keeps every batch")
	f.Float64Var(&o.Epsilon, "epsilon", o.Epsilon, "privacy per person-day: Laplace noise on every keyword of this aggregator's aggregate share of each day, scale S/ε (S = --l1 for sumvec, --max-weight for presence), drawn once per batch. This aggregator's noise alone makes each person's whole day ε-DP, also against a malicious other aggregator; give both aggregators and release-pdd --mode prio3 the same ε (the collector refuses shares with another ε). 0 needs --exact-shares")
	f.BoolVar(&o.ExactShares, "exact-shares", o.ExactShares, ExactSharesHelp)
	f.Float64Var(&o.StatusEpsilon, "status-epsilon", o.StatusEpsilon, StatusEpsilonHelp)
	f.Float64Var(&o.StatusDelta, "status-delta", o.StatusDelta, StatusDeltaHelp)
	f.StringVar(&o.CampaignStart, "campaign-start", o.CampaignStart, "leader, with a status ε_c > 0: the campaign's first day (YYYY-MM-DD, UTC); every closed day from it on without reports is withheld below_min_batch like a day of too few, so a reader cannot tell 0 reports from 1. Default: the earliest day this leader could take a report for when it first ran (its state's first day after a restart)")
	f.StringVar(&o.VerifyKey, "verify-key", o.VerifyKey, "verify key file shared by the leader and the helper only (crowdlog keys prio3-verify)")
	f.Uint32Var(&o.KeyEpoch, "key-epoch", o.KeyEpoch, "leader: verify-key epoch to prepare under (0: the newest of --verify-key)")
	f.StringVar(&o.KeysDir, "keys", o.KeysDir, "this role's keys directory (crowdlog keys generate --role prio3-leader or prio3-helper): its HPKE key and the collector's public key")
	f.StringVar(&o.CollectorPub, "collector-pub", o.CollectorPub, "the collector's public key file (default: KEYS/"+keydir.Prio3CollectorKey+".pub)")
	f.StringVar(&o.SignKey, "sign-key", o.SignKey, "leader: the Ed25519 key signing every request to the helper (default: KEYS/"+keydir.Prio3LeaderSignKey+", from crowdlog keys generate --role prio3-leader)")
	f.StringVar(&o.LeaderPub, "leader-pub", o.LeaderPub, "helper: the leader's public signing key; requests not signed by it are refused (default: KEYS/"+keydir.Prio3LeaderSignKey+".pub, from the leader's public bundle)")
	f.StringVar(&o.TokenSeed, "token-seed", o.TokenSeed, "the seed of this operator's report tokens, shared with its issuer on the same keys volume (crowdlog issuer --role prio3-helper, or prio3-leader): a report is prepared only with a valid, unspent token of this aggregator, one per enrolled identity per campaign-day (default: KEYS/"+keydir.Prio3HelperTokenSeed+" at the helper, KEYS/"+keydir.Prio3LeaderTokenSeed+" at the leader, from crowdlog keys generate --role prio3-helper or prio3-leader)")
	f.BoolVar(&o.NoLeaderTokens, "no-leader-tokens", o.NoLeaderTokens, "leader: prepare reports without leader tokens. Gives up the defence against a malicious helper operator: it mints helper tokens, so it can then upload reports of its own through the relays, pad a batch around one client and read that client's vector from the release (exact shares), and an unenrolled sender's reports count")
	f.BoolVar(&o.NoHelperTokens, "no-helper-tokens", o.NoHelperTokens, "helper: prepare reports without helper tokens. Gives up the defence against a malicious leader: it can then pad a batch with reports of its own (whose values it knows) around one client and read that client's vector from the release, and a client can count itself more than once a day")
	f.StringVar(&o.StateDir, "state-dir", o.StateDir, "directory of this aggregator's snapshot (required; one per role and campaign)")
	f.StringVar(&o.ClockFile, "clock-file", o.ClockFile, "replay clock: a file holding the current time as RFC 3339, re-read at every step, instead of the wall clock (log replays and tests)")
	f.IntVar(&o.MaxRequestBytes, "max-request-bytes", o.MaxRequestBytes, "leader: bound of one aggregate request to the helper in bytes (below the NATS max_payload)")
	f.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "leader: bound of one request to the helper (retried)")
	f.DurationVar(&o.StepFill, "step-fill", o.StepFill, "leader: after a step's first upload, wait this long for more (up to 64) before preparing them with the helper. Each step that commits reports writes one record with the day's running aggregate (16 B per keyword: 160 KB at 10,000 keywords) at both aggregators, so at a trickle of uploads this bounds those writes to one per --step-fill (13.8 GB a day at 1s, whatever the rate), for at most this much more latency per report; a negative value takes each upload as it arrives")
	f.DurationVar(&o.PartitionRefresh, "partition-refresh", o.PartitionRefresh, "leader: how often the partitions of the uploads topic are listed: when the topic grows and the campaign's key hashes to a new partition, the leader reads it (from its first offset) within this time, without a restart; each listing is one metadata request to the brokers")
	f.BoolVar(&o.DeleteApplied, "delete-applied-uploads", o.DeleteApplied, "leader: delete (Kafka DeleteRecords) the records of the uploads topic its snapshots have passed, every --delete-applied-every: on each partition it reads, below the offset no restart needs again (the oldest pending report's upload, else the snapshot's next offset), but never past the first record there of another campaign or without a key. The broker then keeps about the leader's lag of uploads instead of the topic's whole retention (656 GB a day at 10^6 uploads), and sealed uploads are not kept for anyone who takes the broker's disk. Needs Delete on the topic for the leader's Kafka user (crowdlog topics --acl prio3-delete=USER). A failed request is logged and counted, never stops the leader. A state directory restored from a backup older than a deletion loses the pending reports of the deleted uploads")
	f.DurationVar(&o.DeleteEvery, "delete-applied-every", o.DeleteEvery, "leader, with --delete-applied-uploads: how often it deletes (each round: one ListOffsets and at most one DeleteRecords request, each bounded by 30s)")
	o.NATS.AddFlags(f, "NATS URL(s), comma-separated: the leader requests, the helper answers on "+"crowdlog.prio3.helper")
	f.StringSliceVar(&o.Kafka, "kafka", o.Kafka, "leader: Kafka bootstrap brokers, comma-separated")
}

// Validate checks what needs no file. Errors are config.UsageError.
func (o *Options) Validate() error {
	bad := func(format string, args ...any) error { return config.UsageError{Err: fmt.Errorf(format, args...)} }
	switch {
	case o.Role != RoleLeader && o.Role != RoleHelper:
		return bad("--role %q: want leader or helper", o.Role)
	case o.Campaign == "" || len(o.Campaign) > 64 || strings.ContainsAny(o.Campaign, "/ \t\n"):
		return bad("--campaign %q: 1-64 characters without '/' or spaces", o.Campaign)
	case o.Kind != "sumvec" && o.Kind != "presence":
		return bad("--kind %q: want sumvec or presence", o.Kind)
	case o.MinBatchSize == 0:
		return bad("--min-batch-size 0 would reveal single clients' vectors")
	case o.Grace < 0:
		return bad("--grace %s: must not be negative", o.Grace)
	case o.Retain < 0:
		return bad("--retain %s: must not be negative", o.Retain)
	case math.IsNaN(o.Epsilon) || math.IsInf(o.Epsilon, 0) || o.Epsilon < 0:
		return bad("--epsilon %v: must be finite and ≥ 0 (0 = exact shares, with --exact-shares)", o.Epsilon)
	case o.Epsilon == 0 && !o.ExactShares:
		return bad("--epsilon 0 releases exact shares: a malicious leader padding a batch would read one client's vector; give --exact-shares too if that is meant, else an ε > 0 (default %g)", DefaultEpsilon)
	case o.Epsilon > 0 && o.ExactShares:
		return bad("--exact-shares with --epsilon %v: give --epsilon 0 for exact shares, or leave --exact-shares out", o.Epsilon)
	case math.IsNaN(o.StatusEpsilon) || math.IsInf(o.StatusEpsilon, 0):
		return bad("--status-epsilon %v: must be finite (%g = %g × --epsilon, 0 = the exact minimum batch rule)", o.StatusEpsilon, p3.AutoStatusEpsilon, p3.StatusEpsilonShare)
	case p3.StatusEpsilonOf(o.StatusEpsilon, o.Epsilon) > 0 && !(o.StatusDelta > 0 && o.StatusDelta < 0.5):
		return bad("--status-delta %v: want 0 < δ < 0.5 (default %g)", o.StatusDelta, p3.DefaultStatusDelta)
	case o.CampaignStart != "" && !validDay(o.CampaignStart):
		return bad("--campaign-start %q: want a day as YYYY-MM-DD", o.CampaignStart)
	case o.VerifyKey == "":
		return bad("--verify-key is required (crowdlog keys prio3-verify --out FILE; the same file at the leader and the helper)")
	case o.StateDir == "":
		return bad("--state-dir is required (the aggregator's snapshot; without it a restart would count reports twice)")
	case o.Role == RoleLeader && len(o.Kafka) == 0:
		return bad("--kafka is required for the leader")
	case o.MaxRequestBytes < 64<<10:
		return bad("--max-request-bytes %d: at least 65536", o.MaxRequestBytes)
	case o.RequestTimeout <= 0:
		return bad("--request-timeout must be positive")
	case o.PartitionRefresh <= 0:
		return bad("--partition-refresh %s: must be positive (default %s)", o.PartitionRefresh, DefaultPartitionRefresh)
	case o.DeleteApplied && (o.DeleteEvery < time.Second || o.DeleteEvery > 24*time.Hour):
		return bad("--delete-applied-every %s: between 1s and 24h (default %s)", o.DeleteEvery, DefaultDeleteEvery)
	}
	m := o.measurement(1)
	if m.Kind == p3.KindSumVec && (m.Bits < 1 || m.Bits > 16) {
		return bad("--bits %d: want 1..16", m.Bits)
	}
	if m.Kind == p3.KindPresence && m.MaxWeight < 1 {
		return bad("--max-weight %d: want at least 1", m.MaxWeight)
	}
	return nil
}

func (o *Options) measurement(length int) p3.Config {
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: o.Bits, Chunk: o.Chunk, L1: o.L1}
	if o.Kind == "presence" {
		m = p3.Config{Kind: p3.KindPresence, Length: length, MaxWeight: o.MaxWeight, Chunk: o.Chunk}
	}
	return m
}

// keyFile is the role's HPKE key file name.
func (o *Options) keyFile() (name, custody string) {
	if o.Role == RoleLeader {
		return keydir.Prio3LeaderKey, keydir.RolePrio3Leader
	}
	return keydir.Prio3HelperKey, keydir.RolePrio3Helper
}

// Config validates o and reads the keyword list (its length), the role's
// HPKE keys (the current one and rotated-out ROLE.N.key files; another
// role's directory or key is refused, keydir.ErrNotCustodian), the
// collector's public key and the verify keys. Errors name the flag whose
// file failed.
func (o *Options) Config() (Config, error) {
	if err := o.Validate(); err != nil {
		return Config{}, err
	}
	list, err := keywords.Load(o.Keywords)
	if err != nil {
		return Config{}, fmt.Errorf("--keywords: %w", err)
	}
	m := o.measurement(list.Len())
	if err := m.Check(); err != nil {
		return Config{}, config.UsageError{Err: fmt.Errorf("measurement (--kind, --bits, --max-weight, --chunk, --keywords): %w", err)}
	}
	name, custody := o.keyFile()
	if err := keydir.RequireRole(o.KeysDir, "aggregate-prio3 --role "+o.Role, custody); err != nil {
		return Config{}, err
	}
	paths := []string{filepath.Join(o.KeysDir, name)}
	old, _ := filepath.Glob(filepath.Join(o.KeysDir, strings.TrimSuffix(name, ".key")+".*.key"))
	sort.Strings(old)
	keys, err := keydir.LoadKeyPairs(append(paths, old...))
	if err != nil {
		return Config{}, fmt.Errorf("--keys %s: %w (crowdlog keys generate --role %s --keys DIR)", o.KeysDir, err, custody)
	}
	cp := o.CollectorPub
	if cp == "" {
		cp = filepath.Join(o.KeysDir, keydir.Prio3CollectorKey+".pub")
	}
	collector, err := onion.LoadPublicKey(cp)
	if err != nil {
		return Config{}, fmt.Errorf("--collector-pub %s: %w (import the collector's public bundle: crowdlog keys import-public)", cp, err)
	}
	vks, err := keydir.LoadVerifyKeys(o.VerifyKey)
	if err != nil {
		return Config{}, err
	}
	epoch := o.KeyEpoch
	if epoch == 0 {
		epoch, _ = vks.Newest()
	}
	if _, ok := vks[epoch]; !ok && o.Role == RoleLeader {
		return Config{}, config.UsageError{Err: fmt.Errorf("--key-epoch %d: not in --verify-key %s", epoch, o.VerifyKey)}
	}
	return Config{Campaign: o.Campaign, Measurement: m, KeyEpoch: epoch, VerifyKeys: vks, Grace: o.Grace,
		MinBatchSize: o.MinBatchSize, Keys: keys, Collector: collector, MaxRequestBytes: o.MaxRequestBytes, Retain: o.Retain,
		Epsilon: o.Epsilon, StatusEpsilon: p3.StatusEpsilonOf(o.StatusEpsilon, o.Epsilon), StatusDelta: o.StatusDelta}, nil
}

// StatusEpsilonHelp is the help of --status-epsilon (aggregate-prio3, and
// the release's and crowdlog pdd's flag of the same name).
const StatusEpsilonHelp = "ε_c of each day's status (released, or withheld below_min_batch): the leader releases a day only when its report count n ≥ --min-batch-size and n + Laplace(1/ε_c) ≥ --min-batch-size + ⌈ln(1/(2δ))/ε_c⌉ (δ = --status-delta), drawn once per day, so the status is (ε_c, δ)-DP per person-day and costs ε_c on the day's ledger (give release-pdd the same value). A negative value means 0.1 × --epsilon (at ε = 1, δ = 1e-6: n must pass the minimum by about 132); 0 = the exact minimum (the DAP rule), whose status tells whether one person took part on a day of min − 1 reports. The leader announces ε_c and δ in its signed settings: devices refuse 0 and ε_c above 1 unless their app allows it (ingest/prio3 Config.AllowExactStatus, MaxStatusEpsilon)"

// StatusDeltaHelp is the help of --status-delta.
const StatusDeltaHelp = "δ of each day's status with --status-epsilon > 0: the chance that a day of exactly --min-batch-size reports is released though a day of one report fewer never is (0 < δ < 0.5)"

func validDay(s string) bool {
	_, err := time.Parse(time.DateOnly, s)
	return err == nil
}

// Clock returns the service clock: nil (time.Now) without ClockFile;
// otherwise a function that reads the file at every call and returns the
// last time it could read (the file is checked once here: an error when
// it does not hold an RFC 3339 time).
func (o *Options) Clock(log *slog.Logger) (func() time.Time, error) {
	if o.ClockFile == "" {
		return nil, nil
	}
	return ClockFile(o.ClockFile, log)
}

// ClockFile returns a clock read from path (RFC 3339, surrounding white
// space ignored) at every call; when a read fails the last good time is
// returned and the failure logged. It errors when the first read fails.
func ClockFile(path string, log *slog.Logger) (func() time.Time, error) {
	if log == nil {
		log = slog.Default()
	}
	read := func() (time.Time, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return time.Time{}, err
		}
		return time.Parse(time.RFC3339, strings.TrimSpace(string(b)))
	}
	last, err := read()
	if err != nil {
		return nil, fmt.Errorf("--clock-file %s: %w (write the current time as RFC 3339, e.g. 2006-03-07T12:00:00Z)", path, err)
	}
	var mu sync.Mutex
	return func() time.Time {
		t, err := read()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			log.Warn("prio3: clock file unreadable; keeping the last time", "file", path, "err", err)
			return last
		}
		last = t
		return t
	}, nil
}

// natsRole is the NATS credential of the role (natsauth's permission
// table rows "prio3-leader" and "prio3-helper").
func (o *Options) natsRole() natsauth.Role { return natsauth.Role("prio3-" + o.Role) }

func (o *Options) connect(connect func() (*nats.Conn, error)) (*nats.Conn, error) {
	if connect == nil {
		connect = func() (*nats.Conn, error) {
			return o.NATS.Connect("crowdlog-aggregate-prio3-"+o.Role, o.natsRole())
		}
	}
	return connect()
}

// Leader reads the configuration (Config, Clock), connects to NATS
// (connect; nil: o.NATS as prio3-leader) and builds the leader service.
// The caller closes the connection after the service ends.
func (o *Options) Leader(connect func() (*nats.Conn, error), log *slog.Logger) (*LeaderService, *nats.Conn, error) {
	if o.Role != RoleLeader {
		return nil, nil, errors.New("aggregate-prio3: Leader needs --role leader")
	}
	cfg, now, err := o.configAndClock(log)
	if err != nil {
		return nil, nil, err
	}
	path := o.SignKey
	if path == "" {
		path = filepath.Join(o.KeysDir, keydir.Prio3LeaderSignKey)
	}
	key, err := keydir.LoadSigningKey(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--sign-key %s: %w (crowdlog keys generate --role prio3-leader --keys DIR creates it; give the helper its .pub)", path, err)
	}
	if !o.NoLeaderTokens {
		sp := o.TokenSeed
		if sp == "" {
			sp = filepath.Join(o.KeysDir, keydir.Prio3LeaderTokenSeed)
		}
		if cfg.LeaderTokenSeed, err = keydir.LoadPrio3TokenSeed(sp); err != nil {
			return nil, nil, fmt.Errorf("--token-seed %s: %w (crowdlog keys generate --role prio3-leader --keys DIR creates it; or --no-leader-tokens, which lets the helper's operator pad batches)", sp, err)
		}
	}
	nc, err := o.connect(connect)
	if err != nil {
		return nil, nil, err
	}
	list, err := keywords.Load(o.Keywords) // read by Config already
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("--keywords: %w", err)
	}
	var start time.Time
	if o.CampaignStart != "" {
		start, _ = time.Parse(time.DateOnly, o.CampaignStart) // checked by Validate
	}
	return &LeaderService{Config: cfg, Brokers: o.Kafka, NATS: nc, StateDir: o.StateDir, Now: now, Logger: log, CampaignStart: start,
		RequestTimeout: o.RequestTimeout, PartitionRefresh: o.PartitionRefresh, StepFill: o.StepFill,
		DeleteApplied: o.DeleteApplied, DeleteEvery: o.DeleteEvery, SignKey: key, ListHash: list.Hash()}, nc, nil
}

// Helper is Leader for the helper (NATS credential prio3-helper).
func (o *Options) Helper(connect func() (*nats.Conn, error), log *slog.Logger) (*HelperService, *nats.Conn, error) {
	if o.Role != RoleHelper {
		return nil, nil, errors.New("aggregate-prio3: Helper needs --role helper")
	}
	cfg, now, err := o.configAndClock(log)
	if err != nil {
		return nil, nil, err
	}
	path := o.LeaderPub
	if path == "" {
		path = filepath.Join(o.KeysDir, keydir.Prio3LeaderSignKey+".pub")
	}
	pub, err := keydir.LoadSigningPublic(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--leader-pub %s: %w (import the leader's public bundle: crowdlog keys import-public, or give the file)", path, err)
	}
	if !o.NoHelperTokens {
		sp := o.TokenSeed
		if sp == "" {
			sp = filepath.Join(o.KeysDir, keydir.Prio3HelperTokenSeed)
		}
		if cfg.TokenSeed, err = keydir.LoadPrio3TokenSeed(sp); err != nil {
			return nil, nil, fmt.Errorf("--token-seed %s: %w (crowdlog keys generate --role prio3-helper --keys DIR creates it; or --no-helper-tokens, which lets the leader pad batches)", sp, err)
		}
		if _, err := NewHelper(cfg); err != nil {
			return nil, nil, err
		}
	}
	nc, err := o.connect(connect)
	if err != nil {
		return nil, nil, err
	}
	return &HelperService{Config: cfg, NATS: nc, StateDir: o.StateDir, Now: now, Logger: log, LeaderKey: pub}, nc, nil
}

func (o *Options) configAndClock(log *slog.Logger) (Config, func() time.Time, error) {
	cfg, err := o.Config()
	if err != nil {
		return Config{}, nil, err
	}
	now, err := o.Clock(log)
	if err != nil {
		return Config{}, nil, config.UsageError{Err: err}
	}
	return cfg, now, nil
}
