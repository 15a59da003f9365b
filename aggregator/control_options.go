package aggregator

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
)

// ControlOptions are the settings of `crowdlog aggregate open-epoch` and
// `close-epoch`: the epoch, the brokers and what signs the record.
type ControlOptions struct {
	Kafka      []string // bootstrap brokers, host:port
	App, Epoch string   // both required
	// Key is the file of the pipeline operator's Ed25519 key (PEM); ""
	// writes the record unsigned (logged). With it exactly one of
	// PipelineFile and PipelineDigest (64 hex digits) names the pipeline
	// the record binds.
	Key, PipelineFile, PipelineDigest string
}

// DefaultControlOptions returns the options of open-epoch and close-epoch
// without flags.
func DefaultControlOptions() ControlOptions {
	return ControlOptions{Kafka: []string{infrakafka.DefaultBroker}, App: "query"}
}

// AddFlags adds the flags of open-epoch or close-epoch (verb "open" or
// "close", in the help of --epoch) to f, filling o.
func (o *ControlOptions) AddFlags(f *pflag.FlagSet, verb string) {
	f.StringSliceVar(&o.Kafka, "kafka", o.Kafka, "Kafka bootstrap brokers, comma-separated host:port list")
	f.StringVar(&o.App, "app", o.App, "application")
	f.StringVar(&o.Epoch, "epoch", o.Epoch, "epoch to "+verb)
	f.StringVar(&o.Key, "control-key", o.Key, "the pipeline operator's Ed25519 key (PEM, keys/"+keydir.ControlSignKey+") that signs the record; empty: unsigned, refused by aggregators with --control-pub")
	f.StringVarP(&o.PipelineFile, "pipeline", "f", o.PipelineFile, "the pipeline file whose epoch this is: its digest is bound into the signed record (with --control-key; or --pipeline-digest)")
	f.StringVar(&o.PipelineDigest, "pipeline-digest", o.PipelineDigest, "the pipeline digest (64 hex digits, `crowdlog pipeline show`) bound into the signed record, instead of --pipeline")
}

// Validate checks that the app and the epoch are given.
func (o *ControlOptions) Validate() error {
	if o.App == "" || o.Epoch == "" {
		return errors.New("--app and --epoch are required")
	}
	return nil
}

// Write validates o and writes the record with write (OpenEpoch or
// CloseEpoch), signed as Signer says; digestOf reads a pipeline file's
// digest.
func (o *ControlOptions) Write(ctx context.Context, write func(context.Context, []string, *ControlSigner, string, string) error,
	digestOf func(path string) ([32]byte, error)) error {
	if err := o.Validate(); err != nil {
		return err
	}
	signer, err := o.Signer(digestOf)
	if err != nil {
		return err
	}
	return write(ctx, o.Kafka, signer, o.App, o.Epoch)
}

// Signer reads the control signing key of Key (keydir.LoadSigningKey) and
// the pipeline digest it signs for, from PipelineFile (through digestOf)
// or PipelineDigest; Key "" gives nil (unsigned records, logged). Errors
// (config.UsageError but those of digestOf, as it returns them): a key
// without a pipeline or with both, an unreadable key, a digest that is not
// 64 hex digits.
func (o *ControlOptions) Signer(digestOf func(path string) ([32]byte, error)) (*ControlSigner, error) {
	if o.Key == "" {
		if o.PipelineFile != "" || o.PipelineDigest != "" {
			return nil, config.UsageError{Err: errors.New("--pipeline and --pipeline-digest name what --control-key signs for: give --control-key too")}
		}
		slog.Warn("control record written unsigned (no --control-key): aggregators started with --control-pub refuse it")
		return nil, nil
	}
	key, err := keydir.LoadSigningKey(o.Key)
	if err != nil {
		return nil, config.UsageError{Err: fmt.Errorf("--control-key: %w", err)}
	}
	s := &ControlSigner{Key: key}
	switch {
	case (o.PipelineFile == "") == (o.PipelineDigest == ""):
		return nil, config.UsageError{Err: errors.New("--control-key needs exactly one of --pipeline FILE and --pipeline-digest HEX: the signed record names the pipeline whose epoch it opens or closes")}
	case o.PipelineFile != "":
		if s.Pipeline, err = digestOf(o.PipelineFile); err != nil {
			return nil, err
		}
	default:
		b, err := hex.DecodeString(o.PipelineDigest)
		if err != nil || len(b) != len(s.Pipeline) {
			return nil, config.UsageError{Err: fmt.Errorf("--pipeline-digest %q: want 64 hex digits (`crowdlog pipeline show FILE`)", o.PipelineDigest)}
		}
		copy(s.Pipeline[:], b)
	}
	return s, nil
}
