package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol"
)

func issuerCmd() *cobra.Command {
	var natsURL, keys, metricsAddr, pipelineFile, role string
	var natsSec natsconn.Security
	var epochs []string
	var limits issuer.Limits
	var sched issuer.Schedule
	c := &cobra.Command{
		Use:   "issuer [--nats URL] [--keys DIR] [--role aggregator|randomness] [--randomness-tokens N] [--report-tokens D]",
		Short: "Issue Privacy Pass tokens and ARC credentials to enrolled client identities",
		Long: `issuer is the Privacy Pass issuer (RFC 9576; tokens RFC 9578 §5 over
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
logs only hashed identities, epochs, kinds and counts.

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
gives the budgets (tokens.randomness, tokens.report).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			if pipelineFile != "" {
				p, err := loadPipeline(pipelineFile)
				if err != nil {
					return err
				}
				d := p.Defaults()
				if d.Tokens.Randomness > 0 && !cmd.Flags().Changed("randomness-tokens") {
					limits.RandomnessTokens = d.Tokens.Randomness
				}
				if d.Tokens.Report > 0 && !cmd.Flags().Changed("report-tokens") {
					limits.ReportTokens = d.Tokens.Report
				}
				if d.Epoch.Length > 0 && !cmd.Flags().Changed("epoch-length") {
					sched.Length, sched.Grace = d.Epoch.Length, d.Epoch.Grace
				}
			}
			if role != "" {
				if err := keydir.MarkIssuerRole(keys, role); err != nil {
					return fmt.Errorf("issuer --role %s: %w", role, err)
				}
			}
			if err := keydir.RequireRole(keys, "the issuer", keydir.RoleAggregator, keydir.RoleRandomness); err != nil {
				return err
			}
			kinds, err := keydir.IssuerKindsOf(keys)
			if err != nil {
				return err
			}
			if err := checkBudgets(kinds, limits); err != nil {
				return err
			}
			log.Info("issuer: kinds held in the keys directory (others are refused)", "kinds", kinds)
			for _, e := range epochs {
				if err := keydir.EnsureIssuerKeys(keys, e); err != nil {
					return err
				}
			}
			// the randomness operator's issuer connects with that operator's
			// credential (its subjects and counters bucket are in its row)
			natsRole := natsauth.Issuer
			if role, _ := keydir.DirRole(keys); role == keydir.RoleRandomness {
				natsRole = natsauth.Randomness
			}
			nc, err := natsconn.ConnectAs(natsURL, "crowdlog-issuer", as(natsSec, natsRole))
			if err != nil {
				return err
			}
			defer nc.Close()
			s, err := issuer.New(nc, keys, limits, log)
			if err != nil {
				return err
			}
			run := s.Run
			if sched.Length > 0 {
				log.Info("issuer: scheduled epochs: keys created on the clock, destroyed after the grace", "epoch_length", sched.Length, "key_grace", sched.Grace)
				run = func(ctx context.Context) error {
					go s.RunSchedule(ctx, sched)
					return s.Run(ctx)
				}
			}
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { s.Register(reg) }, run, issuerChecks(nc, keys)...)
		},
	}
	f := c.Flags()
	f.StringVar(&natsURL, "nats", defaultNATS, "NATS URL (JetStream enabled); a comma-separated list for a cluster")
	addNATSSecurityFlags(f, &natsSec)
	f.StringVar(&keys, "keys", "keys", "keys directory: the enrollment list "+keydir.EnrollmentFile+" and the epoch keys in "+keydir.IssuerKeys+"/")
	f.StringVar(&role, "role", "", "the operator this issuer runs at, aggregator (report tokens, ARC credentials) or randomness (randomness tokens): marks --keys DIR with that role's custody marker, so only its kinds are issued; empty: DIR's own marker (keys generate --role), or every kind without one (single host)")
	f.IntVar(&limits.RandomnessTokens, "randomness-tokens", 0, "N: randomness tokens (OPRF elements) per identity and epoch")
	f.IntVar(&limits.ReportTokens, "report-tokens", 0, "d: report tokens (reports) per identity and epoch")
	f.StringSliceVar(&epochs, "epoch", nil, "open these epochs: create their keys before serving (requests for epochs not opened are refused); repeatable, idempotent")
	f.DurationVar(&sched.Length, "epoch-length", 0, "scheduled epochs of this length (e.g. 168h): keys of the current and next epoch created on the clock; 0 = only --epoch")
	f.DurationVar(&sched.Grace, "key-grace", time.Hour, "with --epoch-length: how long an epoch's keys survive its end before they are destroyed")
	f.StringVarP(&pipelineFile, "pipeline", "f", "", "pipeline file: its epoch schedule (epoch.length, epoch.grace) and token budgets (tokens.randomness, tokens.report) unless given as flags")
	addMetricsFlag(c, &metricsAddr)
	return c
}

// checkBudgets errors when the budget of a kind the issuer holds (kinds:
// "randomness", "report", "arc", keydir.IssuerKindsOf) is not positive: N
// (--randomness-tokens) for randomness tokens, d (--report-tokens) for
// report tokens (ARC credentials are one per identity and epoch).
func checkBudgets(kinds []string, l issuer.Limits) error {
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

func keysEnrollCmd() *cobra.Command {
	var dir, out string
	var generate bool
	c := &cobra.Command{
		Use:   "enroll --keys DIR (PUBKEY-FILE... | --generate [--out FILE])",
		Short: "Enroll a client identity key at the issuer (its enrollment list)",
		Long: `enroll adds a client's Ed25519 identity public key to DIR/` + keydir.EnrollmentFile + `, the
issuer's default attester (a running issuer picks it up without restart).
Each PUBKEY-FILE is a PEM public key (the identity key's .pub) or a PEM
private key whose public half is taken; several are enrolled in one write
(a batch of devices), and none when one does not parse. With --generate, a new identity key is
written to --out (mode 0600, public half in --out.pub) and enrolled; give
it to the client (ingest --state DIR keeps its own identity key, whose .pub
is what to enroll).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if generate == (len(args) > 0) {
				return errors.New("give PUBKEY-FILE (one or more) or --generate, not both")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := keydir.RequireRole(dir, "keys enroll", keydir.RoleAttester); err != nil {
				return err
			}
			var pubs []ed25519.PublicKey
			if generate {
				if out == "" {
					return errors.New("--generate needs --out FILE for the new identity key")
				}
				k, err := keydir.EnsureIdentityKey(out)
				if err != nil {
					return err
				}
				pubs = append(pubs, k.Public().(ed25519.PublicKey))
			}
			for _, a := range args {
				pub, err := keydir.LoadSigningPublic(a)
				if err != nil {
					return fmt.Errorf("%s: %w (nothing enrolled)", a, err)
				}
				pubs = append(pubs, pub)
			}
			if err := keydir.EnrollIdentities(dir, pubs); err != nil {
				return err
			}
			for _, pub := range pubs {
				fmt.Printf("enrolled %s in %s\n", hex.EncodeToString(pub), filepath.Join(dir, keydir.EnrollmentFile))
			}
			return nil
		},
	}
	c.Flags().StringVar(&dir, "keys", "keys", "keys directory of the issuer (--dir: the former spelling)")
	respell(c, map[string]string{"dir": "keys"})
	c.Flags().BoolVar(&generate, "generate", false, "generate a new identity key (written to --out) and enroll it")
	c.Flags().StringVar(&out, "out", "", "with --generate: the new identity key file")
	return c
}
