package aggregator

import (
	"log/slog"

	"github.com/crowdlog/crowdlog/protocol/onion"
)

// New builds the aggregator service with the key files.
func New(brokers []string, keyPaths []string, log *slog.Logger) (*Service, error) {
	var keys []*onion.KeyPair
	for _, p := range keyPaths {
		k, err := onion.LoadKeyPair(p)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return &Service{Brokers: brokers, Keys: keys, Logger: log}, nil
}
