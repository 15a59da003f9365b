package relays

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsconn"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// Config configures one relay process (Options.Config builds it from flags).
type Config struct {
	Name         string        // "a" or "b": the relay's subject is protocol.RelaySubject(Name)
	KeyPaths     []string      // HPKE key files; two during a rotation
	Kafka        []string      // brokers, for the last hop
	BatchSize    int           // most messages per fetch; 0 = DefaultBatchSize
	BatchTimeout time.Duration // longest wait of one fetch; 0 = DefaultBatchTimeout
	MaxMsgs      int64         // stream bound (backpressure); 0 = default
	AckWait      time.Duration // redelivery after a crashed relay; 0 = DefaultAckWait; at least 2×PoolTimeout
	// PoolSize (P) and PoolTimeout (T): forward when P peeled messages are
	// held or T after the oldest arrived (Relay.PoolSize: anonymity set
	// against latency); 0 = DefaultPoolSize, DefaultPoolTimeout.
	PoolSize    int
	PoolTimeout time.Duration
	// Next is the relay this one forwards to on the route (Relay.Next):
	// "" = RouteNext(Name) (b after a; Kafka after b), LastHop = Kafka.
	Next string
}

// produceBatchSize is the most messages in one produce batch per partition.
// kafka-go allocates a batch's message slice at this capacity (about 160 B
// a message) for every batch it starts, and a relay starts up to one per
// partition per forwarded pool: at 10,000 that was 1.6 MB allocated and
// zeroed per partition per pool, 14% of relay b's CPU in its profile. A
// pool rarely holds more than PoolSize + BatchSize messages (1,088 with
// the defaults), spread over the partitions; a larger share of one
// partition is split into several produce requests of the same call.
const produceBatchSize = 1024

// maxBatchBytes bounds one produce batch of a relay's Kafka writers, below
// Kafka's default max.message.bytes of 1,048,588.
const maxBatchBytes = 1_000_000

// prio3BatchBytes bounds one produce batch of the Prio3 uploads writer: it
// holds one upload of the largest size class (onion.MaxLayer bytes plus the
// key and record framing) and stays under the 2 MiB max.message.bytes that
// `crowdlog topics` gives topic prio3-uploads (infra/kafka.TopicMaxMessageBytes).
const prio3BatchBytes = 2_000_000

// New builds a relay service connected to js and Kafka.
func New(ctx context.Context, js jetstream.JetStream, o Config, log *slog.Logger) (*Relay, func(), error) {
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
	// the stream exists (the admin step, `crowdlog streams`, created it);
	// a relay looks it up and never changes it
	if _, err := natsconn.OpenStream(ctx, js, StreamConfig(maxMsgs, natsconn.Replicas(js.Conn()))); err != nil {
		return nil, nil, fmt.Errorf("relays: %w", err)
	}
	// BatchBytes stays under Kafka's default max.message.bytes (1,048,588):
	// a pool forwards up to P messages at once, and one produce batch per
	// partition above that limit is refused whole ("Message Size Too Large").
	w := &kafka.Writer{Addr: kafka.TCP(o.Kafka...), Topic: protocol.ReportsTopic, Transport: infrakafka.Transport(ctx),
		Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond,
		BatchSize: produceBatchSize, BatchBytes: maxBatchBytes}
	// PDD blinded vectors (HopKafkaVectors), keyed by group
	vw := &kafka.Writer{Addr: kafka.TCP(o.Kafka...), Topic: protocol.VectorsTopic, Transport: infrakafka.Transport(ctx),
		Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond,
		BatchSize: produceBatchSize, BatchBytes: maxBatchBytes}
	// Prio3 uploads (HopKafkaPrio3), keyed by campaign
	pw := &kafka.Writer{Addr: kafka.TCP(o.Kafka...), Topic: protocol.Prio3UploadsTopic, Transport: infrakafka.Transport(ctx),
		Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond,
		BatchSize: produceBatchSize, BatchBytes: prio3BatchBytes}
	r := &Relay{Name: o.Name, Keys: keys, JS: js, Kafka: w, Vectors: vw, Prio3: pw, BatchSize: o.BatchSize,
		BatchTimeout: o.BatchTimeout, AckWait: o.AckWait, PoolSize: o.PoolSize, PoolTimeout: o.PoolTimeout,
		Next: o.Next, Logger: log, Stats: &Stats{}}
	return r, func() { infrakafka.CloseWriter(w); infrakafka.CloseWriter(vw); infrakafka.CloseWriter(pw) }, nil
}
