package runner

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/pipelines/streams"
	"github.com/crowdlog/crowdlog/relays"
)

// relayJS returns the JetStream through which the operator reaches relay
// name's stream and consumer ("a" or "b").
type relayJS func(name string) jetstream.JetStream

// operatorJS connects as the operator (named name) and returns its
// relayJS: with accounts (a server running natsauth's generated
// configuration, one account per role) the operator's import of each
// relay's account (natsconn.AccountJetStream), otherwise its own
// JetStream, which holds every relay's inbox.
func operatorJS(connect roleConnector, name string, accounts bool) (relayJS, error) {
	nc, js, err := connect(natsauth.Operator, name)
	if err != nil {
		return nil, err
	}
	if !accounts {
		return func(string) jetstream.JetStream { return js }, nil
	}
	jss := map[string]jetstream.JetStream{}
	for _, r := range []natsauth.Role{natsauth.RelayA, natsauth.RelayB} {
		n, _ := natsauth.RelayName(r)
		if jss[n], err = natsconn.AccountJetStream(nc, r, true); err != nil {
			return nil, fmt.Errorf("NATS JetStream of relay %s's account: %w", n, err)
		}
	}
	return func(n string) jetstream.JetStream { return jss[n] }, nil
}

// ensureStreams is a run's admin step, before any role starts: the
// streams, key-value buckets and relay consumers of streams.Ensure,
// created with the admin credential (natsauth.Admin: the embedded
// server's NKey with the permission table on, each in its owner's
// account: streams.EnsureAccounts; the run's one connection without it).
// Against a NATS given by address with credentials (lookupOnly: an NKey
// for the clients or the operator) the run holds no admin credential: the
// admin step (`crowdlog streams`) ran before, and each relay's stream is
// only looked up through opjs.
func ensureStreams(ctx context.Context, connect roleConnector, lookupOnly, accounts bool, opjs relayJS) error {
	if lookupOnly {
		for _, n := range []string{"a", "b"} {
			cfg := relays.StreamConfig(0, 1)
			if accounts {
				cfg = relays.AccountStreamConfig(n, 0, 1)
			}
			if _, err := natsconn.OpenStream(ctx, opjs(n), cfg); err != nil {
				return fmt.Errorf("relays: %w", err)
			}
		}
		return nil
	}
	nc, js, err := connect(natsauth.Admin, "crowdlog-streams")
	if err != nil {
		return err
	}
	if accounts {
		return streams.EnsureAccounts(ctx, nc, streams.Config{})
	}
	return streams.Ensure(ctx, js, streams.Config{})
}
