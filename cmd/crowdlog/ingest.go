package main

import (
	"fmt"
	"os"

	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func ingestCmd() *cobra.Command {
	cfg := runner.IngestConfig{}
	var noProgress bool
	var pipelineFile, metricsAddr string
	c := &cobra.Command{
		Use:   "ingest --input LOG --keys DIR [--nats URL]",
		Short: "Replay a log as clients: mine, seal, onion-wrap and publish reports to relay a",
		Long: `ingest is the client side. Every AnonID of the log becomes a device (the
embeddable client, ingest.Device) with its own user secret of the epoch, kept
in memory, or on disk under --state DIR/users so that ingest restarted on the
same log and epoch sends nothing twice. A device mines artifacts (--app),
obtains OPRF randomness per artifact from the randomness service (RFC 9497 VOPRF, batched, the service never sees the
artifact; every batch's proof is checked against the epoch's public key, which
is pinned on first use in --keys/randomness.pins and must not change), seals one report per artifact instance, wraps it in three HPKE
layers [relay a, relay b, aggregator] using the public keys in --keys
(relay-a.key.pub, relay-b.key.pub, aggregator.key.pub) and publishes to relay
a. When relays fall behind, publishing waits: nothing is dropped. Before
sending, ingest asks relays a and b which key ids they hold and stops with an
error when one does not hold the id of its key file (its reports would be
dropped); a relay that does not answer is a warning.

Tokens (on by default): every AnonID has its own Ed25519 identity
(under --state DIR/users when given, else in memory) and fetches from the
issuer one randomness token per OPRF element, one report token per report and,
under ft-u, one ARC credential per epoch. The identities must be enrolled at
the issuer; --enroll adds them to the enrollment list in --keys (for an issuer
reading that directory). When no issuer answers for the epoch within 5 s,
or with --tokens off, ingest sends without tokens, which only a deployment that
does not require them accepts.

The epoch must be open before clients send: 'crowdlog randomness open-epoch'
(else randomness requests are refused) and 'crowdlog aggregate open-epoch'
(else the aggregator drops the reports as unknown-epoch). ingest does not
close the epoch: run 'crowdlog aggregate close-epoch' when all clients of the
epoch have sent.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := pipelineFlag(cmd.Flags(), pipelineFile)
			if err != nil {
				return err
			}
			if p != nil {
				epoch := cfg.Epoch
				runner.ApplyPipelineIngest(&cfg, p)
				if cmd.Flags().Changed("epoch") {
					cfg.Epoch = epoch // one pipeline, many epochs
				}
			}
			cfg.Logger = logger()
			reg, err := serveMetrics(cmd.Context(), metricsAddr, nil)
			if err != nil {
				return err
			}
			cfg.Registerer = reg
			if !noProgress && term.IsTerminal(int(os.Stderr.Fd())) {
				cfg.Progress = os.Stderr
			}
			_, err = runner.Ingest(cmd.Context(), cfg)
			return err
		},
	}
	f := c.Flags()
	f.StringVarP(&pipelineFile, "pipeline", "f", "", "pipeline file (crowdlog pipeline --help): app, policy, parameters, epoch and tokens from it instead of their flags (give the release role the same file)")
	f.StringVar(&cfg.Input, "input", "", "search log: AOL or Excite TSV, plain or .gz, or - for stdin (spooled to --state or the temp dir); a log without a valid record stops ingest at once (required)")
	timeFormatFlag(f, &cfg.TimeFormat)
	f.StringVar(&cfg.App, "app", "query", "mining application: "+fmt.Sprint(apps.Apps()))
	appFlags(f, &cfg.AppOptions)
	f.StringVar(&cfg.Policy, "policy", "ft-u", "policy: ft-u, ft-a, dp-a, dp-u, zealous, dp-su or dp-gsu (the release role must use the same)")
	f.IntVar(&cfg.K, "k", 5, "threshold k of ft-u/ft-a")
	policyFlags(f, &cfg.DP)
	f.StringVar(&cfg.Epoch, "epoch", "all", "epoch name")
	f.StringVar(&cfg.NATS, "nats", defaultNATS, "NATS URL; a comma-separated list for a cluster")
	addNATSSecurityFlags(f, &cfg.NATSSecurity)
	f.StringVar(&cfg.KeysDir, "keys", "keys", "directory with relay-a.key.pub, relay-b.key.pub, aggregator.key.pub")
	f.IntVar(&cfg.Workers, "workers", 0, "clients replayed concurrently (default: number of CPUs)")
	f.DurationVar(&cfg.Spread, "spread", 0, "each client sends its reports at random times within this window, not as one burst an observer links (e.g. 1h for real clients; 0 = back to back, for replays)")
	f.StringVar(&cfg.StateDir, "state", "", "keep each replayed device's state (user secret per epoch, what it sent) under this directory, so a restarted ingest adds no second share; default: in memory")
	tokensFlag(f, &cfg.TokensOff)
	f.BoolVar(&cfg.Enroll, "enroll", false, "enroll every replayed identity in the enrollment list of --keys (as 'crowdlog keys enroll' would), for an issuer reading that directory")
	addMetricsFlag(c, &metricsAddr)
	f.BoolVar(&noProgress, "no-progress", false, "no progress bar on stderr (shown only when stderr is a terminal)")
	c.MarkFlagRequired("input")
	return c
}
