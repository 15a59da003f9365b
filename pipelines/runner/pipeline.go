package runner

import (
	"time"

	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/release"
)

// ApplyPipeline sets the fields of cfg that a pipeline defines (app and
// its options, policy and parameters, budget, summary, epoch, tokens,
// partitions) from p, defaults filled in (pipeline.Pipeline.Defaults); the
// deployment fields (input, servers, state, timeouts, export) are left as
// they are. p must be valid (pipeline.Load validates).
func ApplyPipeline(cfg *Config, p *pipeline.Pipeline) {
	d := p.Defaults()
	o, _ := d.AppOptions()
	cfg.App, cfg.AppOptions = d.App.Name, o
	pp := d.PolicyParams()
	cfg.Policy, cfg.K = d.Policy.Kind, d.Policy.K
	pp.Kind, pp.K = "", 0
	cfg.DP = pp
	cfg.Dataset = d.Policy.Budget.Dataset
	cfg.Budget = release.Budget{Epsilon: d.Policy.Budget.Epsilon, Delta: d.Policy.Budget.Delta}
	cfg.Summary = release.SummaryMode(d.Policy.Summary)
	cfg.Epoch, cfg.EpochLength = d.Epoch.Name, d.Epoch.Length
	cfg.TokensOff = d.Tokens.Mode == "off"
	cfg.RandomnessTokens, cfg.ReportTokens = d.Tokens.Randomness, d.Tokens.Report
	cfg.Partitions, cfg.TopicRetention = d.Topics.Partitions, d.Topics.Retention
}

// PipelineOf returns the pipeline cfg's pipeline fields define, named
// name, with defaults filled in: what ApplyPipeline reads, so a run from
// flags and a run from the equivalent pipeline file use the same value.
// Policy parameters the policy kind does not use are left out, as a
// pipeline file leaves them out.
func PipelineOf(name string, cfg Config) pipeline.Pipeline {
	p := pipeline.Pipeline{Name: name}
	o := cfg.AppOptions
	p.App = pipeline.App{Name: cfg.App, URLLevel: o.URLLevel, SessionGap: o.SessionGap, PairOrder: o.PairOrder,
		RankBuckets: o.Buckets.Rank, DwellBuckets: o.Buckets.Dwell, LengthBuckets: o.Buckets.Length}
	p.Policy = pipeline.Policy{Kind: cfg.Policy, Summary: string(cfg.Summary),
		Budget: pipeline.Budget{Dataset: cfg.Dataset, Epsilon: cfg.Budget.Epsilon, Delta: cfg.Budget.Delta}}
	if kind := p.PolicyParams().Kind; kind.IsDP() {
		dp := cfg.DP
		p.Policy.Epsilon, p.Policy.Delta, p.Policy.D, p.Policy.Users = dp.Epsilon, dp.Delta, dp.D, dp.Users
		p.Policy.CountShare, p.Policy.ShamirK, p.Policy.Slack, p.Policy.Lambda = dp.CountShare, dp.ShamirK, dp.Slack, dp.Lambda
	} else {
		p.Policy.K = cfg.K
	}
	p.Epoch = pipeline.Epoch{Name: cfg.Epoch, Length: cfg.EpochLength}
	if cfg.EpochLength != 0 {
		p.Epoch.Name = ""
	}
	p.Tokens = pipeline.Tokens{Mode: "on", Randomness: cfg.RandomnessTokens, Report: cfg.ReportTokens}
	if cfg.TokensOff {
		p.Tokens.Mode = "off"
	}
	p.Topics = pipeline.Topics{Partitions: cfg.Partitions, Retention: cfg.TopicRetention}
	return p.Defaults()
}

// ApplyPipelineIngest sets the fields of an ingest's cfg that a pipeline
// defines (app and options, policy and parameters, epoch, tokens on or
// off) from p, as ApplyPipeline does for a run. With a schedule
// (epoch.length) the epoch is the scheduled epoch of the current time.
func ApplyPipelineIngest(cfg *IngestConfig, p *pipeline.Pipeline) {
	var rc Config
	ApplyPipeline(&rc, p)
	cfg.App, cfg.AppOptions, cfg.Policy, cfg.K, cfg.DP = rc.App, rc.AppOptions, rc.Policy, rc.K, rc.DP
	cfg.Epoch, cfg.TokensOff = rc.Epoch, rc.TokensOff
	if rc.EpochLength > 0 {
		// a client sends in the scheduled epoch of now, as the roles'
		// clocks open it
		cfg.Epoch = protocol.ScheduleEpoch(time.Now(), rc.EpochLength)
	}
}
