package natsconn

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamReplicas is the replica count to configure for stream name: an
// existing stream keeps its own (never scaled down by a process that sees
// fewer NATS servers; change it with the nats CLI), a new one gets
// Replicas(js.Conn()).
func StreamReplicas(ctx context.Context, js jetstream.JetStream, name string) int {
	if st, err := js.Stream(ctx, name); err == nil && st.CachedInfo().Config.Replicas > 0 {
		return st.CachedInfo().Config.Replicas
	}
	return Replicas(js.Conn())
}

// EnsureStream creates or updates the stream cfg describes. It is
// idempotent and safe to call from several processes at once: a create
// that loses the race to a concurrent creator ("stream name already in
// use") is retried as an update, up to 5 attempts 10–50 ms apart. Errors
// wrap the last JetStream error and say whether JetStream is reachable.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if _, err = js.CreateOrUpdateStream(ctx, cfg); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(10*(attempt+1)) * time.Millisecond):
		}
	}
	return fmt.Errorf("create stream %s: %w (is JetStream enabled on the NATS server?)", cfg.Name, err)
}
