package coordinator

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

// Help is the long help of `crowdlog coordinator`.
const Help = `coordinator serves PDD clients over NATS request/reply (queue group
crowdlog-coordinator: run several for capacity): registration of X25519 public
keys, daily pings with the rounds a client owes, its group's public keys and
recovery tasks, deposits of recovery bundles, and recovery requests from the
aggregator. Each new day it forms the groups of the previous day's active
clients (--heuristic: PDD eq. 5) and writes their rosters and a day tick to
Kafka topic "vectors", each signed with the coordinator's Ed25519 key
(--sign-key) and bound to the topic, the partition, the campaign and its
issue time: aggregate-vectors applies only records its public half
(--coordinator-pub) verifies. State lives in JetStream key-value buckets
and survives restarts.

The day advances with --wall-clock (UTC days) or by requests on
crowdlog.pdd.advance (log replays) signed with the operator's Ed25519 key
(--operator-key, its public half). Recovery requests are accepted only when
signed with the aggregator's key (--aggregator-key); client requests only
under each client's registered key, with growing sequence numbers. Refused
requests are counted per reason.`

// Options are the flags of a coordinator process (`crowdlog coordinator`).
type Options struct {
	NATS  natsconn.Options
	Kafka []string // bootstrap brokers
	// Campaign holds the campaign's name, group size, delay, recovery
	// days and heuristic; its list comes from Keywords.
	Campaign Campaign
	// Keywords is the monitored keyword list file; "" is the embedded
	// keywords.DefaultName.
	Keywords string
	// AggregatorKey and OperatorKey are PEM Ed25519 public key files;
	// OperatorKey "" accepts no clock advance over NATS.
	AggregatorKey, OperatorKey string
	// SignKey is the coordinator's own Ed25519 key file (PKCS #8 PEM,
	// keydir.CoordinatorSignKey; created when missing) that signs its
	// rosters, ticks and commitments on "vectors".
	SignKey string
	// WallClock advances the day from the UTC wall clock.
	WallClock bool
}

// Config is what a Coordinator is built from (New).
type Config struct {
	Brokers                    []string
	Campaign                   Campaign
	AggregatorKey, OperatorKey ed25519.PublicKey
	// SignKey signs the coordinator's records on "vectors"
	// (Coordinator.SignKey); nil writes them unsigned.
	SignKey ed25519.PrivateKey
}

// NewOptions returns the coordinator's defaults: campaign "pdd", groups
// of 100, a delay of 2 days, 1 recovery day, the aggregator's public key
// and the coordinator's signing key in keys/, the local Kafka broker.
func NewOptions() *Options {
	return &Options{Kafka: []string{infrakafka.DefaultBroker},
		Campaign:      Campaign{Name: "pdd", GroupSize: 100, Delay: 2, RecoveryDays: 1},
		AggregatorKey: "keys/" + keydir.AggregatorSignKey + ".pub", SignKey: "keys/" + keydir.CoordinatorSignKey}
}

// AddFlags adds the coordinator's flags to f, with o's values as defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Campaign.Name, "campaign", o.Campaign.Name, "campaign name")
	f.StringVar(&o.Keywords, "keywords", o.Keywords, "monitored keyword list (default: embedded "+keywords.DefaultName+")")
	f.IntVar(&o.Campaign.GroupSize, "group-size", o.Campaign.GroupSize, "clients per group")
	f.IntVar(&o.Campaign.Delay, "delay", o.Campaign.Delay, "days to wait for late members")
	f.IntVar(&o.Campaign.RecoveryDays, "recovery-days", o.Campaign.RecoveryDays, "days for recovery answers after the delay")
	f.BoolVar(&o.Campaign.Heuristic, "heuristic", o.Campaign.Heuristic, "PDD eq. 5 activity heuristic")
	f.BoolVar(&o.WallClock, "wall-clock", o.WallClock, "advance the day from the UTC wall clock")
	f.StringVar(&o.AggregatorKey, "aggregator-key", o.AggregatorKey, "the aggregator's Ed25519 public key (PEM): recovery requests must be signed with it")
	f.StringVar(&o.OperatorKey, "operator-key", o.OperatorKey, "the operator's Ed25519 public key (PEM): clock advances over NATS must be signed with it (none accepted when unset)")
	f.StringVar(&o.SignKey, "sign-key", o.SignKey, "the coordinator's Ed25519 key (PEM, "+keydir.CoordinatorSignKey+"; created when missing; crowdlog keys generate --role coordinator makes it): signs rosters, ticks and commitments on Kafka \"vectors\"; aggregate-vectors verifies them with its public half (--coordinator-pub)")
	o.NATS.AddFlags(f, "NATS URL; a comma-separated list for a cluster")
	f.StringSliceVar(&o.Kafka, "kafka", o.Kafka, "Kafka bootstrap brokers, comma-separated")
}

// Validate errors when the campaign name is not valid
// (blind.ValidCampaign), as Start would.
func (o *Options) Validate() error {
	if !blind.ValidCampaign(o.Campaign.Name) {
		return fmt.Errorf("coordinator: campaign name %q: use 1-64 of [A-Za-z0-9._-]", o.Campaign.Name)
	}
	return nil
}

// Config validates o and loads the keyword list and the public keys.
// Errors name the flag whose file failed.
func (o *Options) Config() (Config, error) {
	if err := o.Validate(); err != nil {
		return Config{}, err
	}
	c := Config{Brokers: o.Kafka, Campaign: o.Campaign}
	l, err := keywords.Load(o.Keywords)
	if err != nil {
		return Config{}, err
	}
	c.Campaign.List, c.Campaign.ListName = l, o.Keywords
	if o.Keywords == "" {
		c.Campaign.ListName = keywords.DefaultName
	}
	if c.AggregatorKey, err = keydir.LoadSigningPublic(o.AggregatorKey); err != nil {
		return Config{}, fmt.Errorf("--aggregator-key: %w (create it with the aggregator's keys dir, file %s)", err, keydir.AggregatorSignKey)
	}
	if o.OperatorKey != "" {
		if c.OperatorKey, err = keydir.LoadSigningPublic(o.OperatorKey); err != nil {
			return Config{}, fmt.Errorf("--operator-key: %w", err)
		}
	}
	if o.SignKey == "" {
		return Config{}, errors.New("--sign-key: required: the coordinator signs its rosters, ticks and commitments (`crowdlog keys generate --role coordinator` makes " + keydir.CoordinatorSignKey + ")")
	}
	if c.SignKey, err = keydir.EnsureSigningKey(o.SignKey); err != nil {
		return Config{}, fmt.Errorf("--sign-key: %w", err)
	}
	return c, nil
}

// Connect connects to NATS with the coordinator's credential.
func (o *Options) Connect() (*nats.Conn, error) {
	return o.NATS.Connect("crowdlog-coordinator", natsauth.Coordinator)
}

// New returns a coordinator of cfg on nc, not started (Start).
func New(nc *nats.Conn, cfg Config, log *slog.Logger) *Coordinator {
	return &Coordinator{NC: nc, Brokers: cfg.Brokers, Campaign: cfg.Campaign, Logger: log,
		AggregatorKey: cfg.AggregatorKey, OperatorKey: cfg.OperatorKey, SignKey: cfg.SignKey}
}

// Start connects to NATS with the coordinator's credential (Connect),
// builds the coordinator of cfg (New) and starts it. stop closes the
// coordinator, then the connection.
func (o *Options) Start(ctx context.Context, cfg Config, log *slog.Logger) (co *Coordinator, nc *nats.Conn, stop func(), err error) {
	if nc, err = o.Connect(); err != nil {
		return nil, nil, nil, err
	}
	co = New(nc, cfg, log)
	if err := co.Start(ctx); err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return co, nc, func() { co.Close(); nc.Close() }, nil
}

// Serve runs co until ctx ends: with wallClock the day follows the UTC
// wall clock (FollowWallClock, checked every minute), otherwise only
// advance requests move it.
func (co *Coordinator) Serve(ctx context.Context, wallClock bool) error {
	co.Logger.Info("coordinator: serving", "campaign", co.Campaign.Name)
	if !wallClock {
		<-ctx.Done()
		return nil
	}
	return co.FollowWallClock(ctx, time.Minute)
}

// AdvanceHelp is the long help of `crowdlog coordinator advance`.
const AdvanceHelp = `advance asks the running coordinators to start a day: they form the groups
of the day before from its active clients and write rosters and a tick to
Kafka "vectors". The request is signed with the operator's Ed25519 key
(--key; keys/operator-sign.key, created by the first crowdlog pdd run or by
this command when missing); the coordinator accepts it only when started
with --operator-key set to its public half. Days move one at a time up to
--day; a day not after the current one changes nothing.`

// AdvanceOptions are the flags of `crowdlog coordinator advance`.
type AdvanceOptions struct {
	NATS natsconn.Options
	Day  string // YYYY-MM-DD (UTC)
	Key  string // the operator's Ed25519 credential (PEM), created when missing
}

// NewAdvanceOptions returns the defaults: the operator's key in keys/.
func NewAdvanceOptions() *AdvanceOptions {
	return &AdvanceOptions{Key: "keys/" + keydir.OperatorSignKey}
}

// AddFlags adds advance's flags to f, with o's values as defaults.
func (o *AdvanceOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Day, "day", o.Day, "the day to start (UTC), YYYY-MM-DD")
	f.StringVar(&o.Key, "key", o.Key, "the operator's Ed25519 credential (PEM)")
	o.NATS.AddFlags(f, "NATS URL(s) of the coordinators, comma-separated")
}

// Advance asks the coordinators to start o.Day (NATSAdvance, signed with
// o.Key) and returns the line to print: the day, groups, active and
// grouped clients.
func (o *AdvanceOptions) Advance(ctx context.Context) (string, error) {
	t, err := time.Parse("2006-01-02", o.Day)
	if err != nil {
		return "", fmt.Errorf("--day %q: want YYYY-MM-DD", o.Day)
	}
	k, err := keydir.EnsureSigningKey(o.Key)
	if err != nil {
		return "", fmt.Errorf("--key: %w", err)
	}
	nc, err := o.NATS.Connect("crowdlog-coordinator-advance", natsauth.Operator)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	rep, err := NATSAdvance(ctx, nc, k, int32(keywords.DayOf(t)))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("day %s: %d groups from %d active clients (%d grouped)",
		keywords.Day(rep.Day), rep.Groups, rep.Active, rep.Grouped), nil
}
