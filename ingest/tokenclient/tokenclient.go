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
	"sync"
	"time"

	"github.com/nats-io/nats.go"

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
	Timeout  time.Duration      // per request; 0 means DefaultTimeout
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

// request sends b on subj and returns the reply, bounded by Timeout.
func (c *Client) request(ctx context.Context, subj string, b []byte) ([]byte, error) {
	if c.NC == nil {
		return nil, errors.New("tokenclient: no NATS connection")
	}
	t := c.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	m, err := c.NC.RequestWithContext(rctx, subj, b)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("tokenclient: no issuer answers on %s (the deployment runs none: turn tokens off, ingest.Config.Tokens; or its operator has not started it): %w", subj, err)
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

// keysAttempts is how often a public-key request that timed out is sent
// in all (it changes nothing at the issuer).
const keysAttempts = 3

// IssueAttempts is how often an issue request is sent in all when the
// issuer's answers do not come within Client.Timeout: each attempt is
// signed again (fresh timestamp) over the same blinded elements (or ARC
// request), so the issuer recognizes it by its content
// (token.IssueRequest.ContentID) and answers it again without counting
// it twice when only an earlier answer was lost (issuer.RetryRecords).
// One batch waits at most IssueAttempts × Timeout for the issuer
// (90 s with DefaultTimeout), plus what a replay refusal adds
// (replayRetries).
const IssueAttempts = 3

// fetchKeys asks subj for the keys of epoch (request b) and checks the
// answer names epoch. A request that timed out (a loaded issuer) is sent
// again, keysAttempts in all, with a Warn log line.
func (c *Client) fetchKeys(ctx context.Context, subj, epoch string, b []byte) (*token.KeysResponse, error) {
	var data []byte
	var err error
	for attempt := 1; ; attempt++ {
		data, err = c.request(ctx, subj, b)
		if err == nil || attempt == keysAttempts || ctx.Err() != nil ||
			!(errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)) {
			break
		}
		c.log().Warn("tokenclient: the issuer's public keys did not come in time; asking again", "subject", subj, "attempt", attempt+1, "err", err)
	}
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

// timedOut reports whether err is a request that got no answer in time
// (and not the caller's context ending).
func timedOut(ctx context.Context, err error) bool {
	return ctx.Err() == nil && (errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded))
}

// issue signs q (fresh timestamp) and sends it. A replay refusal (same
// millisecond as another request of this identity) is signed again, up to
// replayRetries times; a request whose answer does not come in time is
// signed again and re-sent with the same content, IssueAttempts in all,
// with a Warn log line (the issuer counts it once: IssueAttempts).
func (c *Client) issue(ctx context.Context, q *token.IssueRequest) (*token.IssueResponse, error) {
	if len(c.Identity) != ed25519.PrivateKeySize {
		return nil, errors.New("tokenclient: no identity key (keydir.EnsureIdentityKey)")
	}
	subj := c.issuerSubject(q.Kind, q.Epoch)
	timeouts, replays := 0, 0
	for {
		q.Timestamp = c.timestamp()
		if err := q.Sign(c.Identity); err != nil {
			return nil, err
		}
		b, err := q.MarshalBinary()
		if err != nil {
			return nil, err
		}
		data, err := c.request(ctx, subj, b)
		if err != nil {
			if !timedOut(ctx, err) {
				return nil, err
			}
			if timeouts++; timeouts >= IssueAttempts {
				t := c.Timeout
				if t <= 0 {
					t = DefaultTimeout
				}
				return nil, fmt.Errorf("tokenclient: the issuer answered none of %d requests on %s (all the same %s request of epoch %s), each given %s (%s in all; one that reached it was counted once and its tokens are lost: check that the issuer runs, or raise Client.Timeout for a loaded one): %w",
					timeouts, subj, q.Kind, q.Epoch, t, time.Duration(timeouts)*t, err)
			}
			c.log().Warn("tokenclient: the issuer's answer did not come in time; sending the same request again (counted once)",
				"subject", subj, "kind", q.Kind.String(), "epoch", q.Epoch, "attempt", timeouts+1, "of", IssueAttempts, "err", err)
			continue
		}
		resp, err := token.ParseIssueResponse(data)
		if err != nil {
			return nil, fmt.Errorf("tokenclient: issuer response: %w", err)
		}
		if err := resp.Err(); err != nil {
			if errors.Is(err, token.ErrReplay) && replays < replayRetries {
				replays++
				continue
			}
			return nil, err
		}
		if resp.Kind != q.Kind {
			return nil, fmt.Errorf("tokenclient: asked for %s, the issuer answered %s", q.Kind, resp.Kind)
		}
		return resp, nil
	}
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
// for the day is refused with ErrBudget. Errors also wrap ErrNotEnrolled,
// token.ErrProof and ErrKeyChanged.
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
	p, blinded, err := token.NewRequest(pub, kind, epoch, [][32]byte{nonce})
	if err != nil {
		return nil, err
	}
	resp, err := c.issue(ctx, &token.IssueRequest{Kind: kind, Epoch: epoch, Blinded: blinded})
	if err != nil {
		return nil, fmt.Errorf("tokenclient: %s token of %s: %w", kind, epoch, err)
	}
	toks, err := p.Finalize(resp.Evaluated, resp.Proof)
	if err != nil {
		return nil, fmt.Errorf("tokenclient: %s token of %s: %w", kind, epoch, err)
	}
	return toks[0].MarshalBinary()
}

// Credential returns a new ARC credential of epoch
// (draft-ietf-privacypass-arc-protocol): the issuer gives one per identity
// and epoch, so keep it (a second call is refused with ErrBudget). The
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
	secrets, req, err := arc.NewCredentialRequest(rand.Reader)
	if err != nil {
		return nil, err
	}
	rb, err := req.MarshalBinary()
	if err != nil {
		return nil, err
	}
	resp, err := c.issue(ctx, &token.IssueRequest{Kind: token.KindARC, Epoch: epoch, ARC: rb})
	if err != nil {
		return nil, fmt.Errorf("tokenclient: ARC credential of epoch %s: %w", epoch, err)
	}
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
