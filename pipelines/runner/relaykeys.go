package runner

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// CheckRoute asks relays a and b once which HPKE key ids they hold and
// fails (ingest.ErrRelayKeyUnknown) when one does not hold the id of the
// client's public key a or b; relays that do not answer within
// ingest.RelayKeysTimeout (older relays) are logged as warnings. Clients
// call it before sending.
func CheckRoute(ctx context.Context, nc *nats.Conn, a, b onion.PublicKey, log *slog.Logger) error {
	return ingest.CheckRelayKeys(ctx, ingest.NATSRelayKeys(nc), []ingest.RelayHop{{Name: "a", Key: a}, {Name: "b", Key: b}}, log)
}
