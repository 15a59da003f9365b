package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/crowdlog/crowdlog/protocol/onion"
)

// ErrRelayKeyUnknown is wrapped by CheckRelayKeys when a relay does not hold
// the key id the client would seal its layer for (or holds another public
// key under that id): the relay would drop every such layer as
// "unknown_key" or "malformed", silently for the client.
var ErrRelayKeyUnknown = errors.New("unknown relay key id")

// RelayKeysFunc asks the relay named relay for its key announcement
// (relays.FetchKeys bound to a NATS connection and a timeout).
type RelayKeysFunc func(ctx context.Context, relay string) (*onion.RelayKeysResponse, error)

// RelayHop is one relay of the route as the client sees it: the relay's
// name and the public key (with key id) the client seals its layer for.
type RelayHop struct {
	Name string
	Key  onion.PublicKey
}

// CheckRelayKeys asks each relay of the route once, before any report is
// sent, which key ids it holds, and fails with an error wrapping
// ErrRelayKeyUnknown — naming the relay, the client's key id and the ids
// the relay holds — when a relay does not hold the client's id or holds a
// different public key under it (a clear error instead of reports
// that would be dropped). A relay that gives no usable answer (an older
// relay without announcements, none running yet, a timeout) is logged as a
// warning and not checked.
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
			return fmt.Errorf("%w: relay %s does not hold key id %d (it holds %s): fetch its current public key (relay-%s.key.pub; `crowdlog keys list` shows ids and fingerprints) and restart the client",
				ErrRelayKeyUnknown, h.Name, h.Key.ID, idList(ann.IDs()), h.Name)
		case !bytes.Equal(pub, mine):
			return fmt.Errorf("%w: relay %s holds key id %d with another public key (fingerprint %s, the client's is %s): the client's key file is stale or from another deployment; fetch the relay's current public key (relay-%s.key.pub) and restart the client",
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
