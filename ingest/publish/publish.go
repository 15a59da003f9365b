// Package publish is the client side of the first relay hop (data flow "seal ──NATS──▶
// relay A", docs/architecture.md): it publishes onion layers to a
// relay's JetStream inbox with bounded memory and without loss. When the
// relays fall behind, the inbox is full (DiscardNew per subject) and
// JetStream rejects new messages; the Publisher then retries with
// exponential backoff, so a slow relay slows the clients instead of losing
// their reports.
package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crowdlog/crowdlog/infra/metrics/hist"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// Defaults of Publisher.
const (
	DefaultMaxPending = 4096
	DefaultAckTimeout = 5 * time.Second
	DefaultMaxBackoff = time.Second
	minBackoff        = 5 * time.Millisecond
)

// ErrTooLarge is returned by Publish for a layer longer than
// onion.MaxLayer (no relay would accept it).
var ErrTooLarge = errors.New("publish: layer exceeds protocol.MaxLayer")

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("publish: publisher closed")

// Publisher publishes onion layers to one relay subject. Set the
// configuration fields before the first Publish; then it is safe for
// concurrent use by many goroutines. The zero value is not usable: JS and
// Subject are required.
type Publisher struct {
	// JS is the JetStream context to publish with. Required.
	JS jetstream.JetStream
	// Subject is the first relay's inbox, e.g. protocol.RelaySubject("a").
	// Required.
	Subject string
	// MaxPending bounds the accepted but not yet acknowledged layers (and
	// so the memory held: MaxPending × layer size); Publish blocks when it
	// is reached. 0 means 4096.
	MaxPending int
	// AckTimeout is how long to wait for a PubAck before re-publishing
	// (deduplicated by the stream via the Nats-Msg-Id header); 0 means 5 s.
	AckTimeout time.Duration
	// MaxBackoff caps the wait between retries while the stream is full;
	// 0 means 1 s.
	MaxBackoff time.Duration
	// Logger gets a warning when retries begin (no contents); nil means
	// slog.Default().
	Logger *slog.Logger

	// Published counts layers acknowledged by JetStream.
	Published atomic.Uint64
	// Retried counts re-publications (stream full, timeout, disconnect).
	Retried atomic.Uint64
	// Failed counts accepted layers given up by Close or rejected
	// permanently by the server (e.g. larger than the stream allows).
	Failed atomic.Uint64

	once    sync.Once
	mxOnce  sync.Once
	ack     prometheus.Histogram // AckSeconds
	slots   chan struct{}        // one token per accepted, unsettled layer
	queue   chan *entry          // accepted layers in publish order
	closing chan struct{}

	mu          sync.Mutex
	outstanding int
	running     bool
	idle        chan struct{} // closed when outstanding drops to 0
	closed      bool
	err         error // first permanent failure since the last Flush
}

type entry struct {
	at  time.Time // first handed to JetStream (AckSeconds)
	msg *nats.Msg
	fut jetstream.PubAckFuture // nil when the async publish itself failed
	err error                  // the publish error when fut is nil
}

// AckSeconds is the histogram of the time from handing a layer to
// JetStream to its PubAck as the publisher settles it, retries included
// (crowdlog_ingest_publish_ack_seconds; settled in publish order, so a
// slow ack also delays the ones behind it). Register it with a role's
// registry (pipelines/runner.RegisterPublisher).
func (p *Publisher) AckSeconds() prometheus.Histogram {
	p.mxOnce.Do(func() {
		p.ack = hist.NewHistogram("crowdlog_ingest_publish_ack_seconds",
			"Time from publishing an onion layer to relay a's stream to its PubAck (retries included).", nil, hist.RequestBuckets)
	})
	return p.ack
}

func (p *Publisher) init() {
	p.once.Do(func() {
		n := p.MaxPending
		if n <= 0 {
			n = DefaultMaxPending
		}
		p.slots = make(chan struct{}, n)
		p.queue = make(chan *entry, n)
		p.closing = make(chan struct{})
	})
}

// Publish hands layer to JetStream asynchronously and returns once it is
// accepted for delivery: at most MaxPending layers wait for their PubAck,
// and Publish blocks while that many are outstanding (which is what happens
// while the relay's inbox is full). The Publisher keeps layer until it is
// acknowledged; do not modify it afterwards. Retries (stream full, ack
// timeout, disconnect) continue in the background until the layer is
// stored, however long that takes; Flush waits for them.
//
// Errors: ctx's error if ctx ended before the layer was accepted (the layer
// was then not sent), ErrTooLarge, ErrClosed, or a configuration error.
func (p *Publisher) Publish(ctx context.Context, layer []byte) error {
	if p.JS == nil || p.Subject == "" {
		return errors.New("publish: Publisher needs JS and Subject (e.g. protocol.RelaySubject(\"a\"))")
	}
	if len(layer) > onion.MaxLayer {
		return fmt.Errorf("%w: %d bytes > %d", ErrTooLarge, len(layer), onion.MaxLayer)
	}
	p.init()
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.closing:
		return ErrClosed
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return ErrClosed
	}
	p.outstanding++
	if !p.running {
		p.running = true
		go p.settle()
	}
	p.mu.Unlock()

	msg := &nats.Msg{Subject: p.Subject, Data: layer, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, protocol.LayerMsgID(layer))
	e := &entry{at: time.Now(), msg: msg}
	e.fut, e.err = p.JS.PublishMsgAsync(msg)
	p.queue <- e // never blocks: len(queue) <= outstanding <= cap(slots)
	return nil
}

// Flush waits until every accepted layer is acknowledged, or ctx ends.
// It returns ctx's error (with the number still outstanding) if ctx ended
// first — the layers stay queued and a later Flush waits again — or the
// first permanent failure since the previous Flush.
func (p *Publisher) Flush(ctx context.Context) error {
	p.init()
	p.mu.Lock()
	if p.outstanding == 0 {
		err := p.err
		p.err = nil
		p.mu.Unlock()
		return err
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		p.mu.Lock()
		err := p.err
		p.err = nil
		p.mu.Unlock()
		return err
	case <-ctx.Done():
		return fmt.Errorf("publish: flush: %d layers still unacknowledged: %w", p.Pending(), ctx.Err())
	}
}

// Close flushes (see Flush) and stops the Publisher. If ctx ends first, the
// layers still outstanding are abandoned, counted in Failed, and Close
// returns an error saying how many. Publish after Close returns ErrClosed.
func (p *Publisher) Close(ctx context.Context) error {
	p.init()
	ferr := p.Flush(ctx)
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.closing)
	}
	p.mu.Unlock()
	if ferr != nil && ctx.Err() != nil {
		// Wait for the settler to abandon what is left.
		p.mu.Lock()
		if p.outstanding > 0 && p.idle == nil {
			p.idle = make(chan struct{})
		}
		idle := p.idle
		p.mu.Unlock()
		if idle != nil {
			<-idle
		}
	}
	return ferr
}

// Pending is the number of accepted layers not yet acknowledged.
func (p *Publisher) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outstanding
}

// settle runs while layers are outstanding: it takes them in publish order,
// waits for each PubAck, and re-publishes failures. After a failure it
// probes with synchronous publishes and exponential backoff until one
// succeeds (the stream has room again); later failures are then re-published
// asynchronously at the back of the queue without waiting.
func (p *Publisher) settle() {
	ackTimeout := p.AckTimeout
	if ackTimeout <= 0 {
		ackTimeout = DefaultAckTimeout
	}
	maxBackoff := p.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = DefaultMaxBackoff
	}
	log := p.Logger
	if log == nil {
		log = slog.Default()
	}
	timer := time.NewTimer(ackTimeout)
	defer timer.Stop()
	healthy := true // the last settled publish succeeded
	warned := false
	for {
		e := <-p.queue
		err := e.err
		if e.fut != nil {
			timer.Reset(ackTimeout)
			select {
			case <-e.fut.Ok():
				err = nil
			case err = <-e.fut.Err():
			case <-timer.C:
				err = jetstream.ErrAsyncPublishTimeout
			case <-p.closing:
				err = ErrClosed
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		done := true
		switch {
		case err == nil:
			p.Published.Add(1)
			p.AckSeconds().Observe(time.Since(e.at).Seconds())
			healthy = true
		case permanent(err):
			p.fail(err)
		case p.isClosing():
			p.fail(fmt.Errorf("publish: layer abandoned at Close: %w", err))
		case healthy:
			// First failure after successes: republish asynchronously
			// at the back; if more fail, the next one probes.
			healthy = false
			p.Retried.Add(1)
			e.fut, e.err = p.JS.PublishMsgAsync(e.msg)
			p.queue <- e // room: e was taken from the queue
			done = false
		default:
			if !warned {
				log.Warn("relay inbox full or unreachable; publishing slows down until it drains", "subject", p.Subject, "err", err)
				warned = true
			}
			if perr := p.probe(e.msg, ackTimeout, maxBackoff); perr != nil {
				p.fail(perr)
			} else {
				p.Published.Add(1)
				p.AckSeconds().Observe(time.Since(e.at).Seconds())
				healthy = true
			}
		}
		if !done {
			continue
		}
		<-p.slots
		p.mu.Lock()
		p.outstanding--
		if p.outstanding == 0 {
			p.running = false
			if p.idle != nil {
				close(p.idle)
				p.idle = nil
			}
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// probe re-publishes msg synchronously with exponential backoff and jitter
// until it is stored, fails permanently, or the Publisher closes.
func (p *Publisher) probe(msg *nats.Msg, ackTimeout, maxBackoff time.Duration) error {
	backoff := minBackoff
	for {
		p.Retried.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		_, err := p.JS.PublishMsg(ctx, msg)
		cancel()
		if err == nil {
			return nil
		}
		if permanent(err) {
			return err
		}
		// full jitter in [backoff/2, backoff)
		d := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-p.closing:
			t.Stop()
			return fmt.Errorf("publish: layer abandoned at Close: %w", err)
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func (p *Publisher) isClosing() bool {
	select {
	case <-p.closing:
		return true
	default:
		return false
	}
}

func (p *Publisher) fail(err error) {
	p.Failed.Add(1)
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

// permanent reports errors a retry cannot fix: the layer is larger than the
// stream accepts.
func permanent(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return true
	}
	return errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) || errors.Is(err, nats.ErrMaxPayload)
}
