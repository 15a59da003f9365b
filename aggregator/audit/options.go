package audit

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol"
)

// Options are the settings of `crowdlog aggregate audit`.
type Options struct {
	Kafka      []string // bootstrap brokers, host:port
	KeyPaths   []string // the aggregator's HPKE key files; required
	App, Epoch string   // the epoch audited; Epoch required
	// ControlPub is the file of the pipeline operator's Ed25519 public key
	// (PEM) given to the aggregator; "" counts every close record.
	ControlPub string
}

// DefaultOptions returns the options of `crowdlog aggregate audit`
// without flags.
func DefaultOptions() Options {
	return Options{Kafka: []string{infrakafka.DefaultBroker}, App: "query"}
}

// AddFlags adds the flags of `crowdlog aggregate audit` to f, filling o.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&o.Kafka, "kafka", o.Kafka, "Kafka bootstrap brokers, comma-separated host:port list")
	f.StringSliceVar(&o.KeyPaths, "key", o.KeyPaths, "aggregator HPKE key file (repeat during a rotation)")
	f.StringVar(&o.App, "app", o.App, "application")
	f.StringVar(&o.Epoch, "epoch", o.Epoch, "epoch to audit")
	f.StringVar(&o.ControlPub, "control-pub", o.ControlPub, "the pipeline operator's Ed25519 public key (PEM), as given to the aggregator: only close records it signed end the epoch")
}

// Validate checks that the key files and the epoch are given.
func (o *Options) Validate() error {
	if len(o.KeyPaths) == 0 || o.Epoch == "" {
		return errors.New("--key and --epoch are required")
	}
	return nil
}

// Run validates o, reads its keys and audits the epoch on the topics
// reports and decrypted (RunVerified). An unreadable --control-pub is a
// config.UsageError.
func (o *Options) Run(ctx context.Context) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	keys, err := keydir.LoadKeyPairs(o.KeyPaths)
	if err != nil {
		return nil, err
	}
	var pub ed25519.PublicKey
	if o.ControlPub != "" {
		if pub, err = keydir.LoadSigningPublic(o.ControlPub); err != nil {
			return nil, config.UsageError{Err: fmt.Errorf("--control-pub: %w", err)}
		}
	}
	return RunVerified(ctx, o.Kafka, protocol.ReportsTopic, protocol.DecryptedTopic, keys, pub, o.App, o.Epoch)
}
