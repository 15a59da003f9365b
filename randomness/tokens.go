package randomness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sync"
	"time"

	"github.com/crowdlog/crowdlog/infra/spent"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// SpentStore records spent tokens across the service's replicas and
// restarts; *spent.Store (JetStream KV protocol.SpentTokensBucket) is the
// production one.
type SpentStore interface {
	Spend(ctx context.Context, spends []spent.Spend) (double []bool, err error)
}

// DefaultSpendTimeout bounds one request's spends in the spent-token store.
const DefaultSpendTimeout = 10 * time.Second

// Refusal reasons of token checks (Service.Refusals).
const (
	ReasonTokensMissing     = "tokens-missing"     // not one token per element
	ReasonTokenInvalid      = "token-invalid"      // does not parse or verify, or twice in one request
	ReasonTokenSpent        = "token-spent"        // spent before by another request
	ReasonTokensUnavailable = "tokens-unavailable" // no token key for the epoch, or the spent store failed
	// ReasonReplySubject: the reply subject is not a requester inbox
	// (natsconn.Accept): refused before any token is spent, whether or
	// not tokens are required.
	ReasonReplySubject = "reply-subject"
)

// Refusals returns how many requests were refused, by reason (the Reason*
// constants). Requests refused for other causes (malformed, epoch not
// open, closed, …) are counted in Rejected only.
func (s *Service) Refusals() map[string]int64 {
	s.refusedMu.Lock()
	defer s.refusedMu.Unlock()
	return maps.Clone(s.refused)
}

func (s *Service) refuse(reason string) {
	s.refusedMu.Lock()
	if s.refused == nil {
		s.refused = map[string]int64{}
	}
	s.refused[reason]++
	s.refusedMu.Unlock()
}

// tokenKey returns the epoch's randomness-token key, cached once loaded.
func (s *Service) tokenKey(epoch string) (*token.PrivateKey, error) {
	if k, ok := s.tokenKeys.Load(epoch); ok {
		return k.(*token.PrivateKey), nil
	}
	if s.TokenKeys == nil {
		return nil, errors.New("no token key lookup configured (Service.TokenKeys)")
	}
	k, err := s.TokenKeys(epoch)
	if err != nil {
		return nil, err
	}
	if k.Kind() != token.KindRandomness || k.Epoch() != epoch {
		return nil, fmt.Errorf("the token key given for epoch %s is the %s key of epoch %s", epoch, k.Kind(), k.Epoch())
	}
	s.tokenKeys.Store(epoch, k)
	return k, nil
}

// spendTokens checks and spends the request's tokens (RFC 9576
// §3.5): exactly one per element, each parsing and verifying under the
// epoch's randomness-token key (kind randomness, this epoch), no token
// twice, then all spent in the shared store, each bound to its element
// (oprf.SpendBinding). A request with a missing, invalid or already spent
// token is refused as a whole: nothing is evaluated, and the error's text
// starts with the oprf.ErrToken… sentinel that oprf.TokenRefusal maps back
// on the client. Elements are checked before anything is spent, so a
// request that Evaluate would refuse spends no token.
//
// A request refused for a double spend has spent its other tokens: they
// are lost to their holder unless it re-sends them with the same elements
// (a retried request binds the same and is accepted). Only the client that
// presented a spent token — a client reusing or sharing tokens — loses
// its own tokens; an honest client never double spends.
func (s *Service) spendTokens(ctx context.Context, q *oprf.RandomnessRequest) error {
	if len(q.Tokens) != len(q.Elements) {
		s.refuse(ReasonTokensMissing)
		return fmt.Errorf("%w: got %d for %d elements of epoch %s", oprf.ErrTokensMissing, len(q.Tokens), len(q.Elements), q.Epoch)
	}
	key, err := s.tokenKey(q.Epoch)
	if err != nil {
		s.refuse(ReasonTokensUnavailable)
		s.log().Warn("randomness: no randomness-token key; refusing requests that need tokens", "epoch", q.Epoch, "err", err)
		return fmt.Errorf("%w: no randomness-token key for epoch %s (is the issuer running with the same keys directory?)", oprf.ErrTokensUnavailable, q.Epoch)
	}
	for i, e := range q.Elements {
		el := protocol.G.NewElement()
		if err := el.UnmarshalBinary(e); err != nil || el.IsIdentity() {
			return fmt.Errorf("%w: element %d is not a non-identity ristretto255 encoding", protocol.ErrMalformed, i)
		}
	}
	toks := make([]*token.Token, len(q.Tokens))
	for i, b := range q.Tokens {
		t, err := token.ParseToken(b)
		if err != nil {
			s.refuse(ReasonTokenInvalid)
			return fmt.Errorf("%w: token %d of %d for epoch %s: %v", oprf.ErrTokenInvalid, i+1, len(q.Tokens), q.Epoch, err)
		}
		toks[i] = t
	}
	if i, err := verifyAll(key, toks); err != nil {
		s.refuse(ReasonTokenInvalid)
		return fmt.Errorf("%w: token %d of %d for epoch %s: %v", oprf.ErrTokenInvalid, i+1, len(q.Tokens), q.Epoch, err)
	}
	spends := make([]spent.Spend, len(q.Tokens))
	seen := make(map[[32]byte]bool, len(q.Tokens))
	for i, t := range toks {
		id := t.SpendID()
		if seen[id] {
			s.refuse(ReasonTokenInvalid)
			return fmt.Errorf("%w: token %d of %d for epoch %s appears twice in the request", oprf.ErrTokenInvalid, i+1, len(q.Tokens), q.Epoch)
		}
		seen[id] = true
		spends[i] = spent.Spend{ID: id, Binding: oprf.SpendBinding(q.Epoch, q.Elements[i])}
	}
	timeout := s.SpendTimeout
	if timeout <= 0 {
		timeout = DefaultSpendTimeout
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	double, err := s.Spent.Spend(sctx, spends)
	if err != nil {
		s.refuse(ReasonTokensUnavailable)
		s.log().Warn("randomness: spent-token store failed; refusing the request", "epoch", q.Epoch, "tokens", len(spends), "err", err)
		return fmt.Errorf("%w: the spent-token store did not answer; retry the same request", oprf.ErrTokensUnavailable)
	}
	n := 0
	for _, d := range double {
		if d {
			n++
		}
	}
	if n > 0 {
		s.refuse(ReasonTokenSpent)
		return fmt.Errorf("%w: %d of %d tokens for epoch %s were spent by another request", oprf.ErrTokenSpent, n, len(spends), q.Epoch)
	}
	return nil
}

// verifyAll verifies every token under key (one VOPRF evaluation each,
// ~50 µs), spread over GOMAXPROCS goroutines for batches of more than 16,
// and returns the first failing index and its error.
func verifyAll(key *token.PrivateKey, toks []*token.Token) (int, error) {
	errs := make([]error, len(toks))
	workers := min(runtime.GOMAXPROCS(0), (len(toks)+15)/16)
	if workers <= 1 {
		for i, t := range toks {
			if err := key.Verify(t); err != nil {
				return i, err
			}
		}
		return 0, nil
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(toks); i += workers {
				errs[i] = key.Verify(toks[i])
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return i, err
		}
	}
	return 0, nil
}
