package runner

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/release/policy"
)

// tokenPlan is what a replay with tokens needs: one identity
// per AnonID of the log, enrolled at the issuer before any client asks,
// and the largest per-user needs of the log, from which the budgets N
// (randomness tokens) and d (report tokens) per identity and epoch
// default.
type tokenPlan struct {
	keys        map[string]ed25519.PrivateKey // AnonID → identity key
	maxDistinct int                           // most distinct artifacts of one user (OPRF elements)
	maxReports  int                           // most reports of one user
}

// planTokens reads the log at path once more: for every AnonID an
// identity key (generated in memory, when dir is "", or kept in the
// replayed device's state ingest.UserDir(dir, AnonID)/identity.key, so a
// restarted ingest presents the same identity), and the largest number of
// distinct artifacts and of reports of one user after the policy's
// client-side limit (what the replayed devices will ask for).
func planTokens(path string, opts aol.Options, app apps.App, pol *policy.Policy, dir string) (*tokenPlan, error) {
	limit, distinct := pol.Limit()
	p := &tokenPlan{keys: map[string]ed25519.PrivateKey{}}
	_, err := aol.ReadUsersOptions(path, opts, func(u aol.User) error {
		var key ed25519.PrivateKey
		var err error
		if dir == "" {
			_, key, err = ed25519.GenerateKey(rand.Reader)
		} else {
			key, err = keydir.EnsureIdentityKey(filepath.Join(ingest.UserDir(dir, u.AnonID), ingest.IdentityKeyFile))
		}
		if err != nil {
			return fmt.Errorf("identity key of a replayed client: %w", err)
		}
		p.keys[u.AnonID] = key
		arts := ingest.LimitArtifacts(app.Mine(u.Records), limit, distinct)
		seen := map[string]bool{}
		for _, a := range arts {
			seen[a.Primary] = true
		}
		p.maxDistinct = max(p.maxDistinct, len(seen))
		p.maxReports = max(p.maxReports, len(arts))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tokens: read the log for the replayed identities: %w", err)
	}
	return p, nil
}

// budgets returns the per-identity budgets of the epoch: the configured
// ones, or by default what keeps the release exact: under FT_u/FT_a the
// largest per-user needs of the log, under DP_a/DP_u/ZEALOUS d for both
// (the policy's per-user bound, now enforced by the issuer and the
// aggregator rather than by the client alone).
func (p *tokenPlan) budgets(randomnessTokens, reportTokens int, pol *policy.Policy) (n, d int) {
	n, d = p.maxDistinct, p.maxReports
	if limit, _ := pol.Limit(); limit > 0 {
		n, d = limit, limit
	}
	if randomnessTokens > 0 {
		n = randomnessTokens
	}
	if reportTokens > 0 {
		d = reportTokens
	}
	return max(n, 1), max(d, 1)
}

// enroll adds every identity of the plan to the enrollment list in dir
// (keydir.EnrollIdentities), the issuer's default attester.
func (p *tokenPlan) enroll(dir string) error {
	pubs := make([]ed25519.PublicKey, 0, len(p.keys))
	for _, k := range p.keys {
		pubs = append(pubs, k.Public().(ed25519.PublicKey))
	}
	if err := keydir.EnrollIdentities(dir, pubs); err != nil {
		return fmt.Errorf("tokens: enroll the replayed clients' identities: %w", err)
	}
	return nil
}

// replayTokens sets rp's token hooks: each AnonID's issuer client signs
// with its planned identity key, and its ω spends its own randomness
// tokens through an oprfclient.Client like rc (same connection and pins);
// the issuer's keys are pinned in keydir.IssuerPins beside rc's pin file.
func (p *tokenPlan) replayTokens(rp *ingest.Replay, nc *nats.Conn, rc *oprfclient.Client, log *slog.Logger) {
	// the issuer's keys are pinned beside the randomness pins (keys dir)
	var pins string
	if rc.PinFile != "" {
		pins = filepath.Join(filepath.Dir(rc.PinFile), keydir.IssuerPins)
	}
	rp.Tokens = func(id string) (ingest.Issuer, error) {
		key := p.keys[id]
		if key == nil {
			return nil, fmt.Errorf("no identity planned for a client of the log (was the log changed during the run?)")
		}
		return &tokenclient.Client{NC: nc, Identity: key, Logger: log, PinFile: pins}, nil
	}
	rp.Client.RandomnessWith = func(ts oprfclient.TokenSource) ingest.Randomness {
		return &oprfclient.Client{NC: nc, Timeout: rc.Timeout, RetryFor: rc.RetryFor, Batch: rc.Batch,
			Pinned: rc.Pinned, PinFile: rc.PinFile, Tokens: ts}
	}
}

// pinnedKey makes sure rc pins the epoch's OPRF key before the replay
// (fetching it once when nothing is pinned), so the per-user clients of
// replayTokens share the pin instead of each fetching and appending it.
func pinnedKey(ctx context.Context, rc *oprfclient.Client, epoch string) error {
	if rc.Pinned[epoch] != nil {
		return nil
	}
	k, err := rc.PublicKey(ctx, epoch)
	if err != nil {
		return err
	}
	rc.Pinned = map[string][]byte{epoch: k}
	return nil
}

// tokensOffWarning is logged by run and ingest with --tokens off.
const tokensOffWarning = "tokens off: the randomness service and the aggregator accept requests and reports without Privacy Pass tokens, so anyone reaching NATS can probe the randomness service for any number of candidate artifacts, and one client with k−1 self-chosen secrets (Sybil) opens another user's unique artifact (docs/threat-model.md)"

// tokenLimits is what startRoles needs of the tokens: on, and the
// issuer's budgets N and d per identity and epoch.
type tokenLimits struct {
	on   bool
	n, d int
}

// startIssuer runs an issuer role (enrollment-list attester over the keys
// directory) on ctx in svc with the budgets of tok.
func startIssuer(ctx context.Context, svc *errgroup.Group, nc *nats.Conn, keysDir string, tok tokenLimits, reg prometheus.Registerer, log *slog.Logger) (*issuer.Service, error) {
	is, err := issuer.New(nc, keysDir, issuer.Limits{RandomnessTokens: tok.n, ReportTokens: tok.d}, log)
	if err != nil {
		return nil, fmt.Errorf("tokens: start the issuer: %w", err)
	}
	is.Register(reg)
	svc.Go(func() error { return is.Run(ctx) })
	return is, nil
}

// issuerReady waits, within bound, until an issuer answers the public-key
// request of epoch (the in-process one subscribes asynchronously; an
// external one must be running), so no client's first request finds no
// responder.
func issuerReady(ctx context.Context, nc *nats.Conn, epoch string, bound time.Duration) error {
	var last error
	return waitBounded(ctx, "the issuer to answer (is `crowdlog issuer` running?)", bound, func(ctx context.Context) (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, last = (&tokenclient.Client{NC: nc}).Keys(rctx, epoch)
		return last == nil, last
	}, func(context.Context) string {
		if last != nil {
			return "last answer: " + last.Error()
		}
		return "no answer yet"
	})
}

// ExternalIssuerProbe bounds how long run --external and ingest wait for
// an issuer to answer before replaying without tokens.
const ExternalIssuerProbe = 5 * time.Second

// issuerAnswers reports whether an issuer answers the public-key request
// of epoch within bound.
func issuerAnswers(ctx context.Context, nc *nats.Conn, epoch string, bound time.Duration) bool {
	pctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		rctx, rcancel := context.WithTimeout(pctx, 2*time.Second)
		_, err := (&tokenclient.Client{NC: nc}).Keys(rctx, epoch)
		rcancel()
		if err == nil {
			return true
		}
		select {
		case <-pctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}
