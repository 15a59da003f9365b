// Package retry is the one retry loop of crowdlog's services: writes to
// Kafka and ClickHouse that must not be given up while the service runs.
// It wraps github.com/cenkalti/backoff/v5 (exponential, jittered) with no
// limit on elapsed time or tries.
package retry

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Permanent marks an error that must not be retried (e.g. a release over
// its privacy budget); Forever returns it at once, unwrapped.
func Permanent(err error) error { return backoff.Permanent(err) }

// Forever calls f until it returns nil or a Permanent error, or ctx ends.
// Waits start at initial and grow 2× (±50% jitter) up to max; each failure
// is logged at Warn with what and the next wait. When ctx ends after a
// failure, the error joins f's last error with ctx's.
func Forever(ctx context.Context, log *slog.Logger, what string, initial, max time.Duration, f func() error) error {
	if log == nil {
		log = slog.Default()
	}
	b := &backoff.ExponentialBackOff{InitialInterval: initial, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: max}
	var last error
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		last = f()
		return struct{}{}, last
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0), backoff.WithNotify(func(err error, next time.Duration) {
		log.Warn(what+" failed, retrying", "err", err, "in", next.Round(time.Millisecond))
	}))
	if err != nil && ctx.Err() != nil && last != nil && !errors.Is(last, ctx.Err()) {
		return errors.Join(last, ctx.Err())
	}
	return err
}
