// Package relays is the relay/mix service (RFC 9180 onion layers, batch + shuffle): each relay
// peels one HPKE onion layer (RFC 9180, onion.Peel) from the reports
// addressed to it, batches and shuffles them (so arrival order does not link
// a forwarded report to its sender), and forwards the inner layers either to
// the next relay over NATS JetStream or to the aggregator's Kafka topic.
//
// Transport: one JetStream work-queue stream (Stream) holds the inbox of every
// relay, one subject per relay name (Subject). A relay is a durable pull
// consumer "relay-<name>" on its subject; several processes running the same
// name share that consumer, so adding processes adds capacity. Messages are
// acknowledged only after their forward succeeded (at-least-once; the
// aggregator deduplicates by report id). Per-subject limits with DiscardNew
// give backpressure: when a relay falls behind, whoever publishes to it gets
// "maximum messages per subject exceeded" and retries.
package relays

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// Stream is the name of the JetStream stream holding all relay inboxes.
const Stream = protocol.RelayStream

// DefaultMaxMsgs is the per-relay inbox limit EnsureStream uses for maxMsgs <= 0.
const DefaultMaxMsgs = 1_000_000

// HeaderAllowance is the room, in bytes, the stream's MaxMsgSize leaves for
// NATS headers (the Nats-Msg-Id deduplication header) on top of
// onion.MaxLayer: JetStream counts headers against MaxMsgSize.
const HeaderAllowance = 256

// DuplicateWindow is the stream's deduplication window: a layer re-published
// within it (a publisher retry after a lost ack, or a relay re-forwarding
// after a crash) is stored once, keyed by MsgID.
const DuplicateWindow = 2 * time.Minute

// ConsumerName returns the durable consumer name shared by all processes of
// relay name: "relay-" + name.
func ConsumerName(name string) string { return protocol.RelayConsumerName(name) }

// ValidName reports whether name can name a relay: 1–64 characters from
// [A-Za-z0-9_-] (one NATS subject token, usable in a durable name).
func ValidName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// StreamConfig returns the configuration EnsureStream applies, with
// maxMsgs (<= 0 means DefaultMaxMsgs) as the limit of each relay's inbox
// and replicas (<= 0 means 1) copies of the stream (JetStream clustering:
// with 3, the stream survives the loss of one NATS server).
//
// The limit is per subject (MaxMsgsPerSubject with DiscardNewPerSubject),
// not on the whole stream: with one stream-wide limit, a full inbox of relay
// A would also stop A from forwarding into relay B's inbox, and A could never
// drain (deadlock). Total size is therefore bounded by maxMsgs times the
// number of relay subjects in use.
func StreamConfig(maxMsgs int64, replicas int) jetstream.StreamConfig {
	if maxMsgs <= 0 {
		maxMsgs = DefaultMaxMsgs
	}
	if replicas <= 0 {
		replicas = 1
	}
	return jetstream.StreamConfig{
		Name:                 Stream,
		Description:          "crowdlog relay inboxes (onion layers); one subject per relay",
		Subjects:             []string{protocol.RelaySubjectPrefix + ">"},
		Retention:            jetstream.WorkQueuePolicy,
		Storage:              jetstream.FileStorage,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		MaxMsgs:              -1,
		MaxMsgsPerSubject:    maxMsgs,
		MaxBytes:             -1,
		MaxAge:               0,
		MaxMsgSize:           onion.MaxLayer + HeaderAllowance,
		Duplicates:           DuplicateWindow,
		Replicas:             replicas,
	}
}

// AccountStreamConfig is StreamConfig for the relay stream of relay name
// in an account of its own (natsauth: one account per role): it captures
// only Subject(name). A stream capturing every relay subject in relay a's
// account would also capture relay a's forwards to relay b, which reach
// relay b's account through a service import.
func AccountStreamConfig(name string, maxMsgs int64, replicas int) jetstream.StreamConfig {
	cfg := StreamConfig(maxMsgs, replicas)
	cfg.Description = "crowdlog relay " + name + "'s inbox (onion layers)"
	cfg.Subjects = []string{protocol.RelaySubject(name)}
	return cfg
}

// ConsumerConfig returns the durable pull consumer of relay name on its
// inbox: filtered to Subject(name), explicit acks after each forward,
// ackWait (<= 0: DefaultAckWait) and maxAckPending (<= 0:
// DefaultConsumerMaxAckPending) unacknowledged messages at most, every
// message from the start, redelivered without limit.
func ConsumerConfig(name string, ackWait time.Duration, maxAckPending int) jetstream.ConsumerConfig {
	if ackWait <= 0 {
		ackWait = DefaultAckWait
	}
	if maxAckPending <= 0 {
		maxAckPending = DefaultConsumerMaxAckPending
	}
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName(name),
		Description:   "crowdlog relay " + name,
		FilterSubject: protocol.RelaySubject(name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: maxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// DefaultConsumerMaxAckPending is the MaxAckPending of a relay consumer
// the admin step creates: room for a full pool of DefaultPoolSize plus a
// fetch being peeled and a batch being forwarded, with a margin for
// several processes (at least DefaultMaxAckPending).
var DefaultConsumerMaxAckPending = max(DefaultMaxAckPending, 4*(DefaultPoolSize+2*DefaultBatchSize))

// EnsureConsumer creates relay name's durable consumer on js's relay
// stream, or brings it to ConsumerConfig(name, ackWait, 0) (ackWait <= 0:
// DefaultAckWait; it must be at least twice the relays' --pool-timeout):
// the admin step's (`crowdlog streams`); with the permission table on no
// relay may create or change its consumer. Errors wrap the JetStream error.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, name string, ackWait time.Duration) error {
	cfg := ConsumerConfig(name, ackWait, 0)
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		actx, cancel := context.WithTimeout(ctx, natsconn.StreamAttemptTimeout)
		_, err = js.CreateOrUpdateConsumer(actx, Stream, cfg)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(20*(attempt+1)) * time.Millisecond):
		}
	}
	return fmt.Errorf("relays: consumer %s on stream %s: %w", cfg.Durable, Stream, err)
}

// EnsureStream creates or updates the relay stream (StreamConfig(maxMsgs,
// replicas)). It is idempotent and safe to call from several processes at
// once; the last caller's maxMsgs wins. A new stream gets
// Replicas(js.Conn()) copies (1 on a single server, 3 on a cluster of 3 or
// more); an existing stream keeps its replica count, so a process that sees
// fewer servers never scales it down (change it with the nats CLI). Errors
// wrap the JetStream error and say whether JetStream is reachable.
func EnsureStream(ctx context.Context, js jetstream.JetStream, maxMsgs int64) error {
	if js == nil {
		return errors.New("relays: EnsureStream: nil JetStream")
	}
	if err := natsconn.EnsureStream(ctx, js, StreamConfig(maxMsgs, natsconn.StreamReplicas(ctx, js, Stream))); err != nil {
		return fmt.Errorf("relays: %w", err)
	}
	return nil
}

// Drained reports whether the inboxes of all named relays are empty: for
// each name, its consumer (if it exists) has NumPending == 0 and
// NumAckPending == 0, and the stream holds no message on Subject(name).
// Pass names in route order (first hop first) and call it after the
// publishers flushed: a relay's messages are acknowledged only after they
// reached the next hop, so a true answer then means everything reached Kafka.
// js holds every relay's inbox (one account); DrainedEach asks each
// relay's own account.
func Drained(ctx context.Context, js jetstream.JetStream, names ...string) (bool, error) {
	return DrainedEach(ctx, func(string) jetstream.JetStream { return js }, names...)
}

// DrainedEach is Drained where relay name's stream and consumer are
// reached through jsOf(name): with one account per role, the operator's
// import of that relay's account (natsconn.AccountJetStream).
func DrainedEach(ctx context.Context, jsOf func(name string) jetstream.JetStream, names ...string) (bool, error) {
	for _, n := range names {
		js := jsOf(n)
		st, err := js.Stream(ctx, Stream)
		if err != nil {
			return false, fmt.Errorf("relays: stream %s of relay %s: %w (run `crowdlog streams` first)", Stream, n, err)
		}
		c, err := js.Consumer(ctx, Stream, ConsumerName(n))
		switch {
		case err == nil:
			info, err := c.Info(ctx)
			if err != nil {
				return false, fmt.Errorf("relays: consumer %s: %w", ConsumerName(n), err)
			}
			if info.NumPending > 0 || info.NumAckPending > 0 {
				return false, nil
			}
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			// no relay ran yet; the subject count below decides
		default:
			return false, fmt.Errorf("relays: consumer %s: %w", ConsumerName(n), err)
		}
		subj := protocol.RelaySubject(n)
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			return false, fmt.Errorf("relays: stream %s: %w", Stream, err)
		}
		if info.State.Subjects[subj] > 0 {
			return false, nil
		}
	}
	return true, nil
}

// validForward reports whether subj is a subject a relay named self may
// forward to: under SubjectPrefix, one valid relay-name token, not self.
func validForward(subj, self string) bool {
	name, ok := strings.CutPrefix(subj, protocol.RelaySubjectPrefix)
	return ok && ValidName(name) && name != self
}
