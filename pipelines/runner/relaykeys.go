package runner

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/relays"
)

// relayKeysTimeout bounds one relay's key announcement request.
const relayKeysTimeout = 3 * time.Second

// CheckRoute asks relays a and b once which HPKE key ids they hold and
// fails (ingest.ErrRelayKeyUnknown) when one does not hold the id of the
// client's public key a or b; relays that do not answer within 3 s (older
// relays) are logged as warnings. Clients call it before sending.
func CheckRoute(ctx context.Context, nc *nats.Conn, a, b onion.PublicKey, log *slog.Logger) error {
	fetch := func(ctx context.Context, relay string) (*onion.RelayKeysResponse, error) {
		rctx, cancel := context.WithTimeout(ctx, relayKeysTimeout)
		defer cancel()
		return relays.FetchKeys(rctx, nc, relay)
	}
	return ingest.CheckRelayKeys(ctx, fetch, []ingest.RelayHop{{Name: "a", Key: a}, {Name: "b", Key: b}}, log)
}
