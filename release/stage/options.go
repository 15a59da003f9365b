package stage

import (
	"context"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
)

// Options are the settings of one release stage (`crowdlog release`, and
// the stage `crowdlog run` starts in process): where it reads and writes,
// the summary mode and the privacy budget. The pipeline it serves (Policy
// and the digest Pipeline) is resolved above this package, from a pipeline
// file or the pipeline flags (pipelines/runner.ReleaseOptions).
// DefaultOptions gives the defaults; New builds the Stage.
type Options struct {
	Kafka      []string // bootstrap brokers, host:port
	ClickHouse string   // native address host:port
	Database   string   // release database
	Summary    string   // release.SummaryMode: coarse, exact or none
	Dataset    string   // the privacy budget's name (DP policies)
	Budget     release.Budget

	Policy   *policy.Policy // the pipeline's resolved policy
	Pipeline [32]byte       // the pipeline's digest
}

// DefaultOptions returns the options of `crowdlog release` without flags.
func DefaultOptions() Options {
	return Options{Kafka: []string{"127.0.0.1:9092"}, ClickHouse: "127.0.0.1:9000", Database: release.DefaultDatabase,
		Summary: string(release.SummaryCoarse), Dataset: "default"}
}

// AddFlags adds the stage's flags (--kafka, --clickhouse, --database,
// --summary and the budget flags) to f, filling o; the values in o are the
// defaults shown.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&o.Kafka, "kafka", o.Kafka, "Kafka bootstrap brokers, comma-separated host:port list")
	f.StringVar(&o.ClickHouse, "clickhouse", o.ClickHouse, "ClickHouse native address")
	f.StringVar(&o.Database, "database", o.Database, "ClickHouse database")
	f.StringVar(&o.Summary, "summary", o.Summary, release.SummaryHelp)
	o.Budget.AddFlags(f, &o.Dataset)
}

// Validate checks the summary mode.
func (o *Options) Validate() error {
	_, err := release.ParseSummaryMode(o.Summary)
	return err
}

// New validates o, opens ClickHouse (creating the schema) and builds the
// stage, serving o.Policy and o.Pipeline; the budget applies under a DP
// policy only. The caller closes the Writer after the stage's Run.
func (o *Options) New(ctx context.Context, log *slog.Logger) (*Stage, *release.Writer, error) {
	mode, err := release.ParseSummaryMode(o.Summary)
	if err != nil {
		return nil, nil, err
	}
	st, w, err := New(ctx, o.Kafka, o.ClickHouse, o.Database, log)
	if err != nil {
		return nil, nil, err
	}
	st.Summary = mode
	st.Policy, st.Pipeline = o.Policy, o.Pipeline
	if o.Policy != nil && o.Policy.Kind.IsDP() {
		st.Dataset, st.Budget = o.Dataset, o.Budget
	}
	return st, w, nil
}
