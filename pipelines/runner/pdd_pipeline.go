package runner

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
)

// PDDPipelineFlags are the flags of `crowdlog pdd` whose values a pipeline
// file's pdd section gives: with --pipeline they must not be given.
var PDDPipelineFlags = []string{"mode", "group-size", "measurement", "bits", "max-weight", "chunk", "min-batch-size", "l1", "exact-shares"}

// Complete applies the pdd section of --pipeline (PipelineFile) to c,
// refusing the flags of PDDPipelineFlags set beside it. Errors are
// config.UsageError (or the file's read error).
func (c *PDDConfig) Complete(f *pflag.FlagSet) error {
	if c.PipelineFile == "" {
		return nil
	}
	var set []string
	for _, n := range PDDPipelineFlags {
		if fl := f.Lookup(n); fl != nil && fl.Changed {
			set = append(set, "--"+n)
		}
	}
	if len(set) > 0 {
		return config.UsageError{Err: fmt.Errorf("--pipeline gives the campaign's mode and measurement; %s set them too: put them in the file's pdd section or drop --pipeline",
			strings.Join(set, ", "))}
	}
	p, err := LoadPipeline(c.PipelineFile)
	if err != nil {
		return err
	}
	ApplyPipelinePDD(c, p)
	return nil
}

// ApplyPipelinePDD sets the fields of cfg that a pipeline's pdd section
// defines (mode, group size, Prio3 measurement, minimum batch size, L1
// bound and exact shares),
// defaults filled in (pipeline.PDD.Defaults). p must be valid.
func ApplyPipelinePDD(cfg *PDDConfig, p *pipeline.Pipeline) {
	d := p.PDD.Defaults()
	cfg.Mode = d.Mode
	if d.GroupSize != 0 {
		cfg.GroupSize = d.GroupSize
	}
	cfg.Measurement, cfg.Bits, cfg.MaxWeight, cfg.Chunk, cfg.MinBatchSize = d.Measurement, d.Bits, d.MaxWeight, d.Chunk, d.MinBatchSize
	cfg.L1, cfg.ExactShares = d.L1, d.ExactShares
}

// PDDPipelineOf returns the pdd section cfg's fields define, with defaults
// filled in: what ApplyPipelinePDD reads, so a run from flags and a run
// from the equivalent pipeline file use the same value. Fields the mode
// does not use are left out, as a pipeline file leaves them out.
func PDDPipelineOf(cfg PDDConfig) pipeline.PDD {
	q := pipeline.PDD{Mode: cfg.Mode}
	if cfg.Mode != ModePrio3 {
		q.GroupSize = cfg.GroupSize
		return q.Defaults()
	}
	q.Measurement, q.Chunk, q.MinBatchSize, q.ExactShares = cfg.Measurement, cfg.Chunk, cfg.MinBatchSize, cfg.ExactShares
	if cfg.Measurement == MeasurePresence {
		q.MaxWeight = cfg.MaxWeight
	} else {
		q.Bits, q.L1 = cfg.Bits, cfg.L1
	}
	return q.Defaults()
}
