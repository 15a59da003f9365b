package runner

import (
	"github.com/prometheus/client_golang/prometheus"

	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/relays"
	"github.com/crowdlog/crowdlog/release/policy"
)

// IngestConfig is one `crowdlog ingest`: the client side alone, against
// roles that run elsewhere.
type IngestConfig struct {
	Input      string       // search log (ingest/aol: AOL or Excite TSV, plain or gzip, "-" = stdin); one client per AnonID
	TimeFormat string       // Input's QueryTime format (aol.Options.TimeFormat); "" = detected per file
	App        string       // mining application, e.g. "query"
	AppOptions apps.Options // zero fields mean the defaults
	Policy     string       // "ft-u", "ft-a", "dp-a", "dp-u" or "zealous"
	K          int          // threshold k of ft-u/ft-a
	DP         policy.Params
	Epoch      string // epoch name
	NATS       string // NATS URL, or comma-separated URLs of a cluster
	// NATSSecurity is the clients' NATS credential and TLS
	// (natsauth.Client). With a credential the relay stream is left to
	// the relays and the operator, who may create it: a client may not.
	NATSSecurity natsconn.Security
	KeysDir      string        // relay-a.key.pub, relay-b.key.pub, aggregator.key.pub and the randomness pins
	Workers      int           // clients replayed concurrently; 0 = number of CPUs
	Spread       time.Duration // each client's window for sending its reports (ingest.Client.Spread)
	// StateDir, when set, keeps each replayed device's state (its user
	// secret of the epoch, what it sent) on disk under StateDir/users, so
	// an ingest restarted on the same log and epoch sends nothing twice;
	// "" keeps it in memory (a second replay counts every user again).
	StateDir string
	// TokensOff sends without Privacy Pass tokens (--tokens off; only a
	// deployment whose randomness service and aggregator do not require
	// them accepts that). With tokens (the default) every replayed AnonID
	// has its own Ed25519 identity — in StateDir/users/ID/identity.key when
	// StateDir is set, else in memory for this ingest only — and fetches
	// its tokens and ARC credential from the issuer. When no issuer
	// answers for the epoch within ExternalIssuerProbe, ingest sends
	// without tokens (logged).
	TokensOff bool
	// Enroll adds every replayed identity to the enrollment list in
	// KeysDir (keydir.EnrollIdentity), as the operator would with
	// `crowdlog keys enroll`: for an issuer that reads this keys
	// directory. Without it the identities must be enrolled already (the
	// issuer refuses others: tokenclient.ErrNotEnrolled).
	Enroll bool
	// DownstreamWait, when > 0, makes Ingest ask the aggregators after
	// the replay what they admitted and refused of its pipeline and epoch
	// (ingest.FetchDownstream, waiting up to DownstreamWait for their
	// answers) into ReplaySummary.Downstream; 0 does not ask.
	DownstreamWait time.Duration
	Progress       io.Writer
	Logger         *slog.Logger
	// Registerer, when set, receives the ingest's metrics
	// (crowdlog_ingest_*: reports published, publish retries and
	// failures; RegisterPublisher), as `crowdlog ingest --metrics` serves.
	Registerer prometheus.Registerer
}

// Ingest replays cfg.Input as devices, one ingest.Device per AnonID
// (ingest.Replay), sharing one NATS connection, randomness client and
// publisher: it checks that relays a and b hold
// the key ids of the route (CheckRoute), mines, seals, onion-wraps and
// publishes every report to relay a, and waits until JetStream has stored
// each one (publish.Publisher.Flush). It does not close the epoch. The
// summary is returned even on error, with what was sent so far.
func Ingest(ctx context.Context, cfg IngestConfig) (ingest.ReplaySummary, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	var none ingest.ReplaySummary
	a, err := apps.LookupWith(cfg.App, cfg.AppOptions)
	if err != nil {
		return none, err
	}
	// read the input once before anything else: a log without a valid
	// record stops here, naming its bad lines; stdin is spooled (read twice)
	input, spool, opts := cfg.Input, "", aol.Options{TimeFormat: cfg.TimeFormat}
	if cfg.Input == aol.Stdin {
		f, err := os.CreateTemp(cfg.StateDir, "crowdlog-ingest-*.tsv")
		if err != nil {
			return none, fmt.Errorf("ingest: spool stdin: %w", err)
		}
		spool, input, opts = f.Name(), f.Name(), aol.Options{}
		f.Close()
		defer os.Remove(spool)
	}
	if _, err := CheckInput(cfg.Input, aol.Options{TimeFormat: cfg.TimeFormat}, spool); err != nil {
		return none, err
	}
	pol, err := ResolvePolicy(cfg.Policy, cfg.K, cfg.DP) // U from the configuration, never from this client's log
	if err != nil {
		return none, err
	}
	digest, err := pipeline.Digest(a.Name(), cfg.AppOptions, pol)
	if err != nil {
		return none, err
	}
	log.Info("ingest: pipeline", "policy", pol.String(), "pipeline", pipeline.DigestString(digest))
	ra, rb, ag, err := keydir.LoadRoute(cfg.KeysDir)
	if err != nil {
		return none, err
	}
	sec := cfg.NATSSecurity
	sec.Role = natsauth.Client
	nc, err := natsconn.ConnectAs(cfg.NATS, "crowdlog-ingest", sec)
	if err != nil {
		return none, err
	}
	defer nc.Close()
	if err := CheckRoute(ctx, nc, ra, rb, log); err != nil {
		return none, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return none, fmt.Errorf("ingest: JetStream: %w", err)
	}
	if sec.NKeyFile == "" {
		if err := relays.EnsureStream(ctx, js, 0); err != nil {
			return none, err
		}
	}
	pub := &publish.Publisher{JS: js, Subject: protocol.RelaySubject("a")}
	if cfg.Registerer != nil {
		RegisterPublisher(cfg.Registerer, pub)
	}
	rc := &oprfclient.Client{NC: nc, PinFile: filepath.Join(cfg.KeysDir, keydir.RandomnessPins)}
	client := newClient(a, cfg.Epoch, pol, digest, cfg.Spread, rc, ra, rb, ag, pub)
	replay := &ingest.Replay{Client: client, Log: opts, StateDir: cfg.StateDir, Workers: cfg.Workers, Progress: cfg.Progress, Logger: log}
	switch {
	case cfg.TokensOff:
		log.Warn(tokensOffWarning)
	case !issuerAnswers(ctx, nc, cfg.Epoch, ExternalIssuerProbe):
		log.Warn("tokens: no issuer answers for the epoch; sending without tokens (a deployment that requires them refuses these clients: start `crowdlog issuer`)",
			"epoch", cfg.Epoch, "waited", ExternalIssuerProbe)
	default:
		plan, err := planTokens(input, opts, a, pol, cfg.StateDir)
		if err != nil {
			return none, err
		}
		if cfg.Enroll {
			if err := plan.enroll(cfg.KeysDir); err != nil {
				return none, err
			}
		}
		if err := pinnedKey(ctx, rc, cfg.Epoch); err != nil {
			return none, err
		}
		plan.replayTokens(replay, nc, rc, log)
		log.Info("tokens on", "identities", len(plan.keys), "enrolled_here", cfg.Enroll)
	}
	sum, err := replay.Run(ctx, input)
	if ferr := pub.Flush(ctx); err == nil {
		err = ferr
	}
	if err == nil && cfg.DownstreamWait > 0 {
		// reports still in the relays' pools are not counted yet
		if d, derr := ingest.FetchDownstream(ctx, nc, cfg.DownstreamWait, digest, a.Name(), cfg.Epoch); derr == nil {
			sum.Downstream = &d
		} else {
			log.Warn("ingest: no downstream counts (start the aggregator with --nats to get them)", "err", derr)
		}
	}
	log.Info("ingest done", "clients", sum.Users, "reports", sum.Reports, "log", sum.Log.String())
	return sum, err
}

// newClient is the client `run` and `ingest` replay with: app's artifacts
// sealed for epoch under pol (its sealing policy, Shamir k and per-user
// limit) and the pipeline digest, ω from rc, wrapped for the route [a, b, ag] and published to
// relay a through pub, each user's reports spread over spread.
func newClient(app apps.App, epoch string, pol *policy.Policy, digest [32]byte, spread time.Duration, rc ingest.Randomness,
	a, b, ag onion.PublicKey, pub *publish.Publisher) *ingest.Client {
	limit, distinct := pol.Limit()
	return &ingest.Client{App: app, Epoch: epoch, Policy: pol.Sealing(), K: pol.ShamirK, Pipeline: digest, Limit: limit, LimitDistinct: distinct, Window: pol.Window(),
		Pad: pol.Padded(), NoOriginal: pol.Kind.IsDP(), Spread: spread, Randomness: rc, Publish: pub.Publish,
		Route: ingest.Route{RelayA: a, RelayB: b, Aggregator: ag, SubjectB: protocol.RelaySubject("b")}}
}
