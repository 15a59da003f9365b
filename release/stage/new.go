package stage

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/crowdlog/crowdlog/release"
)

// New opens ClickHouse at addr (creating the schema) and builds the
// release
func New(ctx context.Context, brokers []string, clickhouse, database string, log *slog.Logger) (*Stage, *release.Writer, error) {
	w, err := release.Open(ctx, clickhouse, database)
	if err != nil {
		return nil, nil, fmt.Errorf("open ClickHouse at %s: %w", clickhouse, err)
	}
	return &Stage{Brokers: brokers, Sink: w, Logger: log}, w, nil
}
