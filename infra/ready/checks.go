package ready

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATS checks that nc is connected (nats.CONNECTED, not reconnecting or
// closed) and that the server answers a PING within the timeout (a server
// that hangs keeps the connection "connected" until the client's own ping
// interval passes). Name "nats".
func NATS(nc *nats.Conn) Check {
	return Check{Name: "nats", Fn: func(ctx context.Context) error {
		if nc == nil {
			return errors.New("no connection")
		}
		if st := nc.Status(); st != nats.CONNECTED {
			return fmt.Errorf("not connected (%s)", strings.ToLower(st.String()))
		}
		if err := nc.FlushWithContext(ctx); err != nil {
			return fmt.Errorf("server does not answer: %w", err)
		}
		return nil
	}}
}

// JetStream checks that the JetStream of js's connection answers an
// account-info request (JetStream enabled and reachable, e.g. not lost
// its meta leader). Name "jetstream".
func JetStream(js jetstream.JetStream) Check {
	return Check{Name: "jetstream", Fn: func(ctx context.Context) error {
		if js == nil {
			return errors.New("no JetStream context")
		}
		if _, err := js.AccountInfo(ctx); err != nil {
			return fmt.Errorf("account info: %w", err)
		}
		return nil
	}}
}

// Dir checks that dir exists and is a directory (e.g. a key directory on
// a volume that must stay mounted). name names the check.
func Dir(name, dir string) Check {
	return Check{Name: name, Fn: func(context.Context) error {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}}
}
