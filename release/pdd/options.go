package pdd

import (
	"context"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/release"
)

// Options are the settings of one PDD release stage (`crowdlog
// release-pdd`). DefaultOptions gives the defaults; New builds the Stage.
type Options struct {
	Kafka      []string // bootstrap brokers, host:port
	ClickHouse string   // native address host:port
	Database   string   // release database
	Keywords   string   // the campaign's keyword list file; "" = the embedded list
	Epsilon    float64  // Laplace noise per daily count; 0 = exact
	MaxCount   int      // noise sensitivity: per-client per-keyword per-day clip
	Dataset    string   // the privacy budget's name
	Budget     release.Budget
}

// DefaultOptions returns the options of `crowdlog release-pdd` without
// flags.
func DefaultOptions() Options {
	return Options{Kafka: []string{"127.0.0.1:9092"}, ClickHouse: "127.0.0.1:9000", Database: release.DefaultDatabase, Dataset: "default"}
}

// AddFlags adds the flags of `crowdlog release-pdd` (but --metrics) to f,
// filling o; the values in o are the defaults shown.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&o.Kafka, "kafka", o.Kafka, "Kafka bootstrap brokers, comma-separated")
	f.StringVar(&o.ClickHouse, "clickhouse", o.ClickHouse, "ClickHouse native address")
	f.StringVar(&o.Database, "database", o.Database, "ClickHouse database")
	f.StringVar(&o.Keywords, "keywords", o.Keywords, "monitored keyword list (the campaign's)")
	f.Float64Var(&o.Epsilon, "epsilon", o.Epsilon, "Laplace noise per daily count (0 = exact)")
	f.IntVar(&o.MaxCount, "max-count", o.MaxCount, "noise sensitivity: per-client per-keyword per-day clip")
	o.Budget.AddFlags(f, &o.Dataset)
}

// New reads the keyword list, opens ClickHouse (creating the schema) and
// builds the stage. The caller closes the Writer after the stage's Run.
func (o *Options) New(ctx context.Context, log *slog.Logger) (*Stage, *release.Writer, error) {
	l, err := keywords.Load(o.Keywords)
	if err != nil {
		return nil, nil, err
	}
	w, err := release.Open(ctx, o.ClickHouse, o.Database)
	if err != nil {
		return nil, nil, err
	}
	return &Stage{Brokers: o.Kafka, Writer: w, List: l, Epsilon: o.Epsilon, MaxCount: int64(o.MaxCount), Logger: log,
		Dataset: o.Dataset, Budget: o.Budget}, w, nil
}
