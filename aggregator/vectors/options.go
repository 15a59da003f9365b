package vectors

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
)

// Options are the settings of one PDD aggregator process (`crowdlog
// aggregate-vectors`): its brokers, HPKE keys, the Ed25519 credential that
// signs its recovery requests, the coordinator's public key that must sign
// every roster, tick and commit, and its NATS connection to the
// coordinator.
type Options struct {
	Kafka    []string // bootstrap brokers, host:port
	KeyPaths []string // HPKE key files (two during a rotation); required
	SignKey  string   // the Ed25519 credential (PEM), created when missing
	// CoordinatorPub is the coordinator's Ed25519 public key file (PEM,
	// keydir.CoordinatorSignKey+".pub"; required): control records on
	// "vectors" must be signed by it (Service.ControlKey).
	CoordinatorPub string
	// Campaigns are the campaigns served (empty: any the coordinator's
	// key signs for).
	Campaigns []string
	NATS      natsconn.Options
}

// DefaultOptions returns the options of `crowdlog aggregate-vectors`
// without flags.
func DefaultOptions() Options {
	return Options{Kafka: []string{infrakafka.DefaultBroker}, SignKey: "keys/" + keydir.AggregatorSignKey,
		CoordinatorPub: "keys/" + keydir.CoordinatorSignKey + ".pub"}
}

// AddFlags adds the flags of `crowdlog aggregate-vectors` to f, filling o.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&o.KeyPaths, "key", o.KeyPaths, "aggregator HPKE key file (repeat during a rotation)")
	f.StringVar(&o.SignKey, "sign-key", o.SignKey, "the aggregator's Ed25519 credential (PEM; created when missing): signs recovery requests")
	f.StringVar(&o.CoordinatorPub, "coordinator-pub", o.CoordinatorPub, "the coordinator's Ed25519 public key (PEM, "+keydir.CoordinatorSignKey+".pub, the public half of the coordinator's --sign-key): only rosters, ticks and commitments it signed for this topic, partition and campaign are applied; unsigned, foreign and replayed ones are dropped and counted")
	f.StringSliceVar(&o.Campaigns, "campaign", o.Campaigns, "campaigns served, comma-separated (default: any the coordinator's key signs for)")
	o.NATS.AddFlags(f, "NATS URL(s) of the coordinator, comma-separated")
	f.StringSliceVar(&o.Kafka, "kafka", o.Kafka, "Kafka bootstrap brokers, comma-separated")
}

// Validate checks what needs no file (a --coordinator-pub is given);
// every file is checked only when read (Service).
func (o *Options) Validate() error {
	if o.CoordinatorPub == "" {
		return errors.New("--coordinator-pub: required: the coordinator's public key (" + keydir.CoordinatorSignKey + ".pub, from `crowdlog keys export-public` of the coordinator's keys) authenticates rosters, ticks and commitments")
	}
	return nil
}

// Service reads the keys, the signing credential (created when
// missing) and the coordinator's public key, connects to NATS as the aggregator (connect; nil: o.NATS) and
// builds the service, which asks for recoveries through recoverer(nc,
// sign key) (the coordinator's client, coordinator.NATSRecoverer). The
// caller closes the connection after the service ends.
func (o *Options) Service(connect func() (*nats.Conn, error), recoverer func(*nats.Conn, ed25519.PrivateKey) Recoverer, log *slog.Logger) (*Service, *nats.Conn, error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	keys, err := keydir.LoadKeyPairs(o.KeyPaths)
	if err != nil {
		return nil, nil, err
	}
	sign, err := keydir.EnsureSigningKey(o.SignKey)
	if err != nil {
		return nil, nil, fmt.Errorf("--sign-key: %w", err)
	}
	coord, err := keydir.LoadSigningPublic(o.CoordinatorPub)
	if err != nil {
		return nil, nil, fmt.Errorf("--coordinator-pub: %w (the public half of the coordinator's --sign-key, %s.pub: import it with `crowdlog keys import-public`)", err, keydir.CoordinatorSignKey)
	}
	if connect == nil {
		connect = func() (*nats.Conn, error) { return o.NATS.Connect("crowdlog-aggregate-vectors", natsauth.Aggregator) }
	}
	nc, err := connect()
	if err != nil {
		return nil, nil, err
	}
	return &Service{Brokers: o.Kafka, Keys: keys, Recoverer: recoverer(nc, sign), Logger: log, ControlKey: coord, Campaigns: o.Campaigns}, nc, nil
}
