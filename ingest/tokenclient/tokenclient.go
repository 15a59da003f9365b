// Package tokenclient is the client of the issuer role (issuer/): it gets
// Privacy Pass tokens (RFC 9578 §5, batched: one request and one DLEQ
// proof per batch, package protocol/token) and ARC credentials
// (draft-ietf-privacypass-arc-protocol) for one client identity, signing
// every request with the identity's Ed25519 key (RFC 9576 §3.2: the
// issuer's attester authenticates the client; it sees only blinded
// values, so the tokens it issues cannot be linked to this identity when
// they are spent).
//
// The issuer's public keys of an epoch are fetched once and pinned for the
// Client's lifetime, and across restarts in Client.PinFile (trust on first
// use): every issuance is checked against them (the DLEQ proof of a token
// batch, the proof of an ARC response), so an issuer that switches keys to
// tag this client — now or when it restarts — is caught (RFC 9576 §6.2,
// key consistency).
package tokenclient

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crowdlog/crowdlog/ingest/pinfile"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// Errors of the issuer's refusals (errors.Is works on what Tokens and
// Credential return).
var (
	// ErrBudget: the identity's budget of the epoch and kind is spent; the
	// error names the epoch, the kind and the budget.
	ErrBudget = token.ErrBudget
	// ErrNotEnrolled: the issuer's attester does not know this identity
	// (`crowdlog keys enroll` its public key).
	ErrNotEnrolled = token.ErrNotEnrolled
	// ErrKeyChanged: the issuer shows public keys for an epoch other than
	// those pinned in Client.PinFile: it changed keys mid-epoch or shows
	// clients different keys, which would let it link their tokens.
	ErrKeyChanged = errors.New("tokenclient: the issuer's public keys of the epoch changed")
	// ErrUnavailable: the issuer answered "temporarily unavailable" (its
	// counter store failed; it counted nothing) until IssueAttempts ×
	// Client.Timeout had passed.
	ErrUnavailable = token.ErrUnavailable
)

// DefaultTimeout bounds one issuer request when Client.Timeout is 0. A
// batch of a few hundred tokens costs the issuer well under a second, but
// an issuer shared by many clients on a loaded machine queues requests:
// 10 s was measured too short for 143 tokens with 8 clients replaying on
// 2 cores.
const DefaultTimeout = 30 * time.Second

// replayRetries is how often a request refused as a replay (another request
// of this identity signed in the same millisecond) is signed again.
const replayRetries = 3

// Client gets tokens and credentials for one identity. Safe for concurrent
// use.
type Client struct {
	// NC is the connection to the issuer (requests; left open).
	NC       *nats.Conn
	Identity ed25519.PrivateKey // the client's identity key (keydir.EnsureIdentityKey)
	Timeout  time.Duration      // per request; 0 means DefaultTimeout; IssueAttempts × Timeout bounds a request with its re-sends
	Logger   *slog.Logger       // nil: slog.Default()
	// PinFile, when set, holds "EPOCH hex-fingerprint" lines, the
	// fingerprint being SHA-256 of the epoch's token.KeysResponse
	// encoding (all three public keys, merged from both issuers when the
	// randomness operator issues randomness tokens): keys seen first are appended, and
	// a later Client (after a restart) refuses other keys for the epoch
	// with ErrKeyChanged. Empty: pinned for this Client's lifetime only.
	PinFile string

	mu     sync.Mutex
	keys   map[string]*token.KeysResponse // pinned per epoch
	split  map[string]bool                // epochs whose randomness tokens come from the randomness operator's issuer
	lastTS int64                          // last timestamp signed, unix ms
	stats  Stats
	// Prio3 token requests that failed, kept so that a later call for
	// the same report sends the same content (prio3Token)
	pending    map[pendingKey]pendingToken
	pendingARC map[string]pendingCredential // by epoch, as pending
}

func (c *Client) log() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

// timestamp is a fresh millisecond timestamp, strictly after the last one
// this Client signed (the issuer refuses a second request of an identity
// with the same timestamp as a replay).
func (c *Client) timestamp() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ms := time.Now().UnixMilli()
	if ms <= c.lastTS {
		ms = c.lastTS + 1
	}
	c.lastTS = ms
	return time.UnixMilli(ms)
}

// timeout is Timeout, or DefaultTimeout when it is 0.
func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

// request sends b on subj and returns the reply, bounded by Timeout (and
// by ctx).
func (c *Client) request(ctx context.Context, subj string, b []byte) ([]byte, error) {
	if c.NC == nil {
		return nil, errors.New("tokenclient: no NATS connection")
	}
	t := c.timeout()
	rctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	m, err := c.NC.RequestWithContext(rctx, subj, b)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("tokenclient: no issuer answers on %s: %w", subj, err)
		}
		return nil, fmt.Errorf("tokenclient: request %s (waited at most %s for the issuer): %w", subj, t, err)
	}
	return m.Data, nil
}

// Keys returns the issuer's public keys of epoch, fetched on first use
// and pinned for this Client's lifetime (and in PinFile). Errors wrap
// ErrKeyChanged when they differ from the keys pinned in PinFile.
func (c *Client) Keys(ctx context.Context, epoch string) (*token.KeysResponse, error) {
	c.mu.Lock()
	k := c.keys[epoch]
	c.mu.Unlock()
	if k != nil {
		return k, nil
	}
	b, err := (&token.KeysRequest{Epoch: epoch}).MarshalBinary()
	if err != nil {
		return nil, err
	}
	resp, err := c.fetchKeys(ctx, protocol.IssuerPublicKeySubject, epoch, b)
	if err != nil {
		return nil, err
	}
	split := len(resp.Randomness) == 0
	if split {
		// key custody split by verifier: the randomness operator issues
		// randomness tokens; merge its key into the one response pinned
		rr, err := c.fetchKeys(ctx, protocol.IssuerRandomnessPublicKeySubject, epoch, b)
		if err != nil {
			return nil, err
		}
		if len(rr.Randomness) == 0 {
			return nil, fmt.Errorf("tokenclient: the randomness operator's issuer sent no randomness-token key for epoch %s", epoch)
		}
		resp.Randomness = rr.Randomness
	}
	if len(resp.Report) == 0 {
		return nil, fmt.Errorf("tokenclient: the issuer on %s sent no report-token key for epoch %s", protocol.IssuerPublicKeySubject, epoch)
	}
	if err := c.checkPin(epoch, resp); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys, c.split = map[string]*token.KeysResponse{}, map[string]bool{}
	}
	if old := c.keys[epoch]; old != nil { // a concurrent fetch won: keep the first
		return old, nil
	}
	c.keys[epoch], c.split[epoch] = resp, split
	return resp, nil
}

// IssueAttempts is how often an issue request is sent in all when the
// issuer's answers do not come within Client.Timeout: each attempt is
// signed again (fresh timestamp) over the same blinded elements (or ARC
// request), so the issuer recognizes it by its content
// (token.IssueRequest.ContentID) and answers it again without counting
// it twice when only an earlier answer was lost (issuer.RetryRecords).
// A keys request that timed out is sent as often. IssueAttempts ×
// Client.Timeout (90 s with DefaultTimeout) also bounds everything a
// request may take, retries and their waits included (retry).
const IssueAttempts = 3

// Reasons a request is sent again: the label of
// crowdlog_ingest_issuer_retries_total and the fields of Stats.
const (
	// RetryTimeout: the answer did not come within Client.Timeout (the
	// request may have been served: it is sent again with the same
	// content, counted once). At most IssueAttempts sends, re-sent at
	// once (the wait was the timeout).
	RetryTimeout = "timeout"
	// RetryNoResponders: no issuer was subscribed to the subject
	// (nats.ErrNoResponders: it is restarting, a rolling update, or not
	// started yet); nothing reached an issuer. Re-sent after a backoff.
	RetryNoResponders = "no-responders"
	// RetryUnavailable: the issuer answered token.ErrUnavailable (its
	// counter store failed; nothing counted). Re-sent after a backoff.
	RetryUnavailable = "unavailable"
	// RetryReplay: the issuer refused the request as a replay (another
	// request of this identity signed in the same millisecond); signed
	// again at once, at most replayRetries times.
	RetryReplay = "replay"
)

// RetryReasons are the reasons, in order.
var RetryReasons = []string{RetryTimeout, RetryNoResponders, RetryUnavailable, RetryReplay}

// Backoff between sends after no responders or an unavailable answer:
// exponential from retryInitial, doubling with ±50 % jitter, at most
// retryMax (github.com/cenkalti/backoff/v5, the project's retry library).
const (
	retryInitial = 250 * time.Millisecond
	retryMax     = 5 * time.Second
)

// Retries counts, process-wide, requests to issuers sent again, by reason
// (RetryReasons), and requests given up after their bound ("gave-up"):
// crowdlog_ingest_issuer_retries_total{reason}. Every Client of a program
// counts, however it was made; a role running clients registers it
// (Collectors; pipelines/runner.RegisterPublisher).
var Retries = newRetries()

func newRetries() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "crowdlog_ingest_issuer_retries_total",
		Help: "Requests to a token issuer sent again, by reason (timeout, no-responders, unavailable, replay), and given up after their bound (gave-up)."},
		[]string{"reason"})
	for _, r := range append(slices.Clone(RetryReasons), "gave-up") {
		v.WithLabelValues(r)
	}
	return v
}

// Collectors returns the package's metrics (Retries).
func Collectors() []prometheus.Collector { return []prometheus.Collector{Retries} }

// Stats are a Client's counters since it was made: requests sent again by
// reason (Retry*) and requests given up after IssueAttempts × Timeout.
type Stats struct {
	// RetriedTimeout counts requests sent again after no answer within
	// Client.Timeout (RetryTimeout).
	RetriedTimeout int64
	// RetriedNoResponders counts requests sent again after NATS found no
	// issuer subscribed (nats.ErrNoResponders; RetryNoResponders).
	RetriedNoResponders int64
	// RetriedUnavailable counts requests sent again after the issuer
	// answered ErrUnavailable (RetryUnavailable).
	RetriedUnavailable int64
	// RetriedReplay counts requests signed and sent again after the
	// issuer refused them as replayed (RetryReplay).
	RetriedReplay int64
	// GaveUp counts requests given up after IssueAttempts × Timeout.
	GaveUp int64
}

// Stats returns a copy of the Client's counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *Client) count(reason string) {
	Retries.WithLabelValues(reason).Inc()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch reason {
	case RetryTimeout:
		c.stats.RetriedTimeout++
	case RetryNoResponders:
		c.stats.RetriedNoResponders++
	case RetryUnavailable:
		c.stats.RetriedUnavailable++
	case RetryReplay:
		c.stats.RetriedReplay++
	default:
		c.stats.GaveUp++
	}
}

// retryReason is why err may be cured by sending the request again, or ""
// when it may not (a refusal, a bad answer, ctx ending).
func retryReason(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return ""
	case errors.Is(err, nats.ErrNoResponders):
		return RetryNoResponders
	case errors.Is(err, token.ErrUnavailable):
		return RetryUnavailable
	case errors.Is(err, token.ErrReplay):
		return RetryReplay
	case errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded):
		return RetryTimeout
	}
	return ""
}

// retry calls send (one request to subj; what names it in logs and
// errors: "the same randomness request of epoch E"; issue: an issue
// request, which the issuer counts, not a keys request) until it succeeds or
// fails for a reason that sending again cannot cure, for at most
// IssueAttempts × Timeout in all (bound; send's ctx carries it):
// RetryTimeout re-sends at once, at most IssueAttempts sends in all;
// RetryNoResponders and RetryUnavailable re-send after a backoff
// (retryInitial doubling to retryMax, jittered) while the bound allows;
// RetryReplay re-signs at once, at most replayRetries times. Each re-send
// is logged at Warn and counted (Stats, Retries). Once the bound passes,
// the error says how often and how long it tried, which reason the last
// attempt failed for and what to do, wrapping the last attempt's error
// (errors.Is nats.ErrNoResponders, token.ErrUnavailable, nats.ErrTimeout
// or context.DeadlineExceeded).
func (c *Client) retry(ctx context.Context, subj, what string, issue bool, send func(ctx context.Context) error) error {
	t := c.timeout()
	bound := IssueAttempts * t
	bctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	b := &backoff.ExponentialBackOff{InitialInterval: retryInitial, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: retryMax}
	b.Reset()
	tries := map[string]int{}
	sends := 0
	var other string // the last reason other than a timeout, and its error
	var otherErr error
	for {
		sends++
		err := send(bctx)
		if err == nil {
			return nil
		}
		reason := retryReason(ctx, err)
		if reason == "" {
			return err
		}
		tries[reason]++
		if reason == RetryTimeout && bctx.Err() != nil && other != "" {
			// the bound, not the issuer, ended the last send: say why
			// the sends before it failed
			return c.gaveUp(subj, what, issue, other, sends, tries, t, bound,
				fmt.Errorf("%w (the last send, cut short by the bound: %w)", otherErr, err))
		}
		if reason != RetryTimeout {
			other, otherErr = reason, err
		}
		var wait time.Duration
		switch reason {
		case RetryTimeout:
			if tries[reason] >= IssueAttempts {
				return c.gaveUp(subj, what, issue, reason, sends, tries, t, bound, err)
			}
		case RetryReplay:
			if tries[reason] > replayRetries {
				return err
			}
		default:
			wait = b.NextBackOff()
		}
		if dl, _ := bctx.Deadline(); bctx.Err() != nil || time.Until(dl) <= wait {
			return c.gaveUp(subj, what, issue, reason, sends, tries, t, bound, err)
		}
		c.count(reason)
		if reason != RetryReplay {
			c.log().Warn("tokenclient: sending the same request to the issuer again (counted once)",
				"subject", subj, "request", what, "reason", reason, "send", sends+1, "in", wait.Round(time.Millisecond), "err", err)
		}
		if wait > 0 {
			tm := time.NewTimer(wait)
			select {
			case <-tm.C:
			case <-bctx.Done():
				tm.Stop()
				if ctx.Err() != nil {
					return errors.Join(err, ctx.Err())
				}
				return c.gaveUp(subj, what, issue, reason, sends, tries, t, bound, err)
			}
		}
	}
}

// gaveUp is retry's final error, by the reason of the last attempt.
func (c *Client) gaveUp(subj, what string, issue bool, reason string, sends int, tries map[string]int, t, bound time.Duration, err error) error {
	c.count("gave-up")
	// an issuer counts a request it answered unavailable only when its
	// store kept a write it saw fail, and one that timed out perhaps
	counted := "nothing was counted"
	switch {
	case !issue:
		counted = "a keys request is never counted"
	case tries[RetryTimeout] > 0 || tries[RetryUnavailable] > 0:
		counted = "the issuer counted it at most once, and its tokens are lost if it did"
	}
	switch reason {
	case RetryNoResponders:
		return fmt.Errorf("tokenclient: no issuer answered on %s for %s (%d sends of %s; %s): it is restarting or not running — check that the operator's `crowdlog issuer` serves %s (with tokens off, ingest.Config.Tokens, no issuer is needed), then send again later: %w",
			subj, bound, sends, what, counted, subj, err)
	case RetryUnavailable:
		return fmt.Errorf("tokenclient: the issuer on %s stayed temporarily unavailable for %s (%d sends of %s; its JetStream counters bucket did not answer; %s): its operator checks the NATS JetStream servers and the bucket (`crowdlog streams`), then send again later: %w",
			subj, bound, sends, what, counted, err)
	}
	return fmt.Errorf("tokenclient: the issuer answered none of %d requests on %s (all %s), each given %s (%s in all; %s: check that the issuer runs, or raise Client.Timeout for a loaded one): %w",
		sends, subj, what, t, bound, counted, err)
}

// fetchKeys asks subj for the keys of epoch (request b) and checks the
// answer names epoch; a request that timed out or found no issuer is sent
// again (retry).
func (c *Client) fetchKeys(ctx context.Context, subj, epoch string, b []byte) (*token.KeysResponse, error) {
	var data []byte
	err := c.retry(ctx, subj, "the same keys request of epoch "+epoch, false, func(ctx context.Context) (err error) {
		data, err = c.request(ctx, subj, b)
		return err
	})
	if err != nil {
		return nil, err
	}
	resp, err := token.ParseKeysResponse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenclient: issuer keys of epoch %s: %w", epoch, err)
	}
	if err := token.IssuerRefusalErr(resp.Refusal); err != nil {
		return nil, fmt.Errorf("tokenclient: issuer keys of epoch %s: %w", epoch, err)
	}
	if resp.Epoch != epoch {
		return nil, fmt.Errorf("tokenclient: asked for the keys of epoch %s, got epoch %s", epoch, resp.Epoch)
	}
	return resp, nil
}

// issuerSubject is where requests of kind for epoch go: the randomness
// operator's issuer for randomness tokens when the epoch's keys came
// split (Keys), the issuer otherwise.
func (c *Client) issuerSubject(kind token.Kind, epoch string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if kind == token.KindRandomness && c.split[epoch] {
		return protocol.IssuerRandomnessSubject
	}
	if kind == token.KindPrio3Helper {
		return protocol.IssuerPrio3HelperSubject
	}
	if kind == token.KindPrio3Leader {
		return protocol.IssuerPrio3LeaderSubject
	}
	return protocol.IssuerSubject
}

// pinMu serializes pin-file reads and appends within the process (a
// replay runs one Client per identity on one pin file).
var pinMu sync.Mutex

// checkPin compares the epoch's keys with the pin in PinFile, or pins them
// there when the epoch has none; nothing without PinFile.
func (c *Client) checkPin(epoch string, resp *token.KeysResponse) error {
	if c.PinFile == "" {
		return nil
	}
	b, err := resp.MarshalBinary()
	if err != nil {
		return err
	}
	fp := sha256.Sum256(b)
	want := hex.EncodeToString(fp[:])
	pinMu.Lock()
	defer pinMu.Unlock()
	pinned, found, err := pinfile.Lookup(c.PinFile, epoch)
	if err != nil {
		return fmt.Errorf("tokenclient: %w", err)
	}
	if !found {
		if err := pinfile.Append(c.PinFile, epoch, want); err != nil {
			return fmt.Errorf("tokenclient: %w", err)
		}
		return nil
	}
	if len(pinned) != 2*sha256.Size {
		return fmt.Errorf("tokenclient: pin file %s: bad fingerprint for epoch %s (want %d hex digits)", c.PinFile, epoch, 2*sha256.Size)
	}
	if pinned != want {
		return fmt.Errorf("%w: epoch %s pinned %s… in %s, the issuer now shows %x… — stop and compare keys with other clients out of band (an issuer showing a client keys of its own can link that client's tokens)",
			ErrKeyChanged, epoch, pinned[:8], c.PinFile, fp[:4])
	}
	return nil
}

// issue signs q (fresh timestamp) and sends it, again with the same
// content and a fresh timestamp after a timeout, no responders, an
// unavailable answer or a replay refusal (retry; the issuer counts it
// once: IssueAttempts), for at most IssueAttempts × Timeout.
func (c *Client) issue(ctx context.Context, q *token.IssueRequest) (*token.IssueResponse, error) {
	if len(c.Identity) != ed25519.PrivateKeySize {
		return nil, errors.New("tokenclient: no identity key (keydir.EnsureIdentityKey)")
	}
	subj := c.issuerSubject(q.Kind, q.Epoch)
	var resp *token.IssueResponse
	err := c.retry(ctx, subj, fmt.Sprintf("the same %s request of epoch %s", q.Kind, q.Epoch), true, func(ctx context.Context) error {
		q.Timestamp = c.timestamp()
		if err := q.Sign(c.Identity); err != nil {
			return err
		}
		b, err := q.MarshalBinary()
		if err != nil {
			return err
		}
		data, err := c.request(ctx, subj, b)
		if err != nil {
			return err
		}
		if resp, err = token.ParseIssueResponse(data); err != nil {
			return fmt.Errorf("tokenclient: issuer response: %w", err)
		}
		return resp.Err()
	})
	if err != nil {
		return nil, err
	}
	if resp.Kind != q.Kind {
		return nil, fmt.Errorf("tokenclient: asked for %s, the issuer answered %s", q.Kind, resp.Kind)
	}
	return resp, nil
}

// Tokens returns one token of kind (token.KindRandomness or
// token.KindReport) for epoch per nonce, in order: batches of at most
// token.MaxBatch, one issuer round trip and one DLEQ proof each, checked
// against the epoch's pinned public key. Errors wrap ErrBudget (naming the
// epoch, the kind and the budget), ErrNotEnrolled, or token.ErrProof for a
// proof that fails; tokens of batches before a failing one are lost (the
// issuer counted them).
func (c *Client) Tokens(ctx context.Context, kind token.Kind, epoch string, nonces [][32]byte) ([]*token.Token, error) {
	if !kind.Valid() {
		return nil, fmt.Errorf("tokenclient: no tokens of kind %s", kind)
	}
	if len(nonces) == 0 {
		return nil, nil
	}
	keys, err := c.Keys(ctx, epoch)
	if err != nil {
		return nil, err
	}
	pub, err := keys.Key(kind)
	if err != nil {
		return nil, err
	}
	out := make([]*token.Token, 0, len(nonces))
	for start := 0; start < len(nonces); start += token.MaxBatch {
		batch := nonces[start:min(start+token.MaxBatch, len(nonces))]
		p, blinded, err := token.NewRequest(pub, kind, epoch, batch)
		if err != nil {
			return nil, err
		}
		resp, err := c.issue(ctx, &token.IssueRequest{Kind: kind, Epoch: epoch, Blinded: blinded})
		if err != nil {
			return nil, fmt.Errorf("tokenclient: %d %s tokens of epoch %s: %w", len(batch), kind, epoch, err)
		}
		toks, err := p.Finalize(resp.Evaluated, resp.Proof)
		if err != nil {
			return nil, fmt.Errorf("tokenclient: %d %s tokens of epoch %s: %w", len(batch), kind, epoch, err)
		}
		out = append(out, toks...)
		c.log().Debug("tokenclient: tokens", "kind", kind.String(), "epoch", epoch, "count", len(toks), "used", resp.Used, "limit", resp.Limit)
	}
	return out, nil
}

// Prio3HelperToken returns the encoded helper token of a Prio3 report of
// campaign and day whose nonce is nonce (prio3.Report.HelperNonce), issued
// by the Prio3 helper operator's issuer (protocol.IssuerPrio3HelperSubject)
// under the key of epoch token.Prio3Epoch(campaign, day), pinned like
// Keys. The issuer gives one per identity per campaign-day: a second call
// for the day is refused with ErrBudget. A call that failed (the issuer
// away past IssueAttempts × Timeout, an answer lost) is kept in this
// Client's memory: the next call with the same nonce sends the same
// blinded element, which an issuer that already counted it answers again
// (issuer.RetryRecords) instead of refusing it as over budget. Errors
// also wrap ErrNotEnrolled, token.ErrProof and ErrKeyChanged.
func (c *Client) Prio3HelperToken(ctx context.Context, campaign string, day uint32, nonce [32]byte) ([]byte, error) {
	return c.prio3Token(ctx, token.KindPrio3Helper, campaign, day, nonce)
}

// Prio3LeaderToken is Prio3HelperToken for the report's leader token
// (token.KindPrio3Leader, same nonce), issued by the Prio3 leader
// operator's issuer (protocol.IssuerPrio3LeaderSubject): one per identity
// per campaign-day, its key pinned under "prio3-leader:" + the epoch.
func (c *Client) Prio3LeaderToken(ctx context.Context, campaign string, day uint32, nonce [32]byte) ([]byte, error) {
	return c.prio3Token(ctx, token.KindPrio3Leader, campaign, day, nonce)
}

// prio3Token fetches one token of kind KindPrio3Helper or KindPrio3Leader.
func (c *Client) prio3Token(ctx context.Context, kind token.Kind, campaign string, day uint32, nonce [32]byte) ([]byte, error) {
	epoch := token.Prio3Epoch(campaign, day)
	keysSubject, slot := protocol.IssuerPrio3HelperPublicKeySubject, epoch
	if kind == token.KindPrio3Leader {
		// both kinds share the epoch name: the leader's keys are cached
		// and pinned under their own name
		keysSubject, slot = protocol.IssuerPrio3LeaderPublicKeySubject, "prio3-leader:"+epoch
	}
	c.mu.Lock()
	k := c.keys[slot]
	c.mu.Unlock()
	if k == nil {
		b, err := (&token.KeysRequest{Epoch: epoch}).MarshalBinary()
		if err != nil {
			return nil, err
		}
		if k, err = c.fetchKeys(ctx, keysSubject, epoch, b); err != nil {
			return nil, err
		}
		if pub, _ := k.Key(kind); len(pub) == 0 {
			return nil, fmt.Errorf("tokenclient: the issuer on %s sent no %s key for epoch %s", keysSubject, kind, epoch)
		}
		if err := c.checkPin(slot, k); err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.keys == nil {
			c.keys, c.split = map[string]*token.KeysResponse{}, map[string]bool{}
		}
		if old := c.keys[slot]; old != nil {
			k = old
		} else {
			c.keys[slot] = k
		}
		c.mu.Unlock()
	}
	pub, _ := k.Key(kind)
	// a request that failed before (its answer lost, or the issuer away
	// past the bound) is sent again with the same blinded element: an
	// issuer that counted it answers it again (one token per day: new
	// content would be refused as over budget)
	pk := pendingKey{kind, epoch, nonce}
	c.mu.Lock()
	pend, ok := c.pending[pk]
	c.mu.Unlock()
	if !ok {
		p, blinded, err := token.NewRequest(pub, kind, epoch, [][32]byte{nonce})
		if err != nil {
			return nil, err
		}
		pend = pendingToken{p, blinded}
		c.mu.Lock()
		if c.pending == nil || len(c.pending) >= maxPending {
			c.pending = map[pendingKey]pendingToken{}
		}
		c.pending[pk] = pend
		c.mu.Unlock()
	}
	resp, err := c.issue(ctx, &token.IssueRequest{Kind: kind, Epoch: epoch, Blinded: pend.blinded})
	if err != nil {
		return nil, fmt.Errorf("tokenclient: %s token of %s: %w", kind, epoch, err)
	}
	c.mu.Lock()
	delete(c.pending, pk)
	c.mu.Unlock()
	toks, err := pend.p.Finalize(resp.Evaluated, resp.Proof)
	if err != nil {
		return nil, fmt.Errorf("tokenclient: %s token of %s: %w", kind, epoch, err)
	}
	return toks[0].MarshalBinary()
}

// pendingKey names a Prio3 token request not answered yet: its kind,
// epoch and nonce (the report's, prio3.Report.HelperNonce).
type pendingKey struct {
	kind  token.Kind
	epoch string
	nonce [32]byte
}

// pendingToken is such a request's blind and blinded element.
type pendingToken struct {
	p       *token.Pending
	blinded [][]byte
}

// pendingCredential is an ARC credential request not answered yet.
type pendingCredential struct {
	secrets *arc.ClientSecrets
	req     *arc.CredentialRequest
	encoded []byte
}

// maxPending bounds the Prio3 token (and ARC) requests a Client keeps for a retry
// (in memory only); past it they are forgotten, all at once.
const maxPending = 256

// Credential returns a new ARC credential of epoch
// (draft-ietf-privacypass-arc-protocol): the issuer gives one per identity
// and epoch, so keep it (a second call is refused with ErrBudget). A call
// that failed (the issuer away past IssueAttempts × Timeout, an answer
// lost) is kept in this Client's memory and the next call sends the same
// request, which an issuer that already counted it answers again. The
// issuer's proof is checked against the epoch's pinned ARC public key.
func (c *Client) Credential(ctx context.Context, epoch string) (*arc.Credential, error) {
	keys, err := c.Keys(ctx, epoch)
	if err != nil {
		return nil, err
	}
	if len(keys.ARC) == 0 {
		return nil, fmt.Errorf("tokenclient: the issuer published no ARC key for epoch %s", epoch)
	}
	pk, err := arc.ParsePublicKey(keys.ARC)
	if err != nil {
		return nil, fmt.Errorf("tokenclient: issuer ARC key of epoch %s: %w", epoch, err)
	}
	// a request that failed before is sent again as it was: an issuer
	// that counted it answers it again (one credential per epoch: a new
	// request would be refused as over budget)
	c.mu.Lock()
	pend, ok := c.pendingARC[epoch]
	c.mu.Unlock()
	if !ok {
		secrets, req, err := arc.NewCredentialRequest(rand.Reader)
		if err != nil {
			return nil, err
		}
		rb, err := req.MarshalBinary()
		if err != nil {
			return nil, err
		}
		pend = pendingCredential{secrets, req, rb}
		c.mu.Lock()
		if c.pendingARC == nil || len(c.pendingARC) >= maxPending {
			c.pendingARC = map[string]pendingCredential{}
		}
		c.pendingARC[epoch] = pend
		c.mu.Unlock()
	}
	secrets, req := pend.secrets, pend.req
	resp, err := c.issue(ctx, &token.IssueRequest{Kind: token.KindARC, Epoch: epoch, ARC: pend.encoded})
	if err != nil {
		return nil, fmt.Errorf("tokenclient: ARC credential of epoch %s: %w", epoch, err)
	}
	c.mu.Lock()
	delete(c.pendingARC, epoch)
	c.mu.Unlock()
	cresp, err := arc.ParseCredentialResponse(resp.ARC)
	if err != nil {
		return nil, fmt.Errorf("tokenclient: ARC credential of epoch %s: %w", epoch, err)
	}
	cred, err := secrets.Finalize(pk, req, cresp)
	if err != nil {
		return nil, fmt.Errorf("tokenclient: ARC credential of epoch %s: %w", epoch, err)
	}
	return cred, nil
}
