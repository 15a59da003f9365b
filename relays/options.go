package relays

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
)

// Help is the long help of `crowdlog relay`.
const Help = `relay consumes its subject crowdlog.relay.NAME (a JetStream work queue: more
processes with the same --name and key = more capacity), peels its HPKE
layer and holds the peeled messages in a pool: once --pool messages are
held, or --pool-timeout after the oldest arrived, it shuffles them with
crypto randomness and forwards each to the next hop of the route (relay a:
only relay b; relay b: only Kafka topic "reports", keyed by a 1-byte tag
bucket). Messages are acknowledged only after forwarding (at-least-once): a
relay killed mid-pool loses nothing. Malformed, oversized, wrong-key,
wrong-hop and replayed messages are counted and dropped. Messages Kafka
refuses (ACLs, a missing topic) stay in the inbox and are retried with a
backoff of at most 30 s, counted in crowdlog_relay_kafka_refused_total;
once refusals persist (5 in a row or 1 min) the relay logs an ERROR and
its readiness check kafka_writes fails until Kafka accepts again. A larger pool or
timeout means larger anonymity sets and more latency (docs/threat-model.md,
"Mixing").`

// Options are the flags of one relay process (`crowdlog relay`): its
// Config, the NATS connection and the Go GC target. NewOptions gives the
// defaults; a relay without a name or key is refused (Validate).
type Options struct {
	Relay Config
	NATS  natsconn.Options
	// GCPercent is the Go GC target percent (GOGC, which wins when set);
	// 0 leaves the runtime's.
	GCPercent int
}

// NewOptions returns a relay's defaults (DefaultBatchSize and the other
// Default values, the local Kafka broker), without a name or key.
func NewOptions() *Options {
	return &Options{GCPercent: DefaultGCPercent, Relay: Config{Kafka: []string{infrakafka.DefaultBroker},
		BatchSize: DefaultBatchSize, BatchTimeout: DefaultBatchTimeout, PoolSize: DefaultPoolSize,
		PoolTimeout: DefaultPoolTimeout, AckWait: DefaultAckWait}}
}

// AddFlags adds the relay's flags to f, with o's values as defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Relay.Name, "name", o.Relay.Name, "relay name: its subject is crowdlog.relay.NAME")
	f.StringSliceVar(&o.Relay.KeyPaths, "key", o.Relay.KeyPaths, "HPKE key file (repeat for two keys during a rotation)")
	o.NATS.AddFlags(f, "NATS URL; a comma-separated list for a cluster")
	f.StringSliceVar(&o.Relay.Kafka, "kafka", o.Relay.Kafka, "Kafka bootstrap brokers, comma-separated host:port list (used by the last relay)")
	f.IntVar(&o.Relay.BatchSize, "batch", o.Relay.BatchSize, "most messages per fetch from the inbox")
	f.DurationVar(&o.Relay.BatchTimeout, "batch-timeout", o.Relay.BatchTimeout, "longest wait of one fetch (poll interval; --pool-timeout decides when to forward)")
	f.IntVar(&o.Relay.PoolSize, "pool", o.Relay.PoolSize, "forward once this many peeled messages are held (P: the least anonymity set when at least P per --pool-timeout arrive)")
	f.DurationVar(&o.Relay.PoolTimeout, "pool-timeout", o.Relay.PoolTimeout, "forward what is held this long after the oldest held message arrived, even below --pool (T: bounds each message's wait); --ack-wait must be at least twice this")
	f.StringVar(&o.Relay.Next, "next", o.Relay.Next, `next hop on the route: empty = relay b for relay a, Kafka for any other; "." = last hop (Kafka only)`)
	f.DurationVar(&o.Relay.AckWait, "ack-wait", o.Relay.AckWait, "redeliver a message this long after a relay took it without acknowledging (crash); applies where the relay creates its consumer (no permission table): otherwise the admin step's `crowdlog streams --relay-ack-wait` sets it")
	f.IntVar(&o.GCPercent, "gogc", o.GCPercent, "Go GC target percent (as GOGC; the GOGC environment variable, when set, wins): higher trades memory for less collector CPU")
}

// Validate errors when the relay has no name or no key file.
func (o *Options) Validate() error {
	if o.Relay.Name == "" {
		return errors.New("--name is required (a or b)")
	}
	if len(o.Relay.KeyPaths) == 0 {
		return errors.New("--key is required (see `crowdlog keys generate`)")
	}
	return nil
}

// Config validates o and returns the relay's Config (for New).
func (o *Options) Config() (Config, error) {
	return o.Relay, o.Validate()
}

// Connect connects to NATS with the relay's credential.
func (o *Options) Connect() (*nats.Conn, error) {
	return o.NATS.Connect("crowdlog-relay-"+o.Relay.Name, natsauth.RelayRole(o.Relay.Name))
}

// ToKafka reports whether the relay forwards to Kafka (as Relay.Next
// resolves: LastHop or, when Next is empty, no next relay after its name).
func (c Config) ToKafka() bool {
	switch c.Next {
	case LastHop:
		return true
	case "":
		return RouteNext(c.Name) == ""
	}
	return false
}

// Start connects to NATS with the relay's credential (Connect) and builds
// the relay of cfg (New). stop closes its Kafka writers, then the
// connection.
func (o *Options) Start(ctx context.Context, cfg Config, log *slog.Logger) (r *Relay, nc *nats.Conn, stop func(), err error) {
	if nc, err = o.Connect(); err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	r, closeW, err := New(ctx, js, cfg, log)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return r, nc, func() { closeW(); nc.Close() }, nil
}
