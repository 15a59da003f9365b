package relays

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// ErrNoKeysAnswer is wrapped by FetchKeys when no relay answered: nothing
// subscribes to the subject (a relay of a version without announcements,
// or none running) or the request timed out. Clients warn and go on.
var ErrNoKeysAnswer = errors.New("relays: no key announcement from the relay")

// serveKeys answers protocol.RelayKeysRequests on KeysSubject(r.Name) with
// the ids and public keys of r.Keys (one process of a queue group per name
// answers). It returns the function that stops answering. Without a NATS
// connection behind r.JS it does nothing.
func (r *Relay) serveKeys(log *slog.Logger) func() {
	nc := r.JS.Conn()
	if nc == nil {
		return func() {}
	}
	ann, err := onion.RelayKeysOf(r.Name, r.Keys)
	var reply []byte
	if err == nil {
		reply, err = ann.MarshalBinary()
	}
	if err != nil {
		log.Warn("relay keys cannot be announced; clients will not be able to check their key ids", "err", err)
		return func() {}
	}
	sub, err := nc.QueueSubscribe(protocol.RelayKeysSubject(r.Name), ConsumerName(r.Name), func(m *nats.Msg) {
		out := reply
		q, err := onion.ParseRelayKeysRequest(m.Data)
		if err == nil && q.Relay != r.Name {
			err = fmt.Errorf("this is relay %s, not %s", r.Name, q.Relay)
		}
		if err != nil {
			out, _ = (&onion.RelayKeysResponse{Error: err.Error()}).MarshalBinary()
		}
		if err := m.Respond(out); err != nil {
			log.Debug("relay keys: respond", "err", err)
		}
	})
	if err != nil {
		log.Warn("relay keys cannot be announced; clients will not be able to check their key ids", "subject", protocol.RelayKeysSubject(r.Name), "err", err)
		return func() {}
	}
	log.Info("relay keys announced", "subject", protocol.RelayKeysSubject(r.Name), "key_ids", fmt.Sprint(ann.IDs()))
	return func() { sub.Unsubscribe() }
}

// FetchKeys asks relay name which HPKE key ids (and public keys) it holds,
// within ctx's deadline. Errors: ErrNoKeysAnswer when no relay answered
// (older relay, none running, timeout); a refusal or an announcement of
// another relay; protocol.ErrMalformed for an undecodable answer.
func FetchKeys(ctx context.Context, nc *nats.Conn, name string) (*onion.RelayKeysResponse, error) {
	q, err := (&onion.RelayKeysRequest{Relay: name}).MarshalBinary()
	if err != nil {
		return nil, err
	}
	m, err := nc.RequestWithContext(ctx, protocol.RelayKeysSubject(name), q)
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w %s (%v)", ErrNoKeysAnswer, name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("relays: key announcement of relay %s: %w", name, err)
	}
	p, err := onion.ParseRelayKeysResponse(m.Data)
	if err != nil {
		return nil, fmt.Errorf("relays: key announcement of relay %s: %w", name, err)
	}
	if p.Error != "" {
		return nil, fmt.Errorf("relays: relay %s refused to list its keys: %s", name, p.Error)
	}
	if p.Relay != name {
		return nil, fmt.Errorf("relays: asked relay %s for its keys, relay %s answered", name, p.Relay)
	}
	return p, nil
}
