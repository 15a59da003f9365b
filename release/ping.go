package release

import "context"

// Ping checks that ClickHouse answers on the writer's connection (for
// readiness: a release stage retries writes through an outage, and is
// not ready meanwhile).
func (w *Writer) Ping(ctx context.Context) error {
	return w.conn.Ping(ctx)
}
