package relays

import (
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	inframetrics "github.com/crowdlog/crowdlog/infra/metrics"
)

// Stats counts a relay's work. All fields are atomic counters, safe to read
// while Run works; Snapshot copies them. A message redelivered after a
// failed forward is counted in In again.
type Stats struct {
	// In counts fetched messages.
	In atomic.Uint64
	// Forwarded counts messages whose forward succeeded (and were acked).
	Forwarded atomic.Uint64
	// Malformed counts dropped layers that failed framing or decryption
	// (random bytes, truncation, tampering, wrong version).
	Malformed atomic.Uint64
	// Oversized counts dropped layers longer than onion.MaxLayer.
	Oversized atomic.Uint64
	// UnknownKey counts dropped layers for a key id the relay does not hold.
	UnknownKey atomic.Uint64
	// WrongHop counts dropped layers whose instruction a relay must not
	// follow: HopDeliver, a HopRelay layer at the last relay or naming any
	// subject but the route's next relay (Relay.Next), or HopKafka /
	// HopKafkaVectors / HopKafkaPrio3 at a relay that is not the last or
	// has no writer.
	WrongHop atomic.Uint64
	// Replay counts dropped layers this process had already forwarded (or
	// was forwarding) within the replay window: same HPKE encapsulated key.
	Replay atomic.Uint64
	// ForwardFailures counts messages Nak'ed because their forward failed.
	ForwardFailures atomic.Uint64
	// KafkaRefused counts batches whose Kafka write failed (the broker
	// refused or was unreachable; crowdlog_relay_kafka_refused_total);
	// kafkaStreak the failures since the last success.
	KafkaRefused atomic.Uint64
	kafkaStreak  atomic.Uint64
	// Batches counts forwarded batches (pools), each shuffled as one set.
	Batches atomic.Uint64
	// TimeoutFlushes counts the batches forwarded because PoolTimeout
	// passed with fewer than PoolSize messages held (light load: those
	// batches mixed fewer than P messages).
	TimeoutFlushes atomic.Uint64
}

// StatsSnapshot is a point-in-time copy of Stats.
type StatsSnapshot struct {
	In, Forwarded, Malformed, Oversized, UnknownKey, WrongHop, Replay, ForwardFailures, KafkaRefused, Batches, TimeoutFlushes uint64
}

// Dropped is the number of dropped messages over all reasons.
func (s StatsSnapshot) Dropped() uint64 {
	return s.Malformed + s.Oversized + s.UnknownKey + s.WrongHop + s.Replay
}

// Snapshot copies the counters (each read atomically, not all at one instant).
func (s *Stats) Snapshot() StatsSnapshot {
	return StatsSnapshot{
		In: s.In.Load(), Forwarded: s.Forwarded.Load(), Malformed: s.Malformed.Load(),
		Oversized: s.Oversized.Load(), UnknownKey: s.UnknownKey.Load(), WrongHop: s.WrongHop.Load(), Replay: s.Replay.Load(),
		ForwardFailures: s.ForwardFailures.Load(), KafkaRefused: s.KafkaRefused.Load(), Batches: s.Batches.Load(), TimeoutFlushes: s.TimeoutFlushes.Load(),
	}
}

func (s *Stats) drop(r dropReason, n int) {
	switch r {
	case dropMalformed:
		s.Malformed.Add(uint64(n))
	case dropOversized:
		s.Oversized.Add(uint64(n))
	case dropUnknownKey:
		s.UnknownKey.Add(uint64(n))
	case dropWrongHop:
		s.WrongHop.Add(uint64(n))
	case dropReplay:
		s.Replay.Add(uint64(n))
	}
}

// metrics are the optional Prometheus collectors of one relay name. With a
// nil Registerer they are live but unregistered (cheap no-ops for callers).
type metrics struct {
	in        prometheus.Counter
	forwarded prometheus.Counter
	dropped   *prometheus.CounterVec
	batchSize prometheus.Histogram
	pool      prometheus.Histogram // a forwarded message's time from fetch to ack
	// kafkaRefused: forwards whose Kafka write failed
	kafkaRefused prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, name string, log *slog.Logger) *metrics {
	labels := prometheus.Labels{"relay": name}
	m := &metrics{
		in: prometheus.NewCounter(prometheus.CounterOpts{Name: "crowdlog_relay_reports_in_total",
			Help: "Onion layers fetched from the relay inbox.", ConstLabels: labels}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{Name: "crowdlog_relay_forwarded_total",
			Help: "Peeled layers forwarded to the next hop and acknowledged.", ConstLabels: labels}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "crowdlog_relay_dropped_total",
			Help: "Layers dropped by the relay, by reason.", ConstLabels: labels}, []string{"reason"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "crowdlog_relay_batch_size",
			Help: "Messages per forwarded batch (one pool: the mixing set size).", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		pool: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "crowdlog_relay_pool_latency_seconds",
			Help: "A forwarded message's time in the relay: from its fetch to its ack after the forward (pool hold, shuffle, forward).", ConstLabels: labels,
			Buckets: inframetrics.PoolBuckets}),
		kafkaRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "crowdlog_relay_kafka_refused_total",
			Help: "Forwarded batches whose Kafka write failed (refused by the broker or unreachable); the batch is redelivered.", ConstLabels: labels}),
	}
	if reg == nil {
		return m
	}
	m.in = register(reg, m.in, log)
	m.forwarded = register(reg, m.forwarded, log)
	m.dropped = register(reg, m.dropped, log)
	m.batchSize = register(reg, m.batchSize, log)
	m.pool = register(reg, m.pool, log)
	m.kafkaRefused = register(reg, m.kafkaRefused, log)
	for _, reason := range reasonNames {
		if reason != "" {
			m.dropped.WithLabelValues(reason) // export every reason from the start, at 0
		}
	}
	return m
}

// register registers c, or returns the already registered collector of the
// same relay (several Relays with one Name in one process).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log *slog.Logger) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	log.Warn("prometheus metric not registered", "err", err)
	return c
}

func (m *metrics) drop(r dropReason, n int) {
	m.dropped.WithLabelValues(reasonNames[r]).Add(float64(n))
}
