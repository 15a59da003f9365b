// Package randomness is the OPRF randomness service and its client: clients
// obtain the per-(app, epoch, artifact) randomness ω without revealing the
// artifact (RFC 9497 base mode over ristretto255), as STAR (Davidson et al.,
// CCS 2022) §4 prescribes in place of CrowdLogging's plain hash, which is open
// to the offline probe attack (CrowdLogging §5.4).
package randomness

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudflare/circl/oprf"
	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/protocol"
)

// Subject is the NATS request/reply subject of the randomness service.
const Subject = "crowdlog.randomness"

// queue is the NATS queue group: more service processes sharing one seed file
// share the load.
const queue = "randomness"

var epochName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidEpoch reports whether s is a valid epoch name: 1–64 characters of
// letters, digits, '.', '_' or '-'.
func ValidEpoch(s string) bool { return epochName.MatchString(s) }

// Keys derives one OPRF key per epoch from a 32-byte master seed
// (RFC 9497 §3.2.1 DeriveKeyPair with info = epoch), so several service
// processes sharing the seed file evaluate under the same epoch key.
type Keys struct {
	seed []byte
	mu   sync.Mutex
	byEp map[string]*oprf.PrivateKey
}

// LoadOrCreateSeed reads the master seed at path, creating it (32 random
// bytes, mode 0600) when absent. The seed is never logged.
func LoadOrCreateSeed(path string) (*Keys, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		b = make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, fmt.Errorf("write randomness seed: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("read randomness seed: %w", err)
	}
	if len(b) != 32 {
		return nil, fmt.Errorf("randomness seed %s has %d bytes, want 32 (delete it to make a new one)", path, len(b))
	}
	return &Keys{seed: b, byEp: map[string]*oprf.PrivateKey{}}, nil
}

// Epoch returns the OPRF private key of an epoch.
func (k *Keys) Epoch(epoch string) (*oprf.PrivateKey, error) {
	if !ValidEpoch(epoch) {
		return nil, fmt.Errorf("invalid epoch name %q", epoch)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if key, ok := k.byEp[epoch]; ok {
		return key, nil
	}
	key, err := oprf.DeriveKey(protocol.OPRFSuite, oprf.BaseMode, k.seed, []byte("crowdlog-v1 epoch "+epoch))
	if err != nil {
		return nil, err
	}
	k.byEp[epoch] = key
	return key, nil
}

// Service answers RandomnessRequests on Subject.
type Service struct {
	NC     *nats.Conn
	Keys   *Keys
	Logger *slog.Logger

	Evaluated atomic.Int64 // elements evaluated
	Rejected  atomic.Int64 // malformed or refused requests
}

// Run serves until ctx ends. Malformed requests get an error reply and are
// counted; they never stop the service.
func (s *Service) Run(ctx context.Context) error {
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	sub, err := s.NC.QueueSubscribe(Subject, queue, func(m *nats.Msg) {
		resp := s.handle(m.Data)
		b, err := resp.MarshalBinary()
		if err != nil {
			log.Error("randomness: encode response", "err", err)
			return
		}
		if err := m.Respond(b); err != nil {
			log.Warn("randomness: respond", "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("randomness: subscribe %s: %w", Subject, err)
	}
	defer sub.Unsubscribe()
	if err := s.NC.Flush(); err != nil {
		return err
	}
	log.Info("randomness service ready", "subject", Subject)
	<-ctx.Done()
	return nil
}

func (s *Service) handle(data []byte) *protocol.RandomnessResponse {
	q, err := protocol.ParseRandomnessRequest(data)
	if err != nil {
		s.Rejected.Add(1)
		return &protocol.RandomnessResponse{Error: err.Error()}
	}
	key, err := s.Keys.Epoch(q.Epoch)
	if err != nil {
		s.Rejected.Add(1)
		return &protocol.RandomnessResponse{Error: err.Error()}
	}
	resp, err := protocol.Evaluate(key, q)
	if err != nil {
		s.Rejected.Add(1)
		return &protocol.RandomnessResponse{Error: err.Error()}
	}
	s.Evaluated.Add(int64(len(q.Elements)))
	return resp
}

// Client obtains ω for artifacts from the service.
type Client struct {
	NC      *nats.Conn
	Timeout time.Duration // per request; default 30 s
	Batch   int           // elements per request; default 1024, at most protocol.MaxBatch
}

// Evaluate returns one 64-byte ω per input, in order, for epoch. Inputs are
// built with protocol.OPRFInput. Requests are batched (one round trip per
// Batch inputs). Errors name the service's refusal or the timeout.
func (c *Client) Evaluate(ctx context.Context, epoch string, inputs [][]byte) ([][]byte, error) {
	batch := c.Batch
	if batch <= 0 {
		batch = 1024
	}
	if batch > protocol.MaxBatch {
		batch = protocol.MaxBatch
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	out := make([][]byte, 0, len(inputs))
	for lo := 0; lo < len(inputs); lo += batch {
		hi := min(lo+batch, len(inputs))
		fin, q, err := protocol.Blind(epoch, inputs[lo:hi])
		if err != nil {
			return nil, err
		}
		b, err := q.MarshalBinary()
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		m, err := c.NC.RequestWithContext(rctx, Subject, b)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("randomness request (is `crowdlog randomness` running?): %w", err)
		}
		resp, err := protocol.ParseRandomnessResponse(m.Data)
		if err != nil {
			return nil, fmt.Errorf("randomness response: %w", err)
		}
		if len(resp.Elements) != hi-lo && resp.Error == "" {
			return nil, fmt.Errorf("randomness service answered %d elements for %d", len(resp.Elements), hi-lo)
		}
		omegas, err := protocol.Finalize(fin, resp)
		if err != nil {
			return nil, err
		}
		out = append(out, omegas...)
	}
	return out, nil
}
