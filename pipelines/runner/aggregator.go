package runner

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/aggregator/vectors"
	"github.com/crowdlog/crowdlog/coordinator"
	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
)

// NewAggregator builds the aggregator of `crowdlog aggregate` from o: it
// reads o.PipelineFiles into o.Pipelines (the aggregator reads no pipeline
// file itself), then aggregator.Options.Service. Errors of a file or a
// flag's value are config.UsageError.
func NewAggregator(o aggregator.Options, log *slog.Logger) (*aggregator.Service, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	for _, f := range o.PipelineFiles {
		p, err := loadPipelineFile(f)
		if err != nil {
			return nil, err
		}
		sv, err := ServedPipeline(p)
		if err != nil {
			return nil, config.UsageError{Err: fmt.Errorf("pipeline %s: %w (the aggregator needs the definition the clients seal for: give policy.users for DP policies)", f, err)}
		}
		sv.File = f
		o.Pipelines = append(o.Pipelines, sv)
	}
	return o.Service(log)
}

// ServedPipeline is what an aggregator serving p needs of it: its name,
// digest and epoch schedule (with its defaults; none for named epochs).
// It errors when the digest cannot be computed (a DP policy without
// policy.users).
func ServedPipeline(p *pipeline.Pipeline) (aggregator.Served, error) {
	spec, err := p.Spec()
	if err != nil {
		return aggregator.Served{}, err
	}
	dp := p.Defaults()
	return aggregator.Served{Name: p.Name, Digest: spec.Digest(), Spec: spec, App: dp.App.Name, EpochLength: dp.Epoch.Length, CloseDelay: dp.Epoch.CloseDelay}, nil
}

// PipelineDigest is the digest of the pipeline file path, which a control
// record signed for its epochs binds. Errors of the file or of the digest
// are config.UsageError.
func PipelineDigest(path string) ([32]byte, error) {
	p, err := loadPipelineFile(path)
	if err != nil {
		return [32]byte{}, err
	}
	d, err := p.Digest()
	if err != nil {
		return d, config.UsageError{Err: fmt.Errorf("pipeline %s: %w (give policy.users for DP policies, or --pipeline-digest)", path, err)}
	}
	return d, nil
}

// loadPipelineFile is pipeline.Load with an invalid file a
// config.UsageError.
func loadPipelineFile(path string) (*pipeline.Pipeline, error) {
	p, err := pipeline.Load(path)
	if errors.Is(err, pipeline.ErrInvalid) {
		return nil, config.UsageError{Err: err}
	}
	return p, err
}

// VectorsRecoverer is the PDD aggregator's recoverer: unmasking requests
// to the coordinator over nc, signed with key (coordinator.NATSRecoverer).
func VectorsRecoverer(nc *nats.Conn, key ed25519.PrivateKey) vectors.Recoverer {
	return coordinator.NATSRecoverer{NC: nc, Key: key}
}
