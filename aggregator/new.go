package aggregator

import (
	"log/slog"

	"github.com/crowdlog/crowdlog/infra/keydir"
)

// New builds the aggregator service with the key files (two during a
// rotation); it errors when keyPaths is empty or a file is bad.
func New(brokers []string, keyPaths []string, log *slog.Logger) (*Service, error) {
	keys, err := keydir.LoadKeyPairs(keyPaths)
	if err != nil {
		return nil, err
	}
	return &Service{Brokers: brokers, Keys: keys, Logger: log}, nil
}
