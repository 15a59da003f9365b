package relays

import (
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

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
		// read-only, but checked first like every responder (counted in
		// crowdlog_nats_refused_replies_total)
		if natsconn.Accept(m) != nil {
			return
		}
		out := reply
		q, err := onion.ParseRelayKeysRequest(m.Data)
		if err == nil && q.Relay != r.Name {
			err = fmt.Errorf("this is relay %s, not %s", r.Name, q.Relay)
		}
		if err != nil {
			out, _ = (&onion.RelayKeysResponse{Error: err.Error()}).MarshalBinary()
		}
		if err := natsconn.Respond(m, out); err != nil {
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
