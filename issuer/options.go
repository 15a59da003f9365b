package issuer

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
)

// Help is the long help of `crowdlog issuer`.
const Help = `issuer is the Privacy Pass issuer (RFC 9576; tokens RFC 9578 §5 over
VOPRF ristretto255-SHA512, ARC credentials draft-ietf-privacypass-arc). It
answers on ` + protocol.IssuerSubject + ` (queue group: more processes on
one NATS share the load and the counters) and publishes each epoch's public
keys on ` + protocol.IssuerPublicKeySubject + `.

A request is signed by the client's Ed25519 identity key, which must be on
the enrollment list DIR/` + keydir.EnrollmentFile + ` ('crowdlog keys enroll'; the list is
reread when it changes). Each identity gets, per epoch, at most N randomness
tokens (one per OPRF element at the randomness service), at most D report
tokens (one per report at the aggregator) and one ARC credential (FT_u counts
credentials, not self-chosen secrets). Counts are reserved in JetStream KV
` + protocol.IssuerCountersBucket + ` before an answer leaves, so replicas never
over-issue together and a restart keeps them. The issuer sees blinded values
only: it cannot link a token it issued to its redemption, and it stores and
logs only hashed identities, epochs, kinds and counts (each count with the
SHA-256 of its last 16 requests, so that a client's retry after a lost
answer is answered again without being counted twice).

Keys: DIR/` + keydir.IssuerKeys + `/EPOCH.{randomness,report,arc}.key (0600), created by --epoch (an operator opens each epoch; requests naming
another epoch are refused and create nothing). Which kinds depends on DIR:
on a single host ('keys generate' without --role) all three, in one
directory shared with the randomness service and the aggregator. With
separate operators the tokens are privately verifiable, so each is issued
where it is verified (RFC 9576 §4.3, Joint Origin and Issuer): the
aggregator's operator runs this command on its own directory ('keys
generate --role aggregator': report tokens and ARC credentials, on the
subjects above) and the randomness operator on its own ('--role
randomness': randomness tokens, on ` + protocol.IssuerRandomnessSubject + `[.pubkey] with
counters in ` + protocol.IssuerRandomnessCountersBucket + `, connecting with the randomness
operator's NATS credential). Each creates and loads only its kinds and
refuses the others (refusal "kind"); no issuer key is ever copied between
operators. Clients merge both answers into one pinned key set. The
enrollment list comes from the attester ('keys generate --role attester',
'keys export-public', then 'keys import-public' here).

--role aggregator|randomness limits the issuer to that operator's kinds
where DIR is a volume of its own rather than a directory made by 'keys
generate --role' (a Kubernetes PersistentVolumeClaim the verifier shares):
it marks DIR with the role's custody marker before serving (creating no
private key; idempotent) and refuses a DIR marked for another role or
holding issuer keys of a kind the role does not issue. Only the budget of
the kinds held must be positive: --report-tokens at the aggregator's
operator, --randomness-tokens at the randomness operator.

Scheduled epochs (--epoch-length, or epoch.length in --pipeline FILE): the
issuer creates the keys of the current epoch (named START-LENGTH as the
randomness schedule names them) and, a minute before it starts, the next
one's, without a restart; an epoch's keys are destroyed --key-grace after
its end (keep it at least the aggregator's close delay). --pipeline also
gives the budgets (tokens.randomness, tokens.report).`

// Options are the flags of an issuer process (`crowdlog issuer`).
type Options struct {
	NATS natsconn.Options
	// Keys is the keys directory: the enrollment list and the epoch keys.
	Keys string
	// Role ("aggregator", "randomness" or "") marks Keys with that
	// operator's custody marker before serving (keydir.MarkIssuerRole).
	Role string
	// Limits are the per-identity, per-epoch budgets N and d.
	Limits Limits
	// Epochs are opened (their keys created) before serving.
	Epochs []string
	// Schedule (Length > 0) runs scheduled epochs (RunSchedule).
	Schedule Schedule
	// PipelineFile, when set, is the pipeline file whose epoch schedule
	// and token budgets apply unless given as flags (ApplyPipeline).
	PipelineFile string
}

// Config is what an issuer process serves: its keys directory, the kinds
// held there, the budgets, the schedule and the NATS role it connects as.
type Config struct {
	Keys     string
	Kinds    []string // keydir.IssuerKindsOf(Keys)
	Limits   Limits
	Epochs   []string
	Schedule Schedule
	NATSRole natsauth.Role
}

// NewOptions returns the issuer's defaults: keys directory "keys", an
// hour's key grace, no budgets.
func NewOptions() *Options {
	return &Options{Keys: "keys", Schedule: Schedule{Grace: time.Hour}}
}

// AddFlags adds the issuer's flags to f, with o's values as defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.NATS.AddFlags(f, "NATS URL (JetStream enabled); a comma-separated list for a cluster")
	f.StringVar(&o.Keys, "keys", o.Keys, "keys directory: the enrollment list "+keydir.EnrollmentFile+" and the epoch keys in "+keydir.IssuerKeys+"/")
	f.StringVar(&o.Role, "role", o.Role, "the operator this issuer runs at, aggregator (report tokens, ARC credentials), randomness (randomness tokens), prio3-helper (Prio3 helper tokens, one per identity per campaign-day, keyed by the helper's "+keydir.Prio3HelperTokenSeed+"; run it on the helper aggregator's keys volume) or prio3-leader (Prio3 leader tokens, the same at the leader's operator, keyed by its "+keydir.Prio3LeaderTokenSeed+"): marks --keys DIR with that role's custody marker, so only its kinds are issued; empty: DIR's own marker (keys generate --role), or every kind without one (single host)")
	f.IntVar(&o.Limits.RandomnessTokens, "randomness-tokens", o.Limits.RandomnessTokens, "N: randomness tokens (OPRF elements) per identity and epoch")
	f.IntVar(&o.Limits.ReportTokens, "report-tokens", o.Limits.ReportTokens, "d: report tokens (reports) per identity and epoch")
	f.StringSliceVar(&o.Epochs, "epoch", o.Epochs, "open these epochs: create their keys before serving (requests for epochs not opened are refused); repeatable, idempotent")
	f.DurationVar(&o.Schedule.Length, "epoch-length", o.Schedule.Length, "scheduled epochs of this length (e.g. 168h): keys of the current and next epoch created on the clock; 0 = only --epoch")
	f.DurationVar(&o.Schedule.Grace, "key-grace", o.Schedule.Grace, "with --epoch-length: how long an epoch's keys survive its end before they are destroyed")
	f.StringVarP(&o.PipelineFile, "pipeline", "f", "", "pipeline file: its epoch schedule (epoch.length, epoch.grace) and token budgets (tokens.randomness, tokens.report) unless given as flags")
}

// ApplyPipeline takes a pipeline's token budgets (randomness, report) and
// epoch schedule (length, grace) for the positive values whose flags f
// does not have changed.
func (o *Options) ApplyPipeline(f *pflag.FlagSet, randomness, report int, length, grace time.Duration) {
	if randomness > 0 && !f.Changed("randomness-tokens") {
		o.Limits.RandomnessTokens = randomness
	}
	if report > 0 && !f.Changed("report-tokens") {
		o.Limits.ReportTokens = report
	}
	if length > 0 && !f.Changed("epoch-length") {
		o.Schedule.Length, o.Schedule.Grace = length, grace
	}
}

// Validate errors when the keys directory is not the issuer's (it belongs
// to neither the aggregator's nor the randomness operator).
func (o *Options) Validate() error {
	return keydir.RequireRole(o.Keys, "the issuer", keydir.RoleAggregator, keydir.RoleRandomness, keydir.RolePrio3Helper, keydir.RolePrio3Leader)
}

// Config marks the keys directory with o.Role (when set), validates o and
// returns the Config: the kinds held in the directory, each with a
// positive budget, and the NATS role (the randomness operator's issuer
// connects with that operator's credential, whose row holds its subjects
// and counters bucket).
func (o *Options) Config() (Config, error) {
	if o.Role != "" {
		if err := keydir.MarkIssuerRole(o.Keys, o.Role); err != nil {
			return Config{}, fmt.Errorf("issuer --role %s: %w", o.Role, err)
		}
	}
	if err := o.Validate(); err != nil {
		return Config{}, err
	}
	kinds, err := keydir.IssuerKindsOf(o.Keys)
	if err != nil {
		return Config{}, err
	}
	if err := CheckBudgets(kinds, o.Limits); err != nil {
		return Config{}, err
	}
	c := Config{Keys: o.Keys, Kinds: kinds, Limits: o.Limits, Epochs: o.Epochs, Schedule: o.Schedule, NATSRole: natsauth.Issuer}
	switch role, _ := keydir.DirRole(o.Keys); role {
	case keydir.RoleRandomness:
		c.NATSRole = natsauth.Randomness
	case keydir.RolePrio3Helper:
		// the helper's own issuer: its seed (shared with the helper
		// aggregator on the same volume) and the helper's NATS account
		if _, err := keydir.EnsurePrio3TokenSeed(filepath.Join(o.Keys, keydir.Prio3HelperTokenSeed)); err != nil {
			return Config{}, err
		}
		c.NATSRole = natsauth.Prio3Helper
	case keydir.RolePrio3Leader:
		// the leader's own issuer, the same on the leader's volume
		if _, err := keydir.EnsurePrio3TokenSeed(filepath.Join(o.Keys, keydir.Prio3LeaderTokenSeed)); err != nil {
			return Config{}, err
		}
		c.NATSRole = natsauth.Prio3Leader
	}
	return c, nil
}

// OpenEpochs creates the keys of c.Epochs (keydir.EnsureIssuerKeys;
// idempotent).
func (c Config) OpenEpochs() error {
	for _, e := range c.Epochs {
		if err := keydir.EnsureIssuerKeys(c.Keys, e); err != nil {
			return err
		}
	}
	return nil
}

// Start logs the kinds held, opens c's epochs (OpenEpochs), connects to
// NATS as cfg.NATSRole and builds the issuer (New). stop closes the
// connection.
func (o *Options) Start(cfg Config, log *slog.Logger) (s *Service, nc *nats.Conn, stop func(), err error) {
	log.Info("issuer: kinds held in the keys directory (others are refused)", "kinds", cfg.Kinds)
	if err := cfg.OpenEpochs(); err != nil {
		return nil, nil, nil, err
	}
	if nc, err = o.NATS.Connect("crowdlog-issuer", cfg.NATSRole); err != nil {
		return nil, nil, nil, err
	}
	if s, err = New(nc, cfg.Keys, cfg.Limits, log); err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return s, nc, nc.Close, nil
}

// Runner returns s.Run, with the schedule's RunSchedule beside it when
// c.Schedule has a length.
func (c Config) Runner(s *Service, log *slog.Logger) func(context.Context) error {
	if c.Schedule.Length <= 0 {
		return s.Run
	}
	log.Info("issuer: scheduled epochs: keys created on the clock, destroyed after the grace", "epoch_length", c.Schedule.Length, "key_grace", c.Schedule.Grace)
	return func(ctx context.Context) error {
		go s.RunSchedule(ctx, c.Schedule)
		return s.Run(ctx)
	}
}

// CheckBudgets errors when the budget of a kind the issuer holds (kinds:
// "randomness", "report", "arc", keydir.IssuerKindsOf) is not positive: N
// (--randomness-tokens) for randomness tokens, d (--report-tokens) for
// report tokens (ARC credentials are one per identity and epoch).
func CheckBudgets(kinds []string, l Limits) error {
	var bad []string
	for _, k := range kinds {
		switch {
		case k == "randomness" && l.RandomnessTokens <= 0:
			bad = append(bad, "--randomness-tokens (N, randomness tokens per identity and epoch)")
		case k == "report" && l.ReportTokens <= 0:
			bad = append(bad, "--report-tokens (d, report tokens per identity and epoch)")
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("issuer of %v: set %s to a positive budget", kinds, strings.Join(bad, " and "))
	}
	return nil
}
