package pdd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/protocol"
)

// Config is what Dial builds a client's Transport from: the deployment's
// NATS and the operators' public key files.
type Config struct {
	// NATS is the deployment's NATS URL (comma-separated for a cluster).
	NATS string
	// NATSSecurity is the clients' NKey credential and TLS files (the
	// zero value: a NATS server with auth off).
	NATSSecurity ingest.NATSSecurity
	// KeysDir holds relay-a.key.pub, relay-b.key.pub and
	// aggregator.key.pub (ingest.LoadRoute); verify their fingerprints
	// out of band (docs/client.md, "Operator keys").
	KeysDir string
	// SkipRouteCheck skips asking the relays whether the key files are
	// their current keys (ingest.CheckRelayKeys).
	SkipRouteCheck bool
	// MaxPending bounds the onions awaiting JetStream's acknowledgement
	// (publish.Publisher.MaxPending); 0 means publish.DefaultMaxPending.
	MaxPending int
	// Logger receives the transport's log lines; nil: slog.Default().
	Logger *slog.Logger
}

// Dial connects to cfg.NATS, reads the route from cfg.KeysDir, checks it
// with the relays (unless cfg.SkipRouteCheck) and returns the Transport
// Register, Open's client and Ping use. Close it to wait until every onion
// is acknowledged by relay A's stream and to close the connection. Errors
// name the Config field to fix.
func Dial(ctx context.Context, cfg Config) (*Transport, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.NATS == "" {
		return nil, errors.New("pdd: no NATS: set Config.NATS to the deployment's NATS URL")
	}
	if cfg.KeysDir == "" {
		return nil, errors.New("pdd: no route keys: set Config.KeysDir to the directory of relay-a.key.pub, relay-b.key.pub and aggregator.key.pub (the operators' public keys)")
	}
	route, err := ingest.LoadRoute(cfg.KeysDir)
	if err != nil {
		return nil, fmt.Errorf("pdd: Config.KeysDir: %w", err)
	}
	nc, err := cfg.NATSSecurity.Connect(cfg.NATS, "crowdlog-pdd-client")
	if err != nil {
		return nil, fmt.Errorf("pdd: connect to NATS %s: %w", cfg.NATS, err)
	}
	if !cfg.SkipRouteCheck {
		hops := []ingest.RelayHop{{Name: "a", Key: route.RelayA}, {Name: "b", Key: route.RelayB}}
		if err := ingest.CheckRelayKeys(ctx, ingest.NATSRelayKeys(nc), hops, log); err != nil {
			nc.Close()
			return nil, fmt.Errorf("pdd: Config.KeysDir: %w", err)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("pdd: JetStream: %w", err)
	}
	pub := &publish.Publisher{JS: js, Subject: protocol.RelaySubject("a"), MaxPending: cfg.MaxPending, Logger: log}
	return &Transport{NC: nc, Route: route, Publish: pub.Publish, pub: pub, own: nc}, nil
}

// Close waits until every onion published through tr is acknowledged (or
// ctx ends), then closes the connection Dial opened. A Transport built by
// hand is left as it is.
func (tr *Transport) Close(ctx context.Context) error {
	var err error
	if tr.pub != nil {
		err = tr.pub.Close(ctx)
	}
	if tr.own != nil {
		tr.own.Close()
	}
	return err
}
