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

// ensureStreams is a run's admin step, before any role starts: the
// streams and key-value buckets of streams.Ensure, created with the admin
// credential (natsauth.Admin: the embedded server's NKey with the
// permission table on; the run's one connection without it). Against a
// NATS given by address with credentials (lookupOnly: an NKey for the
// clients or the operator) the run holds no admin credential: the admin
// step (`crowdlog streams`) ran before, and the relay stream is only
// looked up through opjs.
func ensureStreams(ctx context.Context, connect roleConnector, lookupOnly bool, opjs jetstream.JetStream) error {
	if lookupOnly {
		if _, err := natsconn.OpenStream(ctx, opjs, relays.StreamConfig(0, 1)); err != nil {
			return fmt.Errorf("relays: %w", err)
		}
		return nil
	}
	_, js, err := connect(natsauth.Admin, "crowdlog-streams")
	if err != nil {
		return err
	}
	return streams.Ensure(ctx, js, streams.Config{})
}
