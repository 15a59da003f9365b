package natsconn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// RequestJSON sends v as JSON on subj and decodes the reply into out. Errors
// say when no coordinator answers.
func RequestJSON(ctx context.Context, nc *nats.Conn, subj string, v, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	m, err := nc.RequestWithContext(ctx, subj, b)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("no coordinator answers on %s (is the campaign's coordinator running? its operator starts it with `crowdlog coordinator`): %w", subj, err)
		}
		return fmt.Errorf("request %s: %w", subj, err)
	}
	return json.Unmarshal(m.Data, out)
}
