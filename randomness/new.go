package randomness

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/keydir"
)

// New builds the OPRF randomness service on the epoch key directory
// keysDir/randomness.keys (keydir.RandomnessKeys) with options o (schedule,
// grace; o.LegacyClosed defaults to the older layout's
// keysDir/randomness.seed.closed). A leftover randomness.seed of the older
// layout is no longer used and is reported. Call Run on the result.
func New(ctx context.Context, nc *nats.Conn, keysDir string, o Options, log *slog.Logger) (*Service, error) {
	if o.LegacyClosed == "" {
		o.LegacyClosed = filepath.Join(keysDir, keydir.RandomnessSeed+".closed")
	}
	if o.Logger == nil {
		o.Logger = log
	}
	if _, err := os.Stat(filepath.Join(keysDir, keydir.RandomnessSeed)); err == nil {
		log.Warn("randomness: the seed file of the older layout is no longer used (epoch keys are stored per epoch now); delete it once its epochs are over: it can derive all their keys",
			"seed", filepath.Join(keysDir, keydir.RandomnessSeed), "key_dir", filepath.Join(keysDir, keydir.RandomnessKeys))
	}
	keys, err := Open(filepath.Join(keysDir, keydir.RandomnessKeys), o)
	if err != nil {
		return nil, err
	}
	s := &Service{NC: nc, Keys: keys, Logger: log}
	return s, nil
}
