package pdd

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/keydir"
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
	// aggregator.key.pub (ingest.LoadRoute), and the coordinator
	// operator's coordinator-sign.key.pub (CoordinatorKeyFile), which
	// signs every roster the client blinds for; verify their fingerprints
	// out of band (docs/client.md, "Operator keys").
	KeysDir string
	// Fingerprints are the operators' published fingerprints of key files
	// in KeysDir: file name (CoordinatorKeyFile) → lowercase hex SHA-256
	// of the file's bytes (what `sha256sum FILE` prints), got out of band
	// and compiled into the app. A file that differs is refused
	// (ErrKeyFingerprint); a vouched coordinator key replaces the one a
	// client pinned (a rotation). Empty: trust on first use (the client's
	// state file pins the key).
	Fingerprints map[string]string
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
	coord, vouched, err := loadCoordinatorKey(cfg)
	if err != nil {
		return nil, err
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
	return &Transport{NC: nc, Route: route, Publish: pub.Publish, CoordinatorKey: coord, coordVouched: vouched, pub: pub, own: nc}, nil
}

// CoordinatorKeyFile is the coordinator operator's public signing key
// file (Ed25519, PKIX PEM; `crowdlog keys generate --role coordinator`)
// that Dial reads from Config.KeysDir.
const CoordinatorKeyFile = keydir.CoordinatorSignKey + ".pub"

// ErrKeyFingerprint is returned by Dial when a key file's SHA-256
// differs from its fingerprint in Config.Fingerprints.
var ErrKeyFingerprint = errors.New("pdd: an operator's public key does not match its published fingerprint")

// loadCoordinatorKey reads CoordinatorKeyFile from cfg.KeysDir and checks
// it against cfg.Fingerprints; vouched says a fingerprint named it.
func loadCoordinatorKey(cfg Config) (ed25519.PublicKey, bool, error) {
	for name := range cfg.Fingerprints {
		if name != CoordinatorKeyFile {
			return nil, false, fmt.Errorf("pdd: Config.Fingerprints names %q: only %s", name, CoordinatorKeyFile)
		}
	}
	path := filepath.Join(cfg.KeysDir, CoordinatorKeyFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false, fmt.Errorf("pdd: Config.KeysDir: %w: give the coordinator operator's public signing key %s (it signs every roster the client blinds for; check it against its published fingerprint, Config.Fingerprints)", err, CoordinatorKeyFile)
	}
	fp, vouched := cfg.Fingerprints[CoordinatorKeyFile]
	if sum := sha256.Sum256(b); vouched && hex.EncodeToString(sum[:]) != fp {
		return nil, false, fmt.Errorf("%w: %s has SHA-256 %x, Config.Fingerprints[%q] says %s: get the key file from its operator again and compare out of band",
			ErrKeyFingerprint, CoordinatorKeyFile, sum[:], CoordinatorKeyFile, fp)
	}
	pub, err := keydir.LoadSigningPublic(path)
	if err != nil {
		return nil, false, fmt.Errorf("pdd: Config.KeysDir %s: %w", CoordinatorKeyFile, err)
	}
	return pub, vouched, nil
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
