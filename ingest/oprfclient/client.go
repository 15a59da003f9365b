// Package oprfclient is the client of the randomness service (package
// randomness): it obtains ω = VOPRF(k_epoch, input) for a client's
// artifacts without revealing them (RFC 9497 verifiable mode over
// ristretto255; STAR, Davidson et al., CCS 2022, §4) and verifies every
// batch's DLEQ proof against the epoch's pinned public key. It lives on the
// client side of the layer rule, so an embedding program needs no server
// package.
package oprfclient

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	circloprf "github.com/cloudflare/circl/oprf"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crowdlog/crowdlog/infra/metrics/hist"
	"github.com/crowdlog/crowdlog/infra/retry"
	"github.com/crowdlog/crowdlog/ingest/pinfile"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// RoundTripSeconds is the process's histogram of OPRF round trips, one
// observation per evaluated batch (Client.Evaluate): from sending the
// blinded elements to the answer, re-sends after a timeout included
// (crowdlog_ingest_oprf_round_trip_seconds). Process-wide, so that every
// Client of a program counts, however it was made; a role running clients
// registers it (pipelines/runner.RegisterPublisher). A refused or failed
// request is not observed.
var RoundTripSeconds = hist.NewHistogram("crowdlog_ingest_oprf_round_trip_seconds",
	"OPRF round trip of one evaluated batch (blinded elements sent to answer, retries included).", nil, hist.RequestBuckets)

// Collectors returns the package's metrics (RoundTripSeconds).
func Collectors() []prometheus.Collector { return []prometheus.Collector{RoundTripSeconds} }

// TokenSource gives randomness tokens (protocol/token, KindRandomness):
// n tokens of epoch, each spent once (ingest/tokenclient gets them from the
// issuer). Errors (no budget left, not enrolled) are returned by Evaluate
// as they are.
type TokenSource interface {
	// RandomnessTokens returns n unspent randomness tokens of epoch.
	RandomnessTokens(ctx context.Context, epoch string, n int) ([]*token.Token, error)
}

// DefaultRetryFor is how long a request is re-sent when Client.RetryFor is
// 0: long enough for the randomness service to restart or a NATS node to
// be replaced.
const DefaultRetryFor = 5 * time.Minute

// ErrKeyChanged is returned by Client when the service's public key for an
// epoch differs from the one pinned (configured, seen earlier, or in the pin
// file): the service changed keys mid-epoch or shows clients different keys.
var ErrKeyChanged = errors.New("randomness: the epoch's OPRF public key changed")

// Client obtains ω for artifacts from the service and verifies every batch's
// proof against the epoch's pinned public key.
//
// The key of an epoch is, in order of precedence: Pinned[epoch]; the line
// for the epoch in PinFile; otherwise it is fetched from PublicKeySubject
// once, then remembered (and appended to PinFile when set: trust on first
// use across runs). A fetched key that differs from a pinned or remembered
// one fails with ErrKeyChanged; so does a proof against the pinned key
// failing (oprf.ErrProof). There is no fallback to unverified ω.
type Client struct {
	// NC is the connection requests go over (required; left open).
	NC      *nats.Conn
	Timeout time.Duration // per request; default 30 s
	// RetryFor bounds how long a request that timed out or found no
	// responder (the service restarting, a NATS node lost, a stalled
	// machine) is re-sent with backoff; 0 = DefaultRetryFor, negative =
	// never.
	// Re-sending is safe: the same blinded elements get the same
	// evaluations and reveal nothing new.
	RetryFor time.Duration
	Batch    int // elements per request; default 1024, at most oprf.MaxBatch
	// Pinned maps an epoch to its 32-byte OPRF public key, configured out of
	// band (e.g. `crowdlog run` pins the key it derives itself).
	Pinned map[string][]byte
	// PinFile, when set, holds "epoch hex-key" lines: keys pinned on first
	// use are appended, and later runs refuse a different key.
	PinFile string
	// Tokens supplies one Privacy Pass randomness token per element for a
	// service that requires them; nil sends none (--tokens off).
	Tokens TokenSource

	mu   sync.Mutex
	keys map[string]*pinnedKey
}

type pinnedKey struct {
	raw []byte
	pub *circloprf.PublicKey
}

// PublicKey returns the epoch's pinned OPRF public key (32 bytes), fetching
// it from the service when nothing is pinned yet. Every call asks the
// service and compares: a key that differs from the pinned one fails with
// ErrKeyChanged.
func (c *Client) PublicKey(ctx context.Context, epoch string) ([]byte, error) {
	fetched, err := c.fetch(ctx, epoch)
	if err != nil {
		return nil, err
	}
	p, err := c.pin(epoch, fetched)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), p.raw...), nil
}

func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 30 * time.Second
	}
	return c.Timeout
}

func (c *Client) fetch(ctx context.Context, epoch string) ([]byte, error) {
	b, err := (&oprf.PublicKeyRequest{Epoch: epoch}).MarshalBinary()
	if err != nil {
		return nil, err
	}
	m, err := c.request(ctx, protocol.RandomnessPublicKeySubject, b)
	if err != nil {
		return nil, fmt.Errorf("randomness public key request (is the deployment's randomness service running and reachable over Client.NC?): %w", err)
	}
	resp, err := oprf.ParsePublicKeyResponse(m.Data)
	if err != nil {
		return nil, fmt.Errorf("randomness public key response: %w", err)
	}
	if err := resp.Refusal.Err(); err != nil {
		return nil, err
	}
	if resp.Epoch != epoch {
		return nil, fmt.Errorf("randomness service answered the public key of epoch %q for %q", resp.Epoch, epoch)
	}
	return resp.Key, nil
}

// request sends one request with the per-request timeout and re-sends it
// with backoff, for up to RetryFor, while it times out or finds no
// responder. Other errors, and ctx ending, return at once.
func (c *Client) request(ctx context.Context, subject string, b []byte) (*nats.Msg, error) {
	once := func() (*nats.Msg, error) {
		rctx, cancel := context.WithTimeout(ctx, c.timeout())
		defer cancel()
		return c.NC.RequestWithContext(rctx, subject, b)
	}
	budget := c.RetryFor
	if budget < 0 {
		return once()
	}
	if budget == 0 {
		budget = DefaultRetryFor
	}
	bctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var m *nats.Msg
	err := retry.Forever(bctx, slog.Default(), "randomness request", 100*time.Millisecond, 5*time.Second, func() error {
		var err error
		if m, err = once(); err != nil && (ctx.Err() != nil || !transient(err)) {
			return retry.Permanent(err)
		}
		return err
	})
	if err != nil && ctx.Err() == nil && bctx.Err() != nil {
		err = fmt.Errorf("no answer within %s of retries: %w", budget, err)
	}
	return m, err
}

// transient reports request errors worth re-sending: a timeout or no
// responder (nats.go reports either while the service or a NATS node is
// away, or the connection is reconnecting).
func transient(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrDisconnected)
}

// pin returns the epoch's pinned key; when seen is non-nil it must equal the
// pinned key, or becomes it when nothing is pinned.
func (c *Client) pin(epoch string, seen []byte) (*pinnedKey, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[string]*pinnedKey{}
	}
	p := c.keys[epoch]
	if p == nil {
		raw, fromFile, err := c.configured(epoch)
		if err != nil {
			return nil, err
		}
		if raw == nil {
			if seen == nil {
				return nil, nil
			}
			raw = seen
		}
		pub, err := oprf.ParseOPRFPublicKey(raw)
		if err != nil {
			return nil, fmt.Errorf("randomness: public key of epoch %s: %w", epoch, err)
		}
		p = &pinnedKey{raw: append([]byte(nil), raw...), pub: pub}
		if c.PinFile != "" && !fromFile && c.Pinned[epoch] == nil {
			if err := appendPin(c.PinFile, epoch, raw); err != nil {
				return nil, err
			}
		}
		c.keys[epoch] = p
	}
	if seen != nil && !bytes.Equal(seen, p.raw) {
		return nil, fmt.Errorf("%w within epoch %s: pinned %x…, service now shows %x… — stop and compare keys with other clients out of band (a randomness service showing different keys can link reports)",
			ErrKeyChanged, epoch, p.raw[:4], seen[:min(4, len(seen))])
	}
	return p, nil
}

// configured returns the key configured for epoch in Pinned or PinFile.
func (c *Client) configured(epoch string) (raw []byte, fromFile bool, err error) {
	if k := c.Pinned[epoch]; k != nil {
		return k, false, nil
	}
	if c.PinFile == "" {
		return nil, false, nil
	}
	v, found, err := pinfile.Lookup(c.PinFile, epoch)
	if err != nil || !found {
		if err != nil {
			err = fmt.Errorf("randomness: %w", err)
		}
		return nil, false, err
	}
	k, err := hex.DecodeString(v)
	if err != nil {
		return nil, false, fmt.Errorf("randomness: pin file %s: bad key for epoch %s: %w", c.PinFile, epoch, err)
	}
	return k, true, nil
}

func appendPin(path, epoch string, key []byte) error {
	if err := pinfile.Append(path, epoch, hex.EncodeToString(key)); err != nil {
		return fmt.Errorf("randomness: %w", err)
	}
	return nil
}

// key returns the epoch's pinned public key, fetching (and pinning) it once
// when nothing is pinned.
func (c *Client) key(ctx context.Context, epoch string) (*circloprf.PublicKey, error) {
	p, err := c.pin(epoch, nil)
	if err != nil {
		return nil, err
	}
	if p == nil {
		if _, err := c.PublicKey(ctx, epoch); err != nil {
			return nil, err
		}
		if p, err = c.pin(epoch, nil); err != nil {
			return nil, err
		}
	}
	return p.pub, nil
}

// Evaluate returns one 64-byte ω per input, in order, for epoch. Inputs are
// built with oprf.OPRFInput. Requests are batched (one round trip and
// one DLEQ proof per Batch inputs). Errors: the service's refusal (wrapping
// protocol.ErrEpochNotOpen for a named epoch no operator opened,
// protocol.ErrEpochClosed for closed epochs, protocol.ErrEpochExpired and
// protocol.ErrEpochFuture for scheduled epochs outside their window; with
// tokens, oprf.ErrTokensMissing, oprf.ErrTokenInvalid, oprf.ErrTokenSpent
// or oprf.ErrTokensUnavailable, each naming the epoch), the TokenSource's
// error, the timeout, ErrKeyChanged, or oprf.ErrProof when a proof fails
// against the pinned key. With Tokens set, each batch spends one token per
// input; a retried request (timeout, no responder) re-sends the same
// elements and tokens, which the service accepts again.
func (c *Client) Evaluate(ctx context.Context, epoch string, inputs [][]byte) ([][]byte, error) {
	batch := c.Batch
	if batch <= 0 {
		batch = 1024
	}
	if batch > oprf.MaxBatch {
		batch = oprf.MaxBatch
	}
	pub, err := c.key(ctx, epoch)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, len(inputs))
	for lo := 0; lo < len(inputs); lo += batch {
		hi := min(lo+batch, len(inputs))
		bl, q, err := oprf.Blind(pub, epoch, inputs[lo:hi])
		if err != nil {
			return nil, err
		}
		if c.Tokens != nil {
			if q.Tokens, err = c.tokens(ctx, epoch, hi-lo); err != nil {
				return nil, err
			}
		}
		b, err := q.MarshalBinary()
		if err != nil {
			return nil, err
		}
		sent := time.Now()
		m, err := c.request(ctx, protocol.RandomnessSubject, b)
		if err != nil {
			return nil, fmt.Errorf("randomness request (is the deployment's randomness service running and reachable over Client.NC?): %w", err)
		}
		rtt := time.Since(sent)
		resp, err := oprf.ParseRandomnessResponse(m.Data)
		if err != nil {
			return nil, fmt.Errorf("randomness response: %w", err)
		}
		if err := oprf.TokenRefusal(resp.Refusal); err != nil {
			return nil, fmt.Errorf("epoch %s: %w", epoch, err)
		}
		if err := resp.Refusal.Err(); err != nil {
			return nil, fmt.Errorf("epoch %s: %w", epoch, err)
		}
		if len(resp.Elements) != hi-lo {
			return nil, fmt.Errorf("randomness service answered %d elements for %d", len(resp.Elements), hi-lo)
		}
		omegas, err := oprf.Finalize(bl, resp)
		if err != nil {
			return nil, fmt.Errorf("epoch %s: %w", epoch, err)
		}
		RoundTripSeconds.Observe(rtt.Seconds())
		out = append(out, omegas...)
	}
	return out, nil
}

// tokens gets n randomness tokens of epoch from c.Tokens, encoded.
func (c *Client) tokens(ctx context.Context, epoch string, n int) ([][]byte, error) {
	toks, err := c.Tokens.RandomnessTokens(ctx, epoch, n)
	if err != nil {
		return nil, fmt.Errorf("randomness tokens for epoch %s: %w", epoch, err)
	}
	if len(toks) != n {
		return nil, fmt.Errorf("randomness tokens for epoch %s: the token source gave %d tokens for %d elements", epoch, len(toks), n)
	}
	out := make([][]byte, n)
	for i, t := range toks {
		if out[i], err = t.MarshalBinary(); err != nil {
			return nil, fmt.Errorf("randomness token for epoch %s: %w", epoch, err)
		}
	}
	return out, nil
}
