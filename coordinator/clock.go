package coordinator

import (
	"context"
	"time"

	"github.com/crowdlog/crowdlog/ingest/keywords"
)

// FollowWallClock advances the campaign to the current UTC day
// (keywords.DayOf(time.Now())) at once and then every interval (one minute
// when interval ≤ 0), until ctx ends; it then returns nil. A failed advance
// is logged and retried at the next tick: the day only moves forward, so a
// missed tick is caught up by the next one (Advance forms every day up to
// the given one).
func (c *Coordinator) FollowWallClock(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = time.Minute
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := c.Advance(ctx, int32(keywords.DayOf(time.Now()))); err != nil && ctx.Err() == nil {
			c.Logger.Error("coordinator: advance", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
