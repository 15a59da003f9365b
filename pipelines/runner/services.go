// Package runner starts crowdlog's roles — randomness, relays, aggregator,
// release — against given service addresses, and runs the whole pipeline in
// one process for `crowdlog run` (DESIGN "Data flow"). The same functions back
// the per-role subcommands, so one machine and a cluster share one code path.
package runner

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/randomness"
	"github.com/crowdlog/crowdlog/relays"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/stage"
)

// RunRandomness builds the OPRF randomness service on the epoch key
// directory keysDir/randomness.keys (RandomnessKeys) with options o
// (schedule, grace; o.LegacyClosed defaults to the older layout's
// keysDir/randomness.seed.closed). A leftover randomness.seed of the older
// layout is no longer used and is reported. Call Run on the result.
func RunRandomness(ctx context.Context, nc *nats.Conn, keysDir string, o randomness.Options, log *slog.Logger) (*randomness.Service, error) {
	if o.LegacyClosed == "" {
		o.LegacyClosed = filepath.Join(keysDir, RandomnessSeed+".closed")
	}
	if o.Logger == nil {
		o.Logger = log
	}
	if _, err := os.Stat(filepath.Join(keysDir, RandomnessSeed)); err == nil {
		log.Warn("randomness: the seed file of the older layout is no longer used (epoch keys are stored per epoch now); delete it once its epochs are over: it can derive all their keys",
			"seed", filepath.Join(keysDir, RandomnessSeed), "key_dir", filepath.Join(keysDir, RandomnessKeys))
	}
	keys, err := randomness.Open(filepath.Join(keysDir, RandomnessKeys), o)
	if err != nil {
		return nil, err
	}
	s := &randomness.Service{NC: nc, Keys: keys, Logger: log}
	return s, nil
}

// RelayOptions configure one relay process.
type RelayOptions struct {
	Name         string        // "a" or "b": the relay's subject is relays.Subject(Name)
	KeyPaths     []string      // HPKE key files; two during a rotation
	Kafka        []string      // brokers, for the last hop
	BatchSize    int           // mix batch size
	BatchTimeout time.Duration // mix batch timeout
	MaxMsgs      int64         // stream bound (backpressure); 0 = default
	AckWait      time.Duration // redelivery after a crashed relay; 0 = relays.DefaultAckWait
}

// NewRelay builds a relay service connected to js and Kafka.
func NewRelay(ctx context.Context, js jetstream.JetStream, o RelayOptions, log *slog.Logger) (*relays.Relay, func(), error) {
	var keys []*onion.KeyPair
	for _, p := range o.KeyPaths {
		k, err := onion.LoadKeyPair(p)
		if err != nil {
			return nil, nil, err
		}
		keys = append(keys, k)
	}
	maxMsgs := o.MaxMsgs
	if maxMsgs <= 0 {
		maxMsgs = 1_000_000
	}
	if err := relays.EnsureStream(ctx, js, maxMsgs); err != nil {
		return nil, nil, err
	}
	w := &kafka.Writer{Addr: kafka.TCP(o.Kafka...), Topic: protocol.ReportsTopic, Transport: &kafka.Transport{},
		Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond,
		BatchSize: 10000, BatchBytes: 64 << 20}
	// PDD blinded vectors (HopKafkaVectors), keyed by group
	vw := &kafka.Writer{Addr: kafka.TCP(o.Kafka...), Topic: protocol.VectorsTopic, Transport: &kafka.Transport{},
		Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond,
		BatchSize: 1000, BatchBytes: 64 << 20}
	r := &relays.Relay{Name: o.Name, Keys: keys, JS: js, Kafka: w, Vectors: vw, BatchSize: o.BatchSize,
		BatchTimeout: o.BatchTimeout, AckWait: o.AckWait, Logger: log, Stats: &relays.Stats{}}
	return r, func() { w.Close(); vw.Close() }, nil
}

// NewAggregator builds the aggregator service with the key files.
func NewAggregator(brokers []string, keyPaths []string, log *slog.Logger) (*aggregator.Service, error) {
	var keys []*onion.KeyPair
	for _, p := range keyPaths {
		k, err := onion.LoadKeyPair(p)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return &aggregator.Service{Brokers: brokers, Keys: keys, Logger: log}, nil
}

// NewRelease opens ClickHouse at addr (creating the schema) and builds the
// release stage.
func NewRelease(ctx context.Context, brokers []string, clickhouse, database string, log *slog.Logger) (*stage.Stage, *release.Writer, error) {
	w, err := release.Open(ctx, clickhouse, database)
	if err != nil {
		return nil, nil, fmt.Errorf("open ClickHouse at %s: %w", clickhouse, err)
	}
	return &stage.Stage{Brokers: brokers, Sink: w, Logger: log}, w, nil
}
