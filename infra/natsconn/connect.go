package natsconn

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnectNATS connects to url with reconnects forever (services outlive a
// NATS restart).
func Connect(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				slog.Warn("NATS disconnected; reconnecting", "conn", name, "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { slog.Info("NATS reconnected", "conn", name, "server", c.ConnectedUrlRedacted()) }))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s (is it running? give --nats): %w", url, err)
	}
	return nc, nil
}
