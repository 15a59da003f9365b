package vectors

import (
	"crypto/ed25519"
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
// signs its recovery requests and its NATS connection to the coordinator.
type Options struct {
	Kafka    []string // bootstrap brokers, host:port
	KeyPaths []string // HPKE key files (two during a rotation); required
	SignKey  string   // the Ed25519 credential (PEM), created when missing
	NATS     natsconn.Options
}

// DefaultOptions returns the options of `crowdlog aggregate-vectors`
// without flags.
func DefaultOptions() Options {
	return Options{Kafka: []string{infrakafka.DefaultBroker}, SignKey: "keys/" + keydir.AggregatorSignKey}
}

// AddFlags adds the flags of `crowdlog aggregate-vectors` to f, filling o.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&o.KeyPaths, "key", o.KeyPaths, "aggregator HPKE key file (repeat during a rotation)")
	f.StringVar(&o.SignKey, "sign-key", o.SignKey, "the aggregator's Ed25519 credential (PEM; created when missing): signs recovery requests")
	o.NATS.AddFlags(f, "NATS URL(s) of the coordinator, comma-separated")
	f.StringSliceVar(&o.Kafka, "kafka", o.Kafka, "Kafka bootstrap brokers, comma-separated")
}

// Validate checks what needs no file; every field may be checked only
// when read (Service).
func (o *Options) Validate() error { return nil }

// Service reads the keys and the signing credential (created when
// missing), connects to NATS as the aggregator (connect; nil: o.NATS) and
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
	if connect == nil {
		connect = func() (*nats.Conn, error) { return o.NATS.Connect("crowdlog-aggregate-vectors", natsauth.Aggregator) }
	}
	nc, err := connect()
	if err != nil {
		return nil, nil, err
	}
	return &Service{Brokers: o.Kafka, Keys: keys, Recoverer: recoverer(nc, sign), Logger: log}, nc, nil
}
