// Package pipeline is crowdlog's pipeline definition: one YAML file that
// says what a deployment collects and how it is released — the mining
// application and its options, the release policy and its parameters, the
// privacy budget, the epoch, the token budgets and the topics' partitions —
// so that every role reads the same parameters instead of each taking its
// own flags. Load decodes a file strictly (an unknown or misspelled field is
// an error) and Validate checks every field, naming it and what it allows.
//
// Example (testdata/pipelines/query-ftu-k5.yaml):
//
//	name: query-ftu-k5
//	app:
//	  name: query
//	policy:
//	  kind: ft-u
//	  k: 5
package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
)

// Pipeline is one pipeline definition. The zero value of an optional
// field takes the default Defaults documents; Show prints a pipeline with
// its defaults filled in.
type Pipeline struct {
	// Name identifies the pipeline in logs and docs: 1–64 characters of
	// [A-Za-z0-9._-].
	Name string `yaml:"name"`
	// App is the mining application and its options.
	App App `yaml:"app"`
	// Policy is the release policy, its parameters and budget.
	Policy Policy `yaml:"policy"`
	// Epoch is the epoch the pipeline's reports belong to.
	Epoch Epoch `yaml:"epoch,omitempty"`
	// Tokens are the per-identity token budgets of the issuer.
	Tokens Tokens `yaml:"tokens,omitempty"`
	// Topics shape the Kafka topics the pipeline creates.
	Topics Topics `yaml:"topics,omitempty"`
	// PDD is the keyword-count campaign of `crowdlog pdd --pipeline FILE`.
	PDD PDD `yaml:"pdd,omitempty"`
}

// PDD is how a keyword campaign (`crowdlog pdd`, docs/pdd.md) is counted.
type PDD struct {
	// Mode is groups (default: blinded groups with dropout recovery, one
	// aggregator) or prio3 (a leader and a helper aggregator, the Prio3
	// VDAF; no groups).
	Mode string `yaml:"mode,omitempty"`
	// GroupSize (groups): clients per group (default 100).
	GroupSize int `yaml:"group_size,omitempty"`
	// Measurement (prio3): counts (default: per keyword the day's count
	// clipped to 2^bits − 1) or presence (per keyword 0/1, at most
	// max_weight keywords per client and day).
	Measurement string `yaml:"measurement,omitempty"`
	// Bits (prio3 counts): 1..16 (default 4: counts clipped to 15).
	Bits int `yaml:"bits,omitempty"`
	// MaxWeight (prio3 presence): the most keywords a client reports per
	// day; required for presence.
	MaxWeight int `yaml:"max_weight,omitempty"`
	// Chunk (prio3): the proof's chunk length (0 = about √(L·bits)).
	Chunk int `yaml:"chunk,omitempty"`
	// MinBatchSize (prio3): the fewest reports a day is released with
	// (default 10).
	MinBatchSize int `yaml:"min_batch_size,omitempty"`
	// L1 (prio3 counts): the bound S on one client's daily sum of clipped
	// counts (the client keeps its most searched keywords within it), the
	// noise's sensitivity: each aggregator's Laplace scale is S/ε
	// (default 20).
	L1 int `yaml:"l1,omitempty"`
	// ExactShares (prio3): the aggregators release exact shares (no
	// noise; the run's ε must be 0). It gives up the per-person guarantee
	// against a malicious leader, which could pad a batch with reports of
	// its own and read one client's vector.
	ExactShares bool `yaml:"exact_shares,omitempty"`
}

// App is the mining application (docs/applications.md) and the options
// that change what it mines (apps.Options).
type App struct {
	// Name is one of apps.Apps(): query, reformulation, click, url, ltr,
	// keyword.
	Name string `yaml:"name"`
	// URLLevel: click, url, ltr: full, domain (default) or dir.
	URLLevel string `yaml:"url_level,omitempty"`
	// SessionGap: reformulation: an idle time longer than this starts a
	// new session (default 30m).
	SessionGap time.Duration `yaml:"session_gap,omitempty"`
	// PairOrder: reformulation: time (default) or sorted.
	PairOrder string `yaml:"pair_order,omitempty"`
	// RankBuckets, DwellBuckets, LengthBuckets: ltr: upper bounds of the
	// feature buckets, strictly increasing (defaults in apps).
	RankBuckets   []int           `yaml:"rank_buckets,omitempty,flow"`
	DwellBuckets  []time.Duration `yaml:"dwell_buckets,omitempty,flow"`
	LengthBuckets []int           `yaml:"length_buckets,omitempty,flow"`
}

// Policy is the release policy (docs/policies.md) with its parameters
// (release/policy.Params) and the privacy budget its DP releases spend.
type Policy struct {
	// Kind is one of ft-u, ft-a, dp-a, dp-u, zealous, dp-su, dp-gsu.
	Kind string `yaml:"kind"`
	// K is the threshold of ft-u/ft-a, 1..vss.MaxK.
	K int `yaml:"k,omitempty"`
	// Epsilon, Delta, D, Users, CountShare, ShamirK, Slack, Lambda are the
	// DP policies' parameters (policy.Params; 0 = the default there).
	// Epsilon and Users are required for a DP policy: U is public
	// configuration, never counted from the input.
	Epsilon    float64 `yaml:"epsilon,omitempty"`
	Delta      float64 `yaml:"delta,omitempty"`
	D          int     `yaml:"d,omitempty"`
	Users      int     `yaml:"users,omitempty"`
	CountShare float64 `yaml:"count_share,omitempty"`
	ShamirK    int     `yaml:"shamir_k,omitempty"`
	Slack      float64 `yaml:"slack,omitempty"`
	Lambda     float64 `yaml:"lambda,omitempty"`
	// Budget is the privacy budget DP releases spend from.
	Budget Budget `yaml:"budget,omitempty"`
	// Summary is how much of the undecrypted summary is published:
	// coarse (default), exact or none (release.ParseSummaryMode).
	Summary string `yaml:"summary,omitempty"`
}

// Budget is the privacy budget of (Dataset, epoch) (release.Budget); 0 =
// no limit on that coordinate.
type Budget struct {
	Dataset string  `yaml:"dataset,omitempty"`
	Epsilon float64 `yaml:"epsilon,omitempty"`
	Delta   float64 `yaml:"delta,omitempty"`
}

// Epoch is the epoch of the pipeline's reports: one named epoch, or a
// schedule of epochs of one length.
type Epoch struct {
	// Name is the epoch of the whole input of a replay (default "all",
	// when Length is not set).
	Name string `yaml:"name,omitempty"`
	// Length, when set (e.g. 168h), makes the epochs a schedule: a
	// replay puts each record in the epoch its time falls in, named
	// START-LENGTH (START aligned to the Unix epoch, UTC), as the
	// randomness service's schedule names them. A positive whole number of
	// seconds; not together with Name.
	Length time.Duration `yaml:"length,omitempty"`
	// CloseDelay (with Length): how long after an epoch's end the
	// aggregator closes it on its own clock — the time the epoch's last
	// reports need to cross the relays (default 10m).
	CloseDelay time.Duration `yaml:"close_delay,omitempty"`
	// Grace (with Length): how long an epoch's keys (randomness, issuer)
	// survive its end before they are destroyed; at least CloseDelay
	// (default 1h).
	Grace time.Duration `yaml:"grace,omitempty"`
}

// Defaults of a schedule's CloseDelay and Grace.
const (
	DefaultCloseDelay = 10 * time.Minute
	DefaultGrace      = time.Hour
)

// Tokens are the issuer's budgets per enrolled identity and epoch.
type Tokens struct {
	// Mode is on (default) or off (comparison only: gives up the probe and
	// Sybil protection).
	Mode string `yaml:"mode,omitempty"`
	// Randomness is N, randomness tokens (OPRF elements) per identity and
	// epoch; Report is d, report tokens. 0 = what `crowdlog run` derives
	// from the input and policy.
	Randomness int `yaml:"randomness,omitempty"`
	Report     int `yaml:"report,omitempty"`
}

// Topics shape the topics `crowdlog run` and `crowdlog topics` create.
type Topics struct {
	// Partitions of the reports and decrypted topics (default 8, 1..1024).
	Partitions int `yaml:"partitions,omitempty"`
	// Retention is the least time the topics keep their records (Kafka's
	// retention.ms): with a schedule at least epoch.length + epoch.grace,
	// default twice that; without one, 0 = the broker's default.
	Retention time.Duration `yaml:"retention,omitempty"`
}

// Defaults of the pdd fields.
const (
	DefaultPDDMode      = "groups"
	DefaultGroupSize    = 100
	DefaultMeasurement  = "counts"
	DefaultBits         = 4
	DefaultMinBatchSize = 10
	// DefaultL1 is protocol/prio3.DefaultL1, the SumVec L1 bound S.
	DefaultL1 = 20
)

// Defaults of the optional fields.
const (
	DefaultEpoch      = "all"
	DefaultPartitions = 8
	DefaultDataset    = "default"
	DefaultTokens     = "on"
)

// ErrInvalid is wrapped by every error Validate and Load return for a
// pipeline that decodes but breaks a rule, and for fields that do not
// decode: the message names the field and what it allows.
var ErrInvalid = errors.New("invalid pipeline")

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Load reads and decodes the pipeline file path and validates it. Errors
// wrap ErrInvalid (unknown field, wrong type, a rule broken: the message
// names the field) or the file's read error.
func Load(path string) (*Pipeline, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pipeline: read %s: %w", path, err)
	}
	p, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: %w", path, err)
	}
	return p, nil
}

// Parse decodes one YAML document strictly (unknown fields are errors)
// and validates it; errors wrap ErrInvalid.
func Parse(b []byte) (*Pipeline, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var p Pipeline
	if err := dec.Decode(&p); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: the file is empty (a pipeline needs at least name, app.name and policy.kind)", ErrInvalid)
		}
		msg := strings.ReplaceAll(strings.ReplaceAll(err.Error(), "yaml: ", ""), "\n ", ";")
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.TrimSpace(strings.ReplaceAll(msg, "unmarshal errors:;", "")))
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more than one YAML document; a file holds one pipeline", ErrInvalid)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

func invalid(field, format string, a ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, a...))
}

// Validate checks every field and returns the first broken rule, naming
// the field (as in the YAML, e.g. policy.k) and the allowed values. It
// does not change p.
func (p *Pipeline) Validate() error {
	if !nameRE.MatchString(p.Name) {
		return invalid("name", "%q: want 1–64 characters of letters, digits, '.', '_' or '-'", p.Name)
	}
	if _, err := p.AppOptions(); err != nil {
		return err
	}
	kind, err := policy.Parse(p.Policy.Kind)
	if err != nil {
		return invalid("policy.kind", "%q: want one of %v", p.Policy.Kind, policy.Kinds())
	}
	pp := p.Policy
	if kind.IsDP() {
		if pp.K != 0 {
			return invalid("policy.k", "%d: %s derives its Shamir threshold; set policy.shamir_k instead, or leave k out", pp.K, kind)
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{"policy.epsilon", pp.Epsilon}, {"policy.delta", pp.Delta}, {"policy.count_share", pp.CountShare}, {"policy.slack", pp.Slack}, {"policy.lambda", pp.Lambda}} {
			if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
				return invalid(f.name, "%v: want a finite number ≥ 0 (0 = the default)", f.v)
			}
		}
		if pp.Epsilon == 0 {
			return invalid("policy.epsilon", "missing: %s needs ε > 0 (CrowdLogging's experiments use ln 10 = 2.302585)", kind)
		}
		if pp.D < 0 || pp.Users < 0 || pp.ShamirK < 0 {
			return invalid("policy", "d %d, users %d, shamir_k %d: want ≥ 0", pp.D, pp.Users, pp.ShamirK)
		}
		if pp.Users == 0 {
			return invalid("policy.users", "missing: %s needs U, the number of users an epoch is planned for (public configuration: δ defaults to 1/(U+1); never counted from the input)", kind)
		}
		d := p.Defaults()
		if _, err := policy.New(d.PolicyParams()); err != nil {
			return fmt.Errorf("%w: policy: %v", ErrInvalid, err)
		}
	} else {
		for name, v := range map[string]float64{"policy.epsilon": pp.Epsilon, "policy.delta": pp.Delta, "policy.count_share": pp.CountShare,
			"policy.slack": pp.Slack, "policy.lambda": pp.Lambda, "policy.budget.epsilon": pp.Budget.Epsilon, "policy.budget.delta": pp.Budget.Delta} {
			if v != 0 {
				return invalid(name, "%v: %s adds no noise and spends no budget; leave it out", v, kind)
			}
		}
		if pp.D != 0 || pp.Users != 0 || pp.ShamirK != 0 {
			return invalid("policy", "d, users and shamir_k are DP parameters; %s takes k only", kind)
		}
		if _, err := policy.New(p.PolicyParams()); err != nil {
			return invalid("policy.k", "%d: %v", pp.K, err)
		}
	}
	if pp.Budget.Epsilon < 0 || pp.Budget.Delta < 0 || math.IsNaN(pp.Budget.Epsilon) || math.IsNaN(pp.Budget.Delta) {
		return invalid("policy.budget", "epsilon %v, delta %v: want ≥ 0 (0 = no limit)", pp.Budget.Epsilon, pp.Budget.Delta)
	}
	if pp.Budget.Dataset != "" && !nameRE.MatchString(pp.Budget.Dataset) {
		return invalid("policy.budget.dataset", "%q: want 1–64 characters of letters, digits, '.', '_' or '-'", pp.Budget.Dataset)
	}
	if _, err := release.ParseSummaryMode(pp.Summary); err != nil {
		return invalid("policy.summary", "%q: want coarse (default), exact or none", pp.Summary)
	}
	if l := p.Epoch.Length; l < 0 || l%time.Second != 0 {
		return invalid("epoch.length", "%s: want a positive whole number of seconds, e.g. 168h (0 = one named epoch)", l)
	}
	if p.Epoch.Length == 0 && (p.Epoch.CloseDelay != 0 || p.Epoch.Grace != 0) {
		return invalid("epoch", "close_delay and grace belong to a schedule: give epoch.length too")
	}
	if p.Epoch.CloseDelay < 0 || p.Epoch.Grace < 0 {
		return invalid("epoch", "close_delay %s, grace %s: want ≥ 0 (0 = %s, %s)", p.Epoch.CloseDelay, p.Epoch.Grace, DefaultCloseDelay, DefaultGrace)
	}
	if d := p.Defaults(); d.Epoch.Length != 0 && d.Epoch.Grace < d.Epoch.CloseDelay {
		return invalid("epoch.grace", "%s: want at least close_delay (%s): the aggregator checks the epoch's tokens until it closes", d.Epoch.Grace, d.Epoch.CloseDelay)
	}
	if p.Epoch.Length != 0 && p.Epoch.Name != "" {
		return invalid("epoch", "name %q and length %s: give one (scheduled epochs are named START-LENGTH)", p.Epoch.Name, p.Epoch.Length)
	}
	if n := p.Epoch.Name; n != "" && (len(n) > 64 || strings.ContainsAny(n, "/\\ \t\n") || n == "." || n == "..") {
		return invalid("epoch.name", "%q: want 1–64 characters without '/', '\\' or white space", n)
	}
	switch p.Tokens.Mode {
	case "", "on", "off":
	default:
		return invalid("tokens.mode", "%q: want on (default) or off", p.Tokens.Mode)
	}
	if p.Tokens.Randomness < 0 || p.Tokens.Report < 0 {
		return invalid("tokens", "randomness %d, report %d: want ≥ 0 (0 = derived from the input)", p.Tokens.Randomness, p.Tokens.Report)
	}
	if p.Tokens.Mode == "off" && (p.Tokens.Randomness != 0 || p.Tokens.Report != 0) {
		return invalid("tokens", "budgets given with mode off; remove them or turn tokens on")
	}
	if d := p.Defaults(); d.Epoch.Length > 0 && d.Topics.Retention < d.Epoch.Length+d.Epoch.Grace {
		return invalid("topics.retention", "%s: want at least epoch.length + epoch.grace (%s): a rebuilt aggregator replays the epoch's reports", d.Topics.Retention, d.Epoch.Length+d.Epoch.Grace)
	}
	if p.Topics.Retention < 0 {
		return invalid("topics.retention", "%s: want ≥ 0 (0 = the default)", p.Topics.Retention)
	}
	if n := p.Topics.Partitions; n < 0 || n > 1024 {
		return invalid("topics.partitions", "%d: want 1..1024 (0 = %d)", n, DefaultPartitions)
	}
	return p.PDD.validate()
}

// validate checks the pdd section.
func (q PDD) validate() error {
	switch q.Mode {
	case "", "groups":
		if q.Measurement != "" || q.Bits != 0 || q.MaxWeight != 0 || q.Chunk != 0 || q.MinBatchSize != 0 || q.L1 != 0 || q.ExactShares {
			return invalid("pdd", "measurement, bits, max_weight, chunk, min_batch_size, l1 and exact_shares belong to mode prio3")
		}
		if q.GroupSize < 0 {
			return invalid("pdd.group_size", "%d: want ≥ 2 (0 = %d)", q.GroupSize, DefaultGroupSize)
		}
		return nil
	case "prio3":
	default:
		return invalid("pdd.mode", "%q: want groups (default) or prio3", q.Mode)
	}
	if q.GroupSize != 0 {
		return invalid("pdd.group_size", "mode prio3 has no groups; leave it out")
	}
	switch q.Measurement {
	case "", "counts":
		if q.MaxWeight != 0 {
			return invalid("pdd.max_weight", "belongs to measurement presence")
		}
		if q.Bits < 0 || q.Bits > 16 {
			return invalid("pdd.bits", "%d: want 1..16 (0 = %d)", q.Bits, DefaultBits)
		}
		if q.L1 < 0 {
			return invalid("pdd.l1", "%d: want ≥ 1 (0 = %d)", q.L1, DefaultL1)
		}
	case "presence":
		if q.Bits != 0 || q.L1 != 0 {
			return invalid("pdd.bits", "bits and l1 belong to measurement counts (presence is bounded by max_weight)")
		}
		if q.MaxWeight < 1 {
			return invalid("pdd.max_weight", "%d: measurement presence needs the most keywords a client reports per day (≥ 1)", q.MaxWeight)
		}
	default:
		return invalid("pdd.measurement", "%q: want counts (default) or presence", q.Measurement)
	}
	if q.Chunk < 0 || q.MinBatchSize < 0 {
		return invalid("pdd", "chunk %d, min_batch_size %d: want ≥ 0 (0 = the default)", q.Chunk, q.MinBatchSize)
	}
	return nil
}

// Defaults returns q with the defaults of its mode filled in.
func (q PDD) Defaults() PDD {
	if q.Mode == "" {
		q.Mode = DefaultPDDMode
	}
	if q.Mode != "prio3" {
		if q.GroupSize == 0 {
			q.GroupSize = DefaultGroupSize
		}
		return q
	}
	if q.Measurement == "" {
		q.Measurement = DefaultMeasurement
	}
	if q.Measurement == "counts" && q.Bits == 0 {
		q.Bits = DefaultBits
	}
	if q.Measurement == "counts" && q.L1 == 0 {
		q.L1 = DefaultL1
	}
	if q.MinBatchSize == 0 {
		q.MinBatchSize = DefaultMinBatchSize
	}
	return q
}

// AppOptions returns the application's options as apps.Options, validated
// by the application (apps.LookupWith); errors wrap ErrInvalid and name
// the app field.
func (p *Pipeline) AppOptions() (apps.Options, error) {
	o := apps.Options{URLLevel: p.App.URLLevel, SessionGap: p.App.SessionGap, PairOrder: p.App.PairOrder,
		Buckets: apps.Buckets{Rank: p.App.RankBuckets, Dwell: p.App.DwellBuckets, Length: p.App.LengthBuckets}}
	if p.App.Name == "" {
		return o, invalid("app.name", "missing: want one of %v", apps.Apps())
	}
	if _, err := apps.LookupWith(p.App.Name, o); err != nil {
		return o, fmt.Errorf("%w: app: %s", ErrInvalid, appFields.Replace(err.Error()))
	}
	return o, nil
}

// appFields renames the application's flag names in its errors to the
// pipeline's fields.
var appFields = strings.NewReplacer("pipelines: ", "", "--url-level", "app.url_level", "--session-gap", "app.session_gap",
	"--pair-order", "app.pair_order", "--rank-buckets", "app.rank_buckets", "--dwell-buckets", "app.dwell_buckets",
	"--length-buckets", "app.length_buckets")

// PolicyParams returns the policy's parameters as policy.Params (Kind
// parsed; an unknown kind gives the zero Kind: Validate first).
func (p *Pipeline) PolicyParams() policy.Params {
	kind, _ := policy.Parse(p.Policy.Kind)
	pp := p.Policy
	return policy.Params{Kind: kind, K: pp.K, Epsilon: pp.Epsilon, Delta: pp.Delta, D: pp.D, Users: pp.Users,
		CountShare: pp.CountShare, ShamirK: pp.ShamirK, Slack: pp.Slack, Lambda: pp.Lambda}
}

// Defaults returns p with every optional field that has a fixed default
// filled in (epoch.name, policy.summary, policy.budget.dataset,
// tokens.mode, topics.partitions, the application's option defaults, and
// for DP policies d = policy.DefaultD, count_share and slack as in
// release/policy). Policy parameters whose defaults depend on others (δ,
// Shamir k, λ) stay as given: policy.New derives them; ε and U have no
// default.
func (p Pipeline) Defaults() Pipeline {
	if p.Epoch.Name == "" && p.Epoch.Length == 0 {
		p.Epoch.Name = DefaultEpoch
	}
	if p.Epoch.Length != 0 {
		if p.Epoch.CloseDelay == 0 {
			p.Epoch.CloseDelay = DefaultCloseDelay
		}
		if p.Epoch.Grace == 0 {
			p.Epoch.Grace = DefaultGrace
		}
		if p.Topics.Retention == 0 {
			p.Topics.Retention = 2 * (p.Epoch.Length + p.Epoch.Grace)
		}
	}
	if p.Policy.Summary == "" {
		p.Policy.Summary = string(release.SummaryCoarse)
	}
	if p.Policy.Budget.Dataset == "" {
		p.Policy.Budget.Dataset = DefaultDataset
	}
	if p.Tokens.Mode == "" {
		p.Tokens.Mode = DefaultTokens
	}
	if p.Topics.Partitions == 0 {
		p.Topics.Partitions = DefaultPartitions
	}
	p.PDD = p.PDD.Defaults()
	switch kind, _ := policy.Parse(p.Policy.Kind); kind {
	case policy.DPa, policy.DPu:
		if p.Policy.CountShare == 0 {
			p.Policy.CountShare = policy.DefaultCountShare
		}
		if p.Policy.Slack == 0 {
			p.Policy.Slack = policy.DefaultSlack
		}
		fallthrough
	case policy.Zealous, policy.DPSU, policy.DPGSU:
		if p.Policy.D == 0 {
			p.Policy.D = policy.DefaultD(kind)
		}
	}
	if o, err := p.AppOptions(); err == nil {
		if full, err := o.WithDefaults(); err == nil {
			p.App.URLLevel, p.App.SessionGap, p.App.PairOrder = full.URLLevel, full.SessionGap, full.PairOrder
			p.App.RankBuckets, p.App.DwellBuckets, p.App.LengthBuckets = full.Buckets.Rank, full.Buckets.Dwell, full.Buckets.Length
		}
	}
	return p
}

// Show returns p with its defaults filled in (Defaults) as YAML, the form
// `crowdlog pipeline show` prints; Parse reads it back to the same value.
func (p Pipeline) Show() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(p.Defaults()); err != nil {
		return nil, fmt.Errorf("pipeline: encode %s: %w", p.Name, err)
	}
	enc.Close()
	return buf.Bytes(), nil
}
