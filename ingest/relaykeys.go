package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/nats-io/nats.go"
)

// ErrRelayKeyUnknown is wrapped by CheckRelayKeys when a relay does not hold
// the key id the client would seal its layer for (or holds another public
// key under that id): the relay would drop every such layer as
// "unknown_key" or "malformed", silently for the client.
var ErrRelayKeyUnknown = errors.New("unknown relay key id")

// RelayKeysFunc asks the relay named relay for its key announcement
// (FetchRelayKeys bound to a NATS connection and a timeout: NATSRelayKeys).
type RelayKeysFunc func(ctx context.Context, relay string) (*onion.RelayKeysResponse, error)

// ErrNoRelayKeysAnswer is wrapped by FetchRelayKeys when no relay answered:
// nothing subscribes to the subject (a relay of a version without
// announcements, or none running) or the request timed out. Clients warn
// and go on (CheckRelayKeys).
var ErrNoRelayKeysAnswer = errors.New("no key announcement from the relay")

// RelayKeysTimeout bounds one relay's key announcement request in
// NATSRelayKeys. A relay answers at once; the bound covers a relay
// process queued behind others on a loaded machine (3 s could pass there,
// and the check was then skipped with a warning). A relay that does not
// subscribe at all answers "no responders" at once, without this wait.
const RelayKeysTimeout = 10 * time.Second

// FetchRelayKeys asks relay name, over NATS request/reply on
// protocol.RelayKeysSubject(name), which HPKE key ids (and public keys) it
// holds (docs/wire.md, "Relay keys"), within ctx's deadline. Errors:
// ErrNoRelayKeysAnswer when no relay answered; a refusal or an
// announcement of another relay; protocol.ErrMalformed for an undecodable
// answer.
func FetchRelayKeys(ctx context.Context, nc *nats.Conn, name string) (*onion.RelayKeysResponse, error) {
	q, err := (&onion.RelayKeysRequest{Relay: name}).MarshalBinary()
	if err != nil {
		return nil, err
	}
	m, err := nc.RequestWithContext(ctx, protocol.RelayKeysSubject(name), q)
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w %s (%v)", ErrNoRelayKeysAnswer, name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("key announcement of relay %s: %w", name, err)
	}
	p, err := onion.ParseRelayKeysResponse(m.Data)
	if err != nil {
		return nil, fmt.Errorf("key announcement of relay %s: %w", name, err)
	}
	if p.Error != "" {
		return nil, fmt.Errorf("relay %s refused to list its keys: %s", name, p.Error)
	}
	if p.Relay != name {
		return nil, fmt.Errorf("asked relay %s for its keys, relay %s answered", name, p.Relay)
	}
	return p, nil
}

// NATSRelayKeys is FetchRelayKeys on nc, each request bounded by
// RelayKeysTimeout.
func NATSRelayKeys(nc *nats.Conn) RelayKeysFunc {
	return func(ctx context.Context, relay string) (*onion.RelayKeysResponse, error) {
		rctx, cancel := context.WithTimeout(ctx, RelayKeysTimeout)
		defer cancel()
		return FetchRelayKeys(rctx, nc, relay)
	}
}

// RelayHop is one relay of the route as the client sees it: the relay's
// name and the public key (with key id) the client seals its layer for.
type RelayHop struct {
	// Name is the relay's name, "a" or "b" (protocol.RelayKeysSubject).
	Name string
	// Key is the public key, with its key id, the client seals for.
	Key onion.PublicKey
}

// CheckRelayKeys asks each relay of the route once, before any report is
// sent, which key ids it holds, and fails with an error wrapping
// ErrRelayKeyUnknown — naming the relay, the client's key id and the ids
// the relay holds — when a relay does not hold the client's id or holds a
// different public key under it (a clear error instead of reports
// that would be dropped). A relay that gives no usable answer (an older
// relay without announcements, none running yet, a timeout) is logged as a
// warning and not checked.
//
// It catches stale keys (a rotated-out id, another deployment's files),
// not substituted ones: the announcements come over the same NATS
// connection as everything else, so whoever could substitute the key
// files or answer on the relays' key subjects can announce the
// substitute too. Verify the keys' fingerprints out of band
// (docs/client.md, "Operator keys").
func CheckRelayKeys(ctx context.Context, fetch RelayKeysFunc, hops []RelayHop, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	for _, h := range hops {
		ann, err := fetch(ctx, h.Name)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			log.Warn("cannot check relay key ids (older relay or none running); reports for an id it does not hold would be dropped silently",
				"relay", h.Name, "key_id", h.Key.ID, "err", err)
			continue
		}
		mine, err := h.Key.Key.MarshalBinary()
		if err != nil {
			return fmt.Errorf("relay %s public key: %w", h.Name, err)
		}
		pub, ok := ann.Lookup(h.Key.ID)
		switch {
		case !ok:
			return fmt.Errorf("%w: relay %s does not hold key id %d (it holds %s): fetch its current public key (relay-%s.key.pub) into Config.KeysDir, check its fingerprint against the one its operator publishes (docs/client.md, \"Operator keys\") and create the Device again",
				ErrRelayKeyUnknown, h.Name, h.Key.ID, idList(ann.IDs()), h.Name)
		case !bytes.Equal(pub, mine):
			return fmt.Errorf("%w: relay %s holds key id %d with another public key (fingerprint %s, the client's is %s): the client's key file is stale or from another deployment; fetch the relay's current public key (relay-%s.key.pub) into Config.KeysDir, check its fingerprint against the one its operator publishes, and create the Device again",
				ErrRelayKeyUnknown, h.Name, h.Key.ID, fingerprint(pub), fingerprint(mine), h.Name)
		}
		log.Debug("relay holds the client's key id", "relay", h.Name, "key_id", h.Key.ID)
	}
	return nil
}

func idList(ids []byte) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}

// fingerprint is the first 8 bytes of SHA-256 of a public key, hex, as
// `crowdlog keys list` shows it.
func fingerprint(pub []byte) string {
	h := sha256.Sum256(pub)
	return fmt.Sprintf("%x", h[:8])
}
