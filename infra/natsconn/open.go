package natsconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamsHint is what the errors of OpenStream and OpenKeyValue tell an
// operator to do when a stream or bucket does not exist and this
// credential may not create it.
const StreamsHint = "run `crowdlog streams` with the admin NATS credential first"

// openAttempts is how many look-ups OpenStream and OpenKeyValue make
// without a deadline on their context.
const openAttempts = 5

// openCreateTimeout bounds the one create request OpenStream and
// OpenKeyValue send for a missing stream: a credential without the right
// gets no answer at all (the server drops the request as a permissions
// violation), so waiting StreamAttemptTimeout for it only delays the
// error.
const openCreateTimeout = 2 * time.Second

// OpenStream binds the existing stream cfg.Name: it looks the stream up
// ($JS.API.STREAM.INFO, the only stream right a runtime role holds) and
// never updates it. A missing stream is created with cfg once (a server
// without the permission table: tests, `crowdlog run`'s embedded NATS
// without keys); where that is refused or unanswered it looks again until
// ctx's deadline (backoff 10 ms growing to 1 s; without a deadline,
// openAttempts look-ups), so a role started just before the admin step
// waits for it. Errors wrap the last JetStream error and say to run
// `crowdlog streams` (StreamsHint).
func OpenStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return open(ctx, "stream "+cfg.Name, func(ctx context.Context) (jetstream.Stream, error) {
		st, err := js.Stream(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, errNotFound
		}
		return st, err
	}, func(ctx context.Context) (jetstream.Stream, error) {
		st, err := js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return js.Stream(ctx, cfg.Name)
		}
		return st, err
	})
}

// OpenKeyValue is OpenStream for the key-value bucket cfg.Bucket (its
// stream KV_<bucket>): it binds the existing bucket, never updates it,
// and creates it with cfg only where the credential may.
func OpenKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return open(ctx, "key-value bucket "+cfg.Bucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		kv, err := js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, errNotFound
		}
		return kv, err
	}, func(ctx context.Context) (jetstream.KeyValue, error) {
		kv, err := js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			return js.KeyValue(ctx, cfg.Bucket)
		}
		return kv, err
	})
}

var errNotFound = errors.New("not found")

func open[T any](ctx context.Context, what string, lookup, create func(context.Context) (T, error)) (T, error) {
	var zero T
	_, untilDeadline := ctx.Deadline()
	created := false
	var err error
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, StreamAttemptTimeout)
		var v T
		v, err = lookup(actx)
		cancel()
		if err == nil {
			return v, nil
		}
		if errors.Is(err, errNotFound) && !created {
			created = true
			cctx, cancel := context.WithTimeout(ctx, openCreateTimeout)
			v, cerr := create(cctx)
			cancel()
			if cerr == nil {
				return v, nil
			}
			err = fmt.Errorf("not found, and this credential may not create it: %w", cerr)
		}
		if ctx.Err() != nil || (!untilDeadline && attempt >= openAttempts-1) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(10*(attempt+1))*time.Millisecond, time.Second)):
		}
	}
	return zero, fmt.Errorf("%s: %w (%s; is JetStream enabled on the NATS server?)", what, err, StreamsHint)
}
