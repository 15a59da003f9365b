package relays

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// KafkaRefusedErrorAfter is how many forwards in a row must fail on Kafka
// before the relay logs them at Error rather than Warn.
const KafkaRefusedErrorAfter = 5

// KafkaWriter is where a relay produces HopKafka layers; *kafka.Writer
// satisfies it. WriteMessages must return only after the messages are
// acknowledged by the broker (kafka-go's synchronous mode), and an error if
// any of them was not.
type KafkaWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Relay defaults.
const (
	// DefaultBatchSize is the most messages one fetch takes. 1,024 rather
	// than 256: relay b forwarded 24k msgs/s instead of 9.5k (wall, 2
	// cores) at 10% less CPU per message (BenchmarkBoundRelay), since a
	// fetch, a Kafka produce call and its 2 ms batch timeout are paid per
	// batch. Latency is the same (a fetch returns after BatchTimeout at
	// most), and a larger fetch forwards larger pools.
	DefaultBatchSize = 1024
	// DefaultFetchMaxBytes bounds the bytes of one fetch (JetStream's pull
	// max_bytes): 16 MiB. 1,024 STAR reports (layers of ≤ 1,536 bytes)
	// are 1.5 MiB and never meet it; 1,024 Prio3 uploads of the
	// 786,944-byte class would be 806 MB held at once, and twice that once
	// peeled, so a fetch of those stops at about 21.
	DefaultFetchMaxBytes = 16 << 20
	// MinFetchMaxBytes is the least Relay.FetchMaxBytes: 2 MiB, the NATS
	// max_payload of crowdlog's servers, so that any message the stream
	// holds (onion.MaxLayer plus headers) fits one fetch; a smaller bound
	// would leave a large layer unfetchable for ever.
	MinFetchMaxBytes      = 2 << 20
	DefaultBatchTimeout   = 50 * time.Millisecond
	DefaultAckWait        = 30 * time.Second
	DefaultNakDelay       = 500 * time.Millisecond
	DefaultForwardTimeout = 30 * time.Second
	DefaultMaxAckPending  = 1 << 16
	// DefaultPoolSize and DefaultPoolTimeout are the threshold-and-timeout
	// pool's P and T (Relay.PoolSize, Relay.PoolTimeout): a batch is
	// forwarded once 64 peeled messages are held, or 1 s after the oldest
	// held one arrived. At 64 messages per second or more every batch
	// mixes at least 64; below that a batch holds what arrived within 1 s.
	DefaultPoolSize    = 64
	DefaultPoolTimeout = time.Second
	// MalformedDeliveries is the delivery at which a layer that does not
	// peel is terminated and counted as "malformed"; earlier deliveries
	// are retried after NakDelay. Garbage thus costs two peels, and a
	// genuine layer survives one transient failure to open.
	MalformedDeliveries = 2
	// DefaultGCPercent is the Go GC target `crowdlog relay` sets (its
	// --gogc flag; the GOGC environment variable, when set, wins). A relay's
	// live heap is a few MB (a pool and a fetch of ≤ 1,536-byte layers),
	// and each peel allocates ≈ 7 KB inside circl's HPKE, so at Go's
	// default of 100 the collector ran every few hundred messages and
	// took ≈ 13% of relay b's CPU (BenchmarkBoundRelay: 65 → 57 µs per
	// message at 400). 400 lets the heap grow to five times the live heap,
	// still tens of MB.
	DefaultGCPercent = 400
)

// Relay is one relay/mix process (RFC 9180 onion layers). Set the fields, then
// call Run. Several Relays (goroutines or processes) with the same Name
// share one durable consumer and split its inbox.
type Relay struct {
	// Name identifies the relay; its inbox is Subject(Name). Required,
	// see ValidName.
	Name string
	// Keys are the relay's HPKE key pairs; a layer is peeled with the one
	// whose ID matches its key id (two during a key rotation). Required.
	Keys []*onion.KeyPair
	// JS is the JetStream context for consuming the inbox and forwarding
	// to next relays. Required; the stream must exist (EnsureStream).
	JS jetstream.JetStream
	// Kafka receives HopKafka layers. nil for a relay that only forwards to
	// relays: HopKafka layers are then dropped as wrong hops.
	Kafka KafkaWriter

	// PoolSize (P) and PoolTimeout (T) make the relay a threshold-and-
	// timeout pool mix: peeled messages are held, and all held messages
	// are shuffled and forwarded together as soon as at least P are held,
	// or T after the oldest of them arrived, whichever comes first.
	//
	// Trade-off, anonymity set against latency: under a load of P/T
	// messages per second or more, every forwarded batch mixes at least P
	// messages (an observer of the relay's input and output cannot tell
	// which of ≥ P inputs an output is); below that load a batch holds
	// only what arrived within T, down to a single message when one
	// arrives alone, and each message waits at most T (plus one forward)
	// per relay. Raising P or T enlarges the anonymity set under light
	// load and adds up to T of latency per hop; T also bounds the wait,
	// so nothing is held forever. Messages are still acknowledged only
	// after their forward succeeded: a held message stays unacknowledged,
	// which is why Run requires AckWait ≥ 2·T and sizes the consumer's
	// MaxAckPending for P held messages. 0 means DefaultPoolSize (64) and
	// DefaultPoolTimeout (1 s); PoolSize 1 forwards every fetch at once
	// (no mixing beyond what one fetch brings, the behaviour before pools).
	PoolSize    int
	PoolTimeout time.Duration
	// BatchSize is the most messages one fetch from the inbox returns
	// (a forwarded batch is a pool of one or more fetches); 0 means
	// DefaultBatchSize (1,024).
	BatchSize int
	// FetchMaxBytes bounds the bytes one fetch returns (the layers and
	// their subjects and headers), whatever BatchSize: a fetch ends at
	// BatchSize messages or FetchMaxBytes bytes. 0 means
	// DefaultFetchMaxBytes (16 MiB); at least MinFetchMaxBytes.
	FetchMaxBytes int
	// BatchTimeout is the longest one fetch waits for BatchSize messages
	// (a poll interval; the pool's T decides when to forward); 0 means
	// 50 ms.
	BatchTimeout time.Duration
	// AckWait is how long a fetched message stays invisible to other
	// processes before it is redelivered (when this process died); 0 means
	// 30 s. Applied to the shared consumer when Run starts. Must be at
	// least 2·PoolTimeout, or Run refuses the configuration: held messages
	// are not acknowledged, and one redelivered while held would be
	// forwarded twice.
	AckWait time.Duration
	// NakDelay is how long a message whose forward failed waits before
	// redelivery; 0 means 500 ms.
	NakDelay time.Duration
	// ForwardTimeout bounds one batch's Kafka write and the wait for its
	// JetStream PubAcks; 0 means 30 s.
	ForwardTimeout time.Duration
	// Workers is the number of goroutines peeling a batch in parallel;
	// 0 means GOMAXPROCS.
	Workers int
	// ReplayWindow and ReplayEntries bound the replay filter: a layer this
	// process already forwarded (same HPKE encapsulated key) is dropped as
	// "replay" for at least min(ReplayWindow, the time to forward
	// ReplayEntries layers) and at most twice that (see replayFilter).
	// 0 means DefaultReplayWindow / DefaultReplayEntries; a negative
	// ReplayWindow disables the filter (tests of downstream dedup).
	ReplayWindow  time.Duration
	ReplayEntries int

	// Vectors is where the relay produces HopKafkaVectors layers (PDD
	// blinded vectors, Kafka topic "vectors"); nil drops them as wrong_hop.
	Vectors KafkaWriter

	// Prio3 is where the relay produces HopKafkaPrio3 layers (Prio3
	// uploads, already sealed to the leader, Kafka topic
	// protocol.Prio3UploadsTopic, key = the hop key, the campaign); nil
	// drops them as wrong_hop. Its writer's BatchBytes must hold one
	// upload (up to onion.MaxLayer bytes).
	Prio3 KafkaWriter

	// Next is this relay's place on the route client → a → b → Kafka: the
	// name of the relay it forwards to, or LastHop for the route's last
	// relay, which produces to Kafka only. A relay refuses (drops as
	// "wrong_hop") every layer whose next hop is not the route's next
	// role: a relay with a Next forwards HopRelay layers to
	// RelaySubject(Next) only, never to Kafka; the last relay forwards
	// HopKafka, HopKafkaVectors and HopKafkaPrio3 layers only, never to a
	// relay. Without
	// this rule an onion of alternating relay-a/relay-b layers made the
	// relays peel one layer per hop, as many as fit into
	// onion.MaxLayer, for one published message (amplification). ""
	// means RouteNext(Name): relay "a" forwards to "b", every other relay
	// is a last hop.
	Next string

	// Logger receives operational logs (never payload bytes or keys);
	// nil means slog.Default().
	Logger *slog.Logger
	// Stats counts what the relay did; nil means Run allocates one.
	Stats *Stats
	// Registerer, when set, gets Prometheus metrics labelled relay=Name:
	// crowdlog_relay_reports_in_total, crowdlog_relay_forwarded_total,
	// crowdlog_relay_dropped_total{reason}, crowdlog_relay_batch_size,
	// crowdlog_relay_pool_latency_seconds.
	Registerer prometheus.Registerer

	replay *replayFilter // nil when disabled
}

// dropReason says why a layer was dropped.
type dropReason int

const (
	keep dropReason = iota
	dropMalformed
	dropOversized
	dropUnknownKey
	dropWrongHop
	dropReplay
)

var reasonNames = [...]string{keep: "", dropMalformed: "malformed", dropOversized: "oversized", dropUnknownKey: "unknown_key", dropWrongHop: "wrong_hop", dropReplay: "replay"}

// item is one fetched message and what peeling it gave.
type item struct {
	m      jetstream.Msg
	got    time.Time // fetched (crowdlog_relay_pool_latency_seconds)
	hop    onion.Hop
	inner  []byte
	reason dropReason
	err    error // why Peel failed (no layer contents in it)
	ok     bool  // forward succeeded
	claim  bool  // holds a replay-filter claim on key
	later  bool  // a redelivery of a message still in flight: Nak, retry later
	done   bool  // a redelivery of a message already forwarded: Ack
	key    replayKey
}

// Run consumes the relay's inbox until ctx ends: fetch up to BatchSize
// messages (or what arrived within BatchTimeout), peel each with Keys, drop
// bad ones (Term: never redelivered; counted by reason; a layer that does
// not open is first retried once, see MalformedDeliveries), hold the rest in
// the pool until PoolSize are held or PoolTimeout passed since the oldest
// arrived, then shuffle the pool with a crypto-seeded ChaCha8 permutation
// and forward it (HopRelay:
// JetStream publish of the inner layer to the next relay's subject, with a
// Nats-Msg-Id of MsgID(inner) for deduplication; HopKafka: one
// WriteMessages call per batch, Key = the hop key's first
// onion.ReportKeyLen bytes (see reportKey), Value = inner layer, no
// headers; HopKafkaVectors and HopKafkaPrio3 likewise to Vectors and Prio3
// with the whole hop key), and acknowledge each message only after its forward succeeded.
// Failed forwards are Nak'ed with NakDelay and logged without contents.
// While it runs, the relay also announces its key ids and public keys on
// KeysSubject(Name) (clients ask with ingest.FetchRelayKeys).
//
// Run returns nil when ctx ends (fetched but unforwarded messages, the
// pool included, are Nak'ed for immediate redelivery to another process),
// and an error for an
// invalid configuration, when the consumer cannot be created, or when the
// NATS connection is closed for good (nats.ErrConnectionClosed); transient
// fetch errors are logged and retried with backoff. Call Run once per
// Relay value; for more capacity run several Relay values (goroutines or
// processes) with the same Name.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.check(); err != nil {
		return err
	}
	if r.Stats == nil {
		r.Stats = &Stats{}
	}
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("relay", r.Name)
	mx := newMetrics(r.Registerer, r.Name, log)

	batchSize := def(r.BatchSize, DefaultBatchSize)
	batchTimeout := def(r.BatchTimeout, DefaultBatchTimeout)
	poolSize := def(r.PoolSize, DefaultPoolSize)
	poolTimeout := def(r.PoolTimeout, DefaultPoolTimeout)

	cons, err := r.consumer(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return fmt.Errorf("relays: seed shuffle: %w", err)
	}
	rng := rand.New(rand.NewChaCha8(seed))
	if r.ReplayWindow >= 0 {
		r.replay = newReplayFilter(def(r.ReplayWindow, DefaultReplayWindow), def(r.ReplayEntries, DefaultReplayEntries))
	}
	// clients ask which key ids we hold (a layer for another id is dropped
	// as "unknown_key" without the client hearing of it)
	defer r.serveKeys(log)()

	// Two stages: this goroutine fetches and peels batch k+1 while the
	// forwarder shuffles, forwards and acks batch k.
	ready, stop := r.startForwarder(ctx, rng, mx, log)
	defer stop()

	// The pool: peeled messages held until poolSize are held or poolTimeout
	// passed since the oldest arrived (held are unacknowledged; see PoolSize).
	var pool []*item
	var oldest time.Time
	flush := func() {
		if len(pool) > 0 {
			if len(pool) < poolSize {
				r.Stats.TimeoutFlushes.Add(1)
			}
			ready <- pool
			pool = nil
		}
	}
	// shutting down: held messages go back to the inbox at once
	defer func() { r.release(pool) }()

	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		wait := batchTimeout
		if len(pool) > 0 {
			left := time.Until(oldest.Add(poolTimeout))
			if left <= 0 {
				flush()
				continue
			}
			wait = max(min(wait, left), time.Millisecond)
		}
		items, failed, err := r.fetch(ctx, &cons, batchSize, wait, backoff, log)
		if err != nil {
			return err
		}
		if failed {
			if !sleep(ctx, backoff) {
				break
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if len(items) == 0 {
			continue
		}
		if good := r.prepare(items, mx, log); len(good) > 0 {
			if len(pool) == 0 {
				oldest = time.Now()
			}
			pool = append(pool, good...)
		}
		if len(pool) >= poolSize {
			flush()
		}
	}
	return nil
}

// check refuses a relay that cannot run: an invalid name or next relay, no
// keys (or a key onion.PrepareKeys rejects), no JetStream context, or an
// ack wait shorter than twice the pool timeout.
func (r *Relay) check() error {
	if !ValidName(r.Name) {
		return fmt.Errorf("relays: invalid relay name %q (use 1-64 characters from A-Za-z0-9_-)", r.Name)
	}
	if len(r.Keys) == 0 {
		return fmt.Errorf("relays: relay %s has no keys (load them with protocol.LoadKeyPair)", r.Name)
	}
	// checks every key, and readies it before the peel workers share it
	if err := onion.PrepareKeys(r.Keys); err != nil {
		return fmt.Errorf("relays: relay %s: %w", r.Name, err)
	}
	if r.JS == nil {
		return fmt.Errorf("relays: relay %s has no JetStream context", r.Name)
	}
	if next := r.next(); next != "" && (!ValidName(next) || next == r.Name) {
		return fmt.Errorf("relays: relay %s: invalid next relay %q (a relay name other than its own, or %q for the last relay)", r.Name, r.Next, LastHop)
	}
	if r.FetchMaxBytes != 0 && r.FetchMaxBytes < MinFetchMaxBytes {
		return fmt.Errorf("relays: relay %s: fetch max bytes %d is below %d: the largest layer would never be fetched (raise it or leave it 0)", r.Name, r.FetchMaxBytes, MinFetchMaxBytes)
	}
	poolTimeout := def(r.PoolTimeout, DefaultPoolTimeout)
	if ackWait := def(r.AckWait, DefaultAckWait); ackWait < 2*poolTimeout {
		return fmt.Errorf("relays: relay %s: ack wait %v is shorter than twice the pool timeout %v: held messages would be redelivered while held (raise the ack wait or lower the pool timeout)", r.Name, ackWait, poolTimeout)
	}
	return nil
}

// fetch takes up to batchSize messages from the inbox, waiting at most
// wait. failed reports a fetch that got nothing because of an error (the
// caller backs off for backoff, which the log names); messages received before an error are returned and
// processed. A missing consumer is recreated in *cons for the next fetch.
// err is set only when the NATS connection is closed.
func (r *Relay) fetch(ctx context.Context, cons *jetstream.Consumer, batchSize int, wait, backoff time.Duration, log *slog.Logger) (items []*item, failed bool, err error) {
	batch, err := (*cons).Fetch(batchSize, jetstream.FetchMaxWait(wait), jetstream.FetchMaxBytes(def(r.FetchMaxBytes, DefaultFetchMaxBytes)))
	if errors.Is(err, nats.ErrConnectionClosed) {
		return nil, false, fmt.Errorf("relays: relay %s: NATS connection closed: %w", r.Name, err)
	}
	if err != nil {
		log.Warn("fetch failed; retrying", "err", err, "retry_in", backoff)
		r.recreateConsumer(ctx, cons, err)
		return nil, true, nil
	}
	for m := range batch.Messages() {
		items = append(items, &item{m: m, got: time.Now()})
	}
	ferr := batch.Error()
	if errors.Is(ferr, nats.ErrConnectionClosed) && len(items) == 0 {
		return nil, false, fmt.Errorf("relays: relay %s: NATS connection closed: %w", r.Name, ferr)
	}
	if ferr != nil && ctx.Err() == nil {
		// Messages already received are still processed; a
		// missing consumer is recreated on the next round.
		log.Warn("fetch ended with an error", "err", ferr, "received", len(items))
		r.recreateConsumer(ctx, cons, ferr)
		return items, len(items) == 0, nil
	}
	return items, false, nil
}

// recreateConsumer replaces *cons when err says the inbox consumer is gone
// (it keeps the old one when recreating fails: the next fetch retries).
func (r *Relay) recreateConsumer(ctx context.Context, cons *jetstream.Consumer, err error) {
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
		if c, err := r.consumer(ctx); err == nil {
			*cons = c
		}
	}
}

// startForwarder starts the forwarding stage: each pool sent on ready is
// shuffled with rng, forwarded and acknowledged in order. stop closes
// ready and waits until the last pool is forwarded.
func (r *Relay) startForwarder(ctx context.Context, rng *rand.Rand, mx *metrics, log *slog.Logger) (ready chan<- []*item, stop func()) {
	pools := make(chan []*item, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for good := range pools {
			r.forward(ctx, good, rng, mx, log)
		}
	}()
	return pools, func() {
		close(pools)
		<-done
	}
}

// release gives held messages back unforwarded (shutdown): Nak for
// immediate redelivery, and their replay claims end (a redelivery is not a
// replay).
func (r *Relay) release(items []*item) {
	for _, it := range items {
		if it.claim {
			r.replay.done(it.key, false)
		}
		_ = it.m.Nak()
	}
}

// ConsumerWait bounds how long a starting relay waits for its consumer to
// appear (the admin step creating it meanwhile).
const ConsumerWait = 30 * time.Second

// consumer binds the relay's shared durable pull consumer, which the
// admin step (`crowdlog streams`, EnsureConsumer) created. Only where it
// does not exist, on a server without the permission table (tests,
// `crowdlog run` without keys), the relay creates it; with the table on
// the server refuses that, and the error says to run the admin step. An
// existing consumer is never changed: one whose ack wait or ack-pending
// limit differs from this relay's options is used as it is, with a
// warning. A missing consumer is looked for again for ConsumerWait.
func (r *Relay) consumer(ctx context.Context) (jetstream.Consumer, error) {
	cfg := ConsumerConfig(r.Name, def(r.AckWait, DefaultAckWait),
		// room for a full pool plus a fetch being peeled and a batch being
		// forwarded, with a margin for several processes
		max(DefaultMaxAckPending, 4*(def(r.PoolSize, DefaultPoolSize)+2*def(r.BatchSize, DefaultBatchSize))))
	var err error
	tried := false
	until := time.Now().Add(ConsumerWait)
	for attempt := 0; ; attempt++ {
		var c jetstream.Consumer
		actx, cancel := context.WithTimeout(ctx, natsconn.StreamAttemptTimeout)
		c, err = r.JS.Consumer(actx, Stream, cfg.Durable)
		cancel()
		if err == nil {
			have := c.CachedInfo().Config
			if poolTimeout := def(r.PoolTimeout, DefaultPoolTimeout); have.AckWait < 2*poolTimeout {
				return nil, fmt.Errorf("relays: consumer %s: ack wait %v is shorter than twice the pool timeout %v: held messages would be redelivered while held (run `crowdlog streams --relay-ack-wait` with at least %v, or lower --pool-timeout)",
					cfg.Durable, have.AckWait, poolTimeout, 2*poolTimeout)
			}
			if have.AckWait != cfg.AckWait || have.MaxAckPending < cfg.MaxAckPending {
				log := r.Logger
				if log == nil {
					log = slog.Default()
				}
				log.Warn("the relay's consumer differs from this relay's options; using it as it is (the admin step, `crowdlog streams`, sets it)",
					"consumer", cfg.Durable, "ack_wait", have.AckWait, "want_ack_wait", cfg.AckWait,
					"max_ack_pending", have.MaxAckPending, "want_max_ack_pending", cfg.MaxAckPending)
			}
			return c, nil
		}
		if errors.Is(err, jetstream.ErrConsumerNotFound) && !tried {
			tried = true
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			c, err = r.JS.CreateConsumer(cctx, Stream, cfg)
			cancel()
			if err == nil || errors.Is(err, jetstream.ErrConsumerExists) {
				if err == nil {
					return c, nil
				}
				continue // created by another process meanwhile: bind it
			}
			err = fmt.Errorf("not found, and this credential may not create it: %w", err)
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) || time.Now().After(until) ||
			!sleep(ctx, min(time.Duration(20*(attempt+1))*time.Millisecond, time.Second)) {
			break
		}
	}
	return nil, fmt.Errorf("relays: consumer %s on stream %s: %w (%s)", cfg.Durable, Stream, err, natsconn.StreamsHint)
}

// prepare peels one fetched batch, terminates and counts the bad messages,
// and returns the good ones.
func (r *Relay) prepare(items []*item, mx *metrics, log *slog.Logger) []*item {
	st := r.Stats
	st.In.Add(uint64(len(items)))
	mx.in.Add(float64(len(items)))

	r.peelAll(items)
	if r.replay != nil {
		// after peeling: only layers that decrypt can claim an enc, so a
		// forged copy of someone's enc cannot get the genuine layer dropped
		for _, it := range items {
			if it.reason != keep {
				continue
			}
			it.key = keyOf(it.m.Data())
			switch r.replay.claim(it.key, it.seq()) {
			case claimNew:
				it.claim = true
			case claimReplay:
				it.reason = dropReplay
			case claimRedeliveryBusy:
				it.later = true
			case claimRedeliveryDone:
				it.done = true
			}
		}
	}

	var dropped [len(reasonNames)]int
	var later, done, total, retried int
	var firstErr error
	good := items[:0:0]
	for _, it := range items {
		if it.later { // its first delivery is held or being forwarded now:
			// retry once that pool is likely gone, not every NakDelay
			_ = it.m.NakWithDelay(max(def(r.NakDelay, DefaultNakDelay), def(r.PoolTimeout, DefaultPoolTimeout)))
			later++
			continue
		}
		if it.done { // already forwarded; only its ack was late
			_ = it.m.Ack()
			done++
			continue
		}
		if it.reason == dropMalformed && it.delivered() < MalformedDeliveries {
			// A genuine layer must never be lost to a transient local
			// fault (as happened with circl's lazily cached public key,
			// see onion.KeyPair.Prepare): retry it before terminating.
			_ = it.m.NakWithDelay(def(r.NakDelay, DefaultNakDelay))
			retried++
			continue
		}
		if it.reason != keep {
			dropped[it.reason]++
			total++
			if firstErr == nil && it.err != nil {
				firstErr = fmt.Errorf("%w (layer of %d bytes, stream sequence %d)", it.err, len(it.m.Data()), it.seq())
			}
			_ = it.m.Term()
			continue
		}
		good = append(good, it)
	}
	for reason, n := range dropped {
		if n > 0 {
			st.drop(dropReason(reason), n)
			mx.drop(dropReason(reason), n)
		}
	}
	if total > 0 {
		// dropped for good (JetStream Term): an honest deployment sees
		// none but replays, so say how many, never what
		log.Warn("dropped bad layers", "malformed", dropped[dropMalformed], "oversized", dropped[dropOversized],
			"unknown_key", dropped[dropUnknownKey], "wrong_hop", dropped[dropWrongHop], "replay", dropped[dropReplay],
			"first_error", errString(firstErr))
	}
	if retried > 0 {
		log.Warn("layers that did not peel will be retried once before they are dropped", "layers", retried)
	}
	if later > 0 || done > 0 {
		log.Info("redeliveries of layers this process forwards or forwarded", "in_flight_retry_later", later, "already_forwarded_acked", done)
	}
	return good
}

// forward shuffles a batch of peeled messages (one pool), forwards them,
// and acks the forwarded ones (Nak for the others).
func (r *Relay) forward(ctx context.Context, good []*item, rng *rand.Rand, mx *metrics, log *slog.Logger) {
	st := r.Stats
	st.Batches.Add(1)
	mx.batchSize.Observe(float64(len(good)))
	rng.Shuffle(len(good), func(i, j int) { good[i], good[j] = good[j], good[i] })

	fctx, cancel := context.WithTimeout(ctx, def(r.ForwardTimeout, DefaultForwardTimeout))
	defer cancel()

	// Relay hops: async publishes (in shuffled order), PubAcks awaited below.
	type pending struct {
		it  *item
		fut jetstream.PubAckFuture
	}
	var pubs []pending
	var pubErr error
	var kafkaItems, vectorItems, prio3Items []*item
	for _, it := range good {
		if it.hop.Kind == onion.HopKafkaVectors {
			vectorItems = append(vectorItems, it)
			continue
		}
		if it.hop.Kind == onion.HopKafkaPrio3 {
			prio3Items = append(prio3Items, it)
			continue
		}
		if it.hop.Kind == onion.HopKafka {
			kafkaItems = append(kafkaItems, it)
			continue
		}
		msg := &nats.Msg{Subject: it.hop.Subject, Data: it.inner, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, protocol.LayerMsgID(it.inner))
		fut, err := r.JS.PublishMsgAsync(msg)
		if err != nil {
			pubErr = err
			continue
		}
		pubs = append(pubs, pending{it, fut})
	}

	// Kafka hops: one WriteMessages call for the batch, meanwhile the
	// PubAcks arrive.
	var kafkaErr error
	if len(kafkaItems) > 0 {
		msgs := make([]kafka.Message, len(kafkaItems))
		for i, it := range kafkaItems {
			msgs[i] = kafka.Message{Key: reportKey(it.hop.Key), Value: it.inner}
		}
		if kafkaErr = r.Kafka.WriteMessages(fctx, msgs...); kafkaErr == nil {
			for _, it := range kafkaItems {
				it.ok = true
			}
		}
	}
	if len(vectorItems) > 0 {
		msgs := make([]kafka.Message, len(vectorItems))
		for i, it := range vectorItems {
			msgs[i] = kafka.Message{Key: it.hop.Key, Value: it.inner}
		}
		if err := r.Vectors.WriteMessages(fctx, msgs...); err == nil {
			for _, it := range vectorItems {
				it.ok = true
			}
		} else {
			kafkaErr = err
		}
	}
	if len(prio3Items) > 0 {
		msgs := make([]kafka.Message, len(prio3Items))
		for i, it := range prio3Items {
			msgs[i] = kafka.Message{Key: it.hop.Key, Value: it.inner}
		}
		if err := r.Prio3.WriteMessages(fctx, msgs...); err == nil {
			for _, it := range prio3Items {
				it.ok = true
			}
		} else {
			kafkaErr = err
		}
	}
	for _, p := range pubs {
		select {
		case <-p.fut.Ok():
			p.it.ok = true
		case err := <-p.fut.Err():
			pubErr = err
		case <-fctx.Done():
			pubErr = fctx.Err()
		}
	}

	// Acknowledge forwarded messages; Nak the others.
	delay := def(r.NakDelay, DefaultNakDelay)
	var fwd, failed int
	for _, it := range good {
		if it.claim {
			r.replay.done(it.key, it.ok)
		}
		if it.ok {
			_ = it.m.Ack()
			mx.pool.Observe(time.Since(it.got).Seconds())
			fwd++
			continue
		}
		failed++
		if ctx.Err() != nil {
			_ = it.m.Nak() // shutting down: let another process take it now
		} else {
			_ = it.m.NakWithDelay(delay)
		}
	}
	st.Forwarded.Add(uint64(fwd))
	mx.forwarded.Add(float64(fwd))
	var streak uint64
	if kafkaErr != nil && ctx.Err() == nil {
		st.KafkaRefused.Add(1)
		mx.kafkaRefused.Inc()
		streak = st.kafkaStreak.Add(1)
	} else if kafkaErr == nil && len(kafkaItems)+len(vectorItems)+len(prio3Items) > 0 {
		st.kafkaStreak.Store(0)
	}
	if failed > 0 {
		st.ForwardFailures.Add(uint64(failed))
		switch {
		case ctx.Err() != nil:
		case streak >= KafkaRefusedErrorAfter:
			// a refusal that persists (a message over the topic's
			// max.message.bytes, missing ACLs, a topic gone) is retried
			// forever: say so where an operator looks
			log.Error("Kafka keeps refusing the relay's writes; messages are redelivered until it accepts them (check the topic's max.message.bytes, the relay's ACLs and the brokers; crowdlog_relay_kafka_refused_total)",
				"failures_in_a_row", streak, "failed", failed, "kafka_err", errString(kafkaErr), "retry_in", delay)
		default:
			log.Warn("forward failed; messages will be redelivered",
				"failed", failed, "forwarded", fwd, "kafka_err", errString(kafkaErr), "nats_err", errString(pubErr), "retry_in", delay)
		}
	}
}

// delivered is how many times JetStream delivered the message (1 the first
// time); MalformedDeliveries when unknown, so that nothing loops.
func (it *item) delivered() uint64 {
	if md, err := it.m.Metadata(); err == nil {
		return md.NumDelivered
	}
	return MalformedDeliveries
}

// seq is the message's JetStream stream sequence, 0 when unknown.
func (it *item) seq() uint64 {
	if md, err := it.m.Metadata(); err == nil {
		return md.Sequence.Stream
	}
	return 0
}

// peelAll peels every item in parallel and sets hop, inner and reason.
func (r *Relay) peelAll(items []*item) {
	workers := def(r.Workers, runtime.GOMAXPROCS(0))
	workers = min(workers, (len(items)+7)/8)
	if workers <= 1 {
		for _, it := range items {
			r.peel(it)
		}
		return
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(items); i += workers {
				r.peel(items[i])
			}
		}(w)
	}
	wg.Wait()
}

// peel classifies one message. It never panics on hostile input: Peel
// validates lengths before slicing, and a panic would crash the relay for
// everyone, so one is recovered and counted as malformed anyway.
func (r *Relay) peel(it *item) {
	defer func() {
		if recover() != nil {
			it.reason = dropMalformed
		}
	}()
	data := it.m.Data()
	if len(data) > onion.MaxLayer {
		it.reason = dropOversized
		return
	}
	hop, inner, err := onion.Peel(r.Keys, data)
	it.err = err
	switch {
	case errors.Is(err, onion.ErrUnknownKey):
		it.reason = dropUnknownKey
	case err != nil:
		it.reason = dropMalformed
	default:
		it.hop, it.inner = hop, inner
		next := r.next()
		switch hop.Kind {
		case onion.HopRelay: // only to the route's next relay
			if next == "" || hop.Subject != protocol.RelaySubject(next) || !validForward(hop.Subject, r.Name) {
				it.reason = dropWrongHop
			}
		case onion.HopKafkaVectors: // only from the last relay
			if next != "" || r.Vectors == nil {
				it.reason = dropWrongHop
			}
		case onion.HopKafkaPrio3: // only from the last relay
			if next != "" || r.Prio3 == nil {
				it.reason = dropWrongHop
			}
		case onion.HopKafka: // only from the last relay
			if next != "" || r.Kafka == nil {
				it.reason = dropWrongHop
			}
		default: // HopDeliver is for the aggregator, never a relay
			it.reason = dropWrongHop
		}
	}
}

// LastHop as Relay.Next marks the route's last relay (Kafka only) whatever
// its name.
const LastHop = "."

// RouteNext is the relay after name on the route client → a → b → Kafka:
// "b" after "a", "" (the last relay) after any other name.
func RouteNext(name string) string {
	if name == "a" {
		return "b"
	}
	return ""
}

// next resolves Relay.Next: the relay to forward to, "" for the last relay.
func (r *Relay) next() string {
	switch r.Next {
	case "":
		return RouteNext(r.Name)
	case LastHop:
		return ""
	}
	return r.Next
}

// reportKey is the Kafka key relay b writes for a HopKafka layer: at most
// onion.ReportKeyLen bytes of the client's hop key. Honest clients send
// onion.ReportKey (one byte, one of 256 tag buckets); a longer key (the
// former two-byte onion.TagBucket, or a client trying to stand out) is cut
// to its prefix, which keeps every report of a tag in one partition while
// readers of topic reports never see more than 256 key values.
func reportKey(k []byte) []byte {
	if len(k) > onion.ReportKeyLen {
		return k[:onion.ReportKeyLen]
	}
	return k
}

func def[T int | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
