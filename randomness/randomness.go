// Package randomness is the OPRF randomness service (its client is
// ingest/oprfclient): clients obtain the per-(app, epoch, artifact)
// randomness ω without revealing the artifact (RFC 9497 verifiable mode, VOPRF, over ristretto255), as STAR
// (Davidson et al., CCS 2022) §4 prescribes in place of CrowdLogging's plain
// hash, which is open to the offline probe attack (CrowdLogging §5.4).
//
// Every answer carries a DLEQ proof against the epoch's public key, which the
// service publishes on PublicKeySubject and clients pin: a client refuses an
// answer whose proof fails and a public key that changes within an epoch.
// Trust assumption (docs/threat-model.md): the first key a client sees for an
// epoch (or the one it was configured with) is the one every other client
// sees; pin files and comparing keys out of band make a split view visible.
//
// Epoch keys (keys.go) are random, one file per epoch in a key directory
// shared by the service's processes, created only by an operator opening a
// named epoch (Keys.OpenEpoch, `crowdlog randomness open-epoch`) or by the
// schedule — a request naming an unopened epoch is refused
// (ErrEpochNotOpen) and writes nothing — and destroyed after the epoch is
// closed (or, with a schedule of absolute epoch boundaries, has ended) plus
// a grace period; a destroyed epoch is never given a new key.
package randomness

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/spent"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/token"

	circloprf "github.com/cloudflare/circl/oprf"
	"github.com/nats-io/nats.go"
)

// queue is the NATS queue group: more service processes sharing one key
// directory share the load.
const queue = "randomness"

var epochName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidEpoch reports whether s is a valid epoch name: 1–64 characters of
// letters, digits, '.', '_' or '-'.
func ValidEpoch(s string) bool { return epochName.MatchString(s) }

// DefaultSweepEvery is how often Service.Run destroys due epoch keys.
const DefaultSweepEvery = time.Minute

// Service answers RandomnessRequests on Subject and PublicKeyRequests on
// PublicKeySubject, and destroys due epoch keys (Keys.Sweep) every
// SweepEvery (0 means DefaultSweepEvery).
type Service struct {
	// Ready, when not nil, is closed by Run once its subscriptions have
	// reached the NATS server (a request sent after it is served); tests
	// wait on it instead of sleeping.
	Ready chan struct{}

	NC         *nats.Conn
	Keys       *Keys
	Logger     *slog.Logger
	SweepEvery time.Duration

	// RequireTokens makes every request pay one Privacy Pass randomness
	// token per element (tokens.go): verified under TokenKeys of
	// the request's epoch and spent in Spent. Without it, tokens sent are
	// ignored.
	RequireTokens bool
	// TokenKeys returns the randomness-token key of an epoch (kind
	// token.KindRandomness; keydir.LoadTokenKey); a loaded key is cached.
	TokenKeys func(epoch string) (*token.PrivateKey, error)
	// Spent is the spent-token store; nil with RequireTokens: Run opens
	// JetStream KV protocol.SpentTokensBucket on NC (infra/spent).
	Spent SpentStore
	// SpendTimeout bounds one request's spends; 0 means DefaultSpendTimeout.
	SpendTimeout time.Duration

	Evaluated atomic.Int64 // elements evaluated
	Rejected  atomic.Int64 // malformed or refused requests

	refusedMu sync.Mutex
	refused   map[string]int64 // token refusals by reason
	tokenKeys sync.Map         // epoch → *token.PrivateKey
}

func (s *Service) log() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

// Run serves until ctx ends. Malformed requests get an error reply and are
// counted; they never stop the service.
func (s *Service) Run(ctx context.Context) error {
	log := s.log()
	if s.RequireTokens && s.Spent == nil {
		st, err := spent.Open(ctx, s.NC, spent.Options{TTL: s.Keys.SpendTTL()})
		if err != nil {
			return fmt.Errorf("randomness: tokens required: %w", err)
		}
		s.Spent = st
	}
	respond := func(m *nats.Msg, b []byte, err error) {
		if err != nil {
			log.Error("randomness: encode response", "err", err)
			return
		}
		if err := natsconn.Respond(m, b); err != nil {
			log.Warn("randomness: respond", "err", err)
		}
	}
	// accept refuses, before any token is spent, a request whose answer
	// could not go to a requester inbox (natsconn.Accept)
	accept := func(m *nats.Msg) bool {
		if natsconn.Accept(m) != nil {
			s.Rejected.Add(1)
			s.refuse(ReasonReplySubject)
			return false
		}
		return true
	}
	sub, err := s.NC.QueueSubscribe(protocol.RandomnessSubject, queue, func(m *nats.Msg) {
		if !accept(m) {
			return
		}
		b, err := s.handle(ctx, m.Data).MarshalBinary()
		respond(m, b, err)
	})
	if err != nil {
		return fmt.Errorf("randomness: subscribe %s: %w", protocol.RandomnessSubject, err)
	}
	defer sub.Unsubscribe()
	psub, err := s.NC.QueueSubscribe(protocol.RandomnessPublicKeySubject, queue, func(m *nats.Msg) {
		if !accept(m) {
			return
		}
		b, err := s.handlePublicKey(m.Data).MarshalBinary()
		respond(m, b, err)
	})
	if err != nil {
		return fmt.Errorf("randomness: subscribe %s: %w", protocol.RandomnessPublicKeySubject, err)
	}
	defer psub.Unsubscribe()
	if err := s.NC.Flush(); err != nil {
		return err
	}
	if s.Ready != nil {
		close(s.Ready)
	}
	log.Info("randomness service ready", "subject", protocol.RandomnessSubject, "public_keys", protocol.RandomnessPublicKeySubject,
		"key_dir", s.Keys.Dir(), "epoch_length", s.Keys.EpochLength(), "current_epoch", s.Keys.Current())
	every := s.SweepEvery
	if every <= 0 {
		every = DefaultSweepEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := s.Keys.Sweep(); err != nil {
			log.Error("randomness: destroying due epoch keys failed; retrying at the next sweep", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *Service) handle(ctx context.Context, data []byte) *oprf.RandomnessResponse {
	q, err := oprf.ParseRandomnessRequest(data)
	if err == nil {
		var key *circloprf.PrivateKey
		if key, err = s.Keys.Lookup(q.Epoch); err == nil && s.RequireTokens { // Lookup never opens a named epoch
			err = s.spendTokens(ctx, q)
		}
		if err == nil {
			var resp *oprf.RandomnessResponse
			if resp, err = oprf.Evaluate(key, q); err == nil {
				s.Evaluated.Add(int64(len(q.Elements)))
				return resp
			}
		}
	}
	s.Rejected.Add(1)
	return &oprf.RandomnessResponse{Refusal: protocol.RefusalOf(err)}
}

func (s *Service) handlePublicKey(data []byte) *oprf.PublicKeyResponse {
	q, err := oprf.ParsePublicKeyRequest(data)
	if err == nil {
		var pk []byte
		if pk, err = s.Keys.PublicKey(q.Epoch); err == nil {
			return &oprf.PublicKeyResponse{Epoch: q.Epoch, Key: pk}
		}
	}
	s.Rejected.Add(1)
	return &oprf.PublicKeyResponse{Refusal: protocol.RefusalOf(err)}
}
