package natsconn_test

import (
	"context"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
)

// TestConnectTimeout: ConnectAs bounds each connection attempt by
// DefaultConnectTimeout, or by Security.ConnectTimeout when set, rather
// than nats.go's 2 s.
func TestConnectTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	for _, c := range []struct {
		set, want time.Duration
	}{{0, natsconn.DefaultConnectTimeout}, {42 * time.Second, 42 * time.Second}} {
		nc, err := natsconn.ConnectAs(srv.URL, "t", natsconn.Security{ConnectTimeout: c.set})
		if err != nil {
			t.Fatal(err)
		}
		if nc.Opts.Timeout != c.want {
			t.Errorf("ConnectTimeout %s: the connection waits %s, want %s", c.set, nc.Opts.Timeout, c.want)
		}
		nc.Close()
	}
}
