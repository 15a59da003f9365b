package natsconn

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/natsauth"
)

// StreamAttemptTimeout bounds one JetStream API request of StreamReplicas
// and EnsureStream, whatever the caller's deadline: a request whose reply
// is lost (the NATS node serving it stopped) is re-sent instead of waiting
// for the caller's whole bound.
const StreamAttemptTimeout = 10 * time.Second

// sameStreamConfig reports whether the existing stream's configuration has
// every field EnsureStream's callers set as want has it.
func sameStreamConfig(have, want jetstream.StreamConfig) bool {
	return have.Description == want.Description && slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention && have.Storage == want.Storage && have.Discard == want.Discard &&
		have.DiscardNewPerSubject == want.DiscardNewPerSubject && have.MaxMsgs == want.MaxMsgs &&
		have.MaxMsgsPerSubject == want.MaxMsgsPerSubject && have.MaxBytes == want.MaxBytes && have.MaxAge == want.MaxAge &&
		have.MaxMsgSize == want.MaxMsgSize && have.Duplicates == want.Duplicates && have.Replicas == want.Replicas
}

// StreamReplicas is the replica count to configure for stream name: an
// existing stream keeps its own (never scaled down by a process that sees
// fewer NATS servers; change it with the nats CLI), a new one gets
// Replicas(js.Conn()).
func StreamReplicas(ctx context.Context, js jetstream.JetStream, name string) int {
	actx, cancel := context.WithTimeout(ctx, StreamAttemptTimeout)
	defer cancel()
	if st, err := js.Stream(actx, name); err == nil && st.CachedInfo().Config.Replicas > 0 {
		return st.CachedInfo().Config.Replicas
	}
	return Replicas(js.Conn())
}

// EnsureStream creates or updates the stream cfg describes. It is
// idempotent and safe to call from several processes at once: a create
// that loses the race to a concurrent creator ("stream name already in
// use") is retried as an update. Each attempt is bounded by
// StreamAttemptTimeout. With a deadline on ctx it retries until the
// deadline (backoff 10 ms growing to 1 s): a NATS node that stops during
// start-up only delays it. Without one it makes 5 attempts. Errors wrap
// the last JetStream error and say whether JetStream is reachable.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	var err error
	_, untilDeadline := ctx.Deadline()
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, StreamAttemptTimeout)
		if st, ierr := js.Stream(actx, cfg.Name); ierr == nil && sameStreamConfig(st.CachedInfo().Config, cfg) {
			// already as wanted: no update request. Besides saving one,
			// this keeps processes that start together (the relays) from
			// updating the stream while another creates its consumer,
			// which nats-server handles with a data race (its fileStore's
			// UpdateConfig against ConsumerStore, v2.15)
			cancel()
			return nil
		}
		_, err = js.CreateOrUpdateStream(actx, cfg)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || (!untilDeadline && attempt >= 4) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(10*(attempt+1))*time.Millisecond, time.Second)):
		}
	}
	return fmt.Errorf("create stream %s: %w (is JetStream enabled on the NATS server?)", cfg.Name, err)
}

// AccountJetStream returns the JetStream API of the account of owner (one
// of natsauth.JetStreamRoles) as nc reaches it. With accounts (a server
// running natsauth's generated configuration, one account per role: the
// admin's and the operator's connections) requests go through the imports
// natsauth generates for nc's role, under natsauth.JSAPIPrefix(owner),
// and only the subjects natsauth.AdminAPI or OperatorAPI name answer;
// without (a server without the permission table, every role in one
// account) it is nc's own JetStream. Errors: those of jetstream.New.
func AccountJetStream(nc *nats.Conn, owner natsauth.Role, accounts bool) (jetstream.JetStream, error) {
	if !accounts {
		return jetstream.New(nc)
	}
	return jetstream.NewWithAPIPrefix(nc, natsauth.JSAPIPrefix(owner))
}
