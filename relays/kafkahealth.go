package relays

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// Persistent Kafka refusals at the last relay. A relay never drops a peeled
// layer because Kafka refused it: the layer stays unacknowledged in the
// relay's inbox and is fetched again after a backoff, for ever. What an
// operator needs is to hear of it: every refused message is counted by
// reason (Stats.KafkaRefused, crowdlog_relay_kafka_refused_total{reason}),
// the relay logs an ERROR once refusals persist (KafkaRefusalsError
// consecutive refused produce calls to one topic, or KafkaRefusalsAfter
// since the first of them, whichever comes first; again every
// KafkaRefusalsAfter while they last) and Relay.KafkaErr, the readiness
// check "kafka_writes" of `crowdlog relay`, fails until a produce call to
// that topic succeeds.
const (
	// DefaultKafkaRefusalsError is the default Relay.KafkaRefusalsError:
	// 5 consecutive refused produce calls.
	DefaultKafkaRefusalsError = 5
	// DefaultKafkaRefusalsAfter is the default Relay.KafkaRefusalsAfter:
	// one minute of nothing but refusals.
	DefaultKafkaRefusalsAfter = time.Minute
	// MaxKafkaBackoff bounds the redelivery delay of layers Kafka refused:
	// the delay is Relay.NakDelay doubled per consecutive refused produce
	// call, at most 30 s, so a relay whose writes are refused neither spins
	// (a peel per layer per retry) nor waits long once Kafka accepts again.
	MaxKafkaBackoff = 30 * time.Second
)

// Reasons of crowdlog_relay_kafka_refused_total (kafkaReason).
const (
	// KafkaRefusedAuthorization: the broker refused the relay's principal
	// (Kafka error codes 29 TOPIC_AUTHORIZATION_FAILED, 31
	// CLUSTER_AUTHORIZATION_FAILED, 58 SASL_AUTHENTICATION_FAILED): fix
	// the ACLs (`crowdlog acls`) or the relay's credential.
	KafkaRefusedAuthorization = "authorization"
	// KafkaRefusedUnknownTopic: the topic does not exist (code 3
	// UNKNOWN_TOPIC_OR_PARTITION): run `crowdlog topics`. A broker also
	// answers so for a topic the principal may not describe (kfake does):
	// check the ACLs too.
	KafkaRefusedUnknownTopic = "unknown_topic"
	// KafkaRefusedTooLarge: a record over the topic's max.message.bytes
	// (code 10 MESSAGE_TOO_LARGE): run `crowdlog topics`, which sets it.
	KafkaRefusedTooLarge = "message_too_large"
	// KafkaRefusedTimeout: no answer within Relay.ForwardTimeout, or the
	// brokers unreachable.
	KafkaRefusedTimeout = "timeout"
	// KafkaRefusedOther: any other error.
	KafkaRefusedOther = "other"
)

var kafkaReasons = []string{KafkaRefusedAuthorization, KafkaRefusedUnknownTopic, KafkaRefusedTooLarge, KafkaRefusedTimeout, KafkaRefusedOther}

// kafkaReason classifies a failed WriteMessages error (kafka-go returns a
// kafka.WriteErrors with one error per message, or one error for all).
func kafkaReason(err error) string {
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil {
				err = e
				break
			}
		}
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafka.TopicAuthorizationFailed, kafka.ClusterAuthorizationFailed, kafka.SASLAuthenticationFailed,
			kafka.GroupAuthorizationFailed, kafka.TransactionalIDAuthorizationFailed:
			return KafkaRefusedAuthorization
		case kafka.UnknownTopicOrPartition:
			return KafkaRefusedUnknownTopic
		case kafka.MessageSizeTooLarge:
			return KafkaRefusedTooLarge
		case kafka.RequestTimedOut, kafka.NotEnoughReplicas, kafka.NotEnoughReplicasAfterAppend, kafka.LeaderNotAvailable:
			return KafkaRefusedTimeout
		}
		return KafkaRefusedOther
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return KafkaRefusedTimeout
	}
	return KafkaRefusedOther
}

// The relay's Kafka writers, tracked apart (kafkaHealths): one writer
// accepting must not hide that another is refused for good.
const (
	writerReports = iota // Relay.Kafka, topic "reports"
	writerVectors        // Relay.Vectors, topic "vectors"
	writerPrio3          // Relay.Prio3, topic "prio3-uploads"
	numWriters
)

var writerNames = [numWriters]string{"reports", "vectors", "prio3-uploads"}

// kafkaHealths tracks each writer's consecutive refused produce calls. The
// zero value is healthy.
type kafkaHealths struct {
	mu sync.Mutex
	w  [numWriters]kafkaHealth
}

// kafkaHealth is one writer's run of refusals.
type kafkaHealth struct {
	consecutive int       // refused produce calls since the last success
	first       time.Time // the first of them
	lastErr     error
	reason      string
	alarm       bool      // an ERROR was logged for this run of refusals
	loggedAt    time.Time // when
}

// refused records one refused produce call of n messages and returns the
// redelivery delay for them: base doubled per consecutive refusal, at most
// MaxKafkaBackoff (never below base).
func (r *Relay) kafkaRefused(writer int, err error, n int, base time.Duration, mx *metrics, log *slog.Logger) time.Duration {
	reason := kafkaReason(err)
	r.Stats.KafkaRefused.Add(uint64(n))
	mx.kafkaRefused.WithLabelValues(reason).Add(float64(n))
	r.kafka.mu.Lock()
	defer r.kafka.mu.Unlock()
	h := &r.kafka.w[writer]
	now := time.Now()
	if h.consecutive == 0 {
		h.first = now
	}
	h.consecutive++
	h.lastErr, h.reason = err, reason
	after := def(r.KafkaRefusalsAfter, DefaultKafkaRefusalsAfter)
	persistent := h.consecutive >= def(r.KafkaRefusalsError, DefaultKafkaRefusalsError) || now.Sub(h.first) >= after
	if persistent && (!h.alarm || now.Sub(h.loggedAt) >= after) {
		h.alarm, h.loggedAt = true, now
		mx.kafkaRefusing.Set(1)
		log.Error("Kafka keeps refusing the relay's writes; the layers stay in the relay's inbox and are retried, none is lost (check the topic exists and the relay's ACLs: `crowdlog topics`, `crowdlog acls`)",
			"topic", writerNames[writer], "reason", reason, "consecutive_refusals", h.consecutive, "since", h.first.UTC().Format(time.RFC3339), "err", err)
	}
	d := base
	for i := 1; i < h.consecutive && d < MaxKafkaBackoff; i++ {
		d *= 2
	}
	return max(min(d, MaxKafkaBackoff), base)
}

// kafkaAccepted records a successful produce call: refusals end.
func (r *Relay) kafkaAccepted(writer int, mx *metrics, log *slog.Logger) {
	r.kafka.mu.Lock()
	defer r.kafka.mu.Unlock()
	h := &r.kafka.w[writer]
	if h.consecutive == 0 {
		return
	}
	if h.alarm {
		log.Info("Kafka accepts the relay's writes again", "topic", writerNames[writer], "after_refusals", h.consecutive, "since", h.first.UTC().Format(time.RFC3339))
	}
	*h = kafkaHealth{}
	for _, o := range r.kafka.w {
		if o.alarm {
			return
		}
	}
	mx.kafkaRefusing.Set(0)
}

// KafkaErr is the relay's Kafka write health, safe to call while Run
// works: nil unless refusals persist (KafkaRefusalsError consecutive
// refused produce calls or KafkaRefusalsAfter since the first, until the
// next accepted one) at any of its writers; then an error naming the topic, naming the reason, the count and the
// last broker error. `crowdlog relay` serves it as readiness check
// "kafka_writes" (/readyz).
func (r *Relay) KafkaErr() error {
	r.kafka.mu.Lock()
	defer r.kafka.mu.Unlock()
	for i, h := range r.kafka.w {
		if h.alarm {
			return fmt.Errorf("relays: Kafka refused %d produce calls to topic %s in a row since %s (%s): %w; the layers wait in the inbox (check `crowdlog topics` and `crowdlog acls`)",
				h.consecutive, writerNames[i], h.first.UTC().Format(time.RFC3339), h.reason, h.lastErr)
		}
	}
	return nil
}

func newKafkaMetrics(m *metrics, labels prometheus.Labels) {
	m.kafkaRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "crowdlog_relay_kafka_refused_total",
		Help: "Messages whose Kafka produce failed (kept in the inbox and retried), by reason: authorization, unknown_topic, message_too_large, timeout, other.", ConstLabels: labels}, []string{"reason"})
	m.kafkaRefusing = prometheus.NewGauge(prometheus.GaugeOpts{Name: "crowdlog_relay_kafka_refusing",
		Help: "1 while Kafka refusals persist (the relay logged an ERROR and /readyz fails), else 0.", ConstLabels: labels})
}
