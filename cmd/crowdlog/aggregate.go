package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/aggregator/audit"
	"github.com/crowdlog/crowdlog/aggregator/vectors"
	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/pipelines/runner"
)

func aggregateCmd() *cobra.Command {
	o := aggregator.DefaultOptions()
	var metricsAddr string
	c := &cobra.Command{
		Use:   "aggregate --key FILE [--kafka ADDR[,ADDR...]] [--keys DIR] [--pipeline FILE ...]",
		Short: "Run the threshold aggregator on Kafka topic reports",
		Long:  aggregateLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := runner.NewAggregator(o, logger())
			if err != nil {
				return usageErrors(err)
			}
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterAggregator(reg, s) }, s.Run, kafkaCheck(cmd.Context(), o.Kafka))
		},
	}
	o.AddFlags(c.Flags())
	respell(c, map[string]string{"token-keys": "keys"})
	addMetricsFlag(c, &metricsAddr)
	c.AddCommand(epochControlCmd("open-epoch", "open", aggregator.OpenEpoch), epochControlCmd("close-epoch", "close", aggregator.CloseEpoch), auditCmd())
	return c
}

func aggregateVectorsCmd() *cobra.Command {
	o := vectors.DefaultOptions()
	var metricsAddr string
	c := &cobra.Command{
		Use:   "aggregate-vectors --key FILE [--kafka ADDR] [--nats URL]",
		Short: "Run the PDD aggregator: blinded group sums and dropout recovery",
		Long:  aggregateVectorsLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, nc, err := o.Service(nil, runner.VectorsRecoverer, logger())
			if err != nil {
				return err
			}
			defer nc.Close()
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterVectors(reg, s) }, s.Run, vectorsChecks(cmd.Context(), nc, o.Kafka)...)
		},
	}
	o.AddFlags(c.Flags())
	addMetricsFlag(c, &metricsAddr)
	return c
}

// epochControlCmd is `crowdlog aggregate open-epoch` or `close-epoch`
// (verb "open" or "close"), which write records with write.
func epochControlCmd(name, verb string, write func(context.Context, []string, *aggregator.ControlSigner, string, string) error) *cobra.Command {
	o := aggregator.DefaultControlOptions()
	c := &cobra.Command{
		Use:   name + " --app APP --epoch EPOCH --control-key FILE --pipeline FILE [--kafka ADDR[,ADDR...]]",
		Short: epochControlShort[verb],
		Long:  epochControlLong[verb] + controlSignerHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			return usageErrors(o.Write(cmd.Context(), write, runner.PipelineDigest))
		},
	}
	o.AddFlags(c.Flags(), verb)
	return c
}

// usageErrors makes a config.UsageError in err exit with status 2.
func usageErrors(err error) error {
	if errors.As(err, new(config.UsageError)) {
		return usageError(err)
	}
	return err
}

// auditCmd is `crowdlog aggregate audit`: aggregator/audit from the shell.
func auditCmd() *cobra.Command {
	o := audit.DefaultOptions()
	c := &cobra.Command{
		Use:   "audit --key FILE --app APP --epoch EPOCH [--kafka ADDR[,ADDR...]] [--control-pub FILE]",
		Short: "Reconcile topic reports with topic decrypted, report id by report id (counts only)",
		Long:  auditLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			res, err := o.Run(cmd.Context())
			if err != nil {
				return usageErrors(err)
			}
			fmt.Fprint(cmd.OutOrStdout(), res.String())
			if late, missing := res.Lost(); late > 0 || missing > 0 || res.Orphans > 0 {
				return exitCode{3, fmt.Errorf("audit: %d late, %d missing, %d orphan reports (see the table above)", late, missing, res.Orphans)}
			}
			return nil
		},
	}
	o.AddFlags(c.Flags())
	return c
}

const aggregateLong = `aggregate joins Kafka consumer group --group on topic "reports" (more processes =
partitions spread over them). Per (app, epoch, tag) it keeps the distinct
shares and the reports; at k distinct shares it recovers the artifact key,
decrypts every report of the tag (and later ones on arrival) and writes the
items to topic "decrypted". A share that makes the AEAD fail does not block
the tag. State is rebuilt by replaying a partition up to its committed offset,
so kill -9 loses nothing and counts nothing twice.

Only reports of open epochs are kept: run 'crowdlog aggregate open-epoch'
before clients send. Reports of epochs that are not open are dropped
(unknown-epoch), and so are reports beyond --max-pending-reports or
--max-pending-bytes held below threshold per (app, epoch) and partition
(epoch-full). Every process of a group must use the same bounds.

Memory holds ≈ 140 B per pending report (its id, its share's x, its group);
the rest (share y, ciphertext: ≈ 350 B) goes to a spill file in --spill-dir,
one per partition and open epoch, unlinked at creation (nothing stays on disk
after the process ends) and sealed under a key that exists only in memory.

--snapshot-dir DIR: every --snapshot-every messages (or one per 25 pending
reports, if more: a snapshot's cost grows with the state) a partition's state
is written to DIR (sealed under a key derived from the aggregator key), with
its spill in segment files there instead of --spill-dir. A process that
receives a partition (a rebalance, a restart) restores the newest snapshot
and replays only the messages after it: a partition of a million pending
reports moves in under 2 s on 2 cores instead of a replay of the whole epoch.
Share DIR between the processes of a group (a network volume) for moves
between hosts.

--keys DIR (Privacy Pass): a report is kept only with an unspent report
token bound to it, and an FT_u report only with an ARC presentation whose tag
gives its share's x, under DIR/` + keydir.IssuerKeys + `/EPOCH.report.key and EPOCH.arc.key
(created by 'crowdlog issuer --epoch' on the same DIR: with separate
operators the aggregator's operator runs the issuer of report tokens and
ARC credentials, 'keys generate --role aggregator'); others are dropped (no-token,
bad-token, spent-token, bad-presentation). Every process of a group must
use the same setting.

--pipeline FILE (repeatable): the pipeline definitions this aggregator
serves; a report sealed for any other (its pipeline digest differs: another
application option, policy or parameter) is dropped (pipeline-mismatch) and
logged once naming both digests. Without it reports of every definition
are aggregated, each in groups of their own. A pipeline with a schedule
(epoch.length) makes the aggregator open each scheduled epoch of its app
(named START-LENGTH) on its own clock and close it epoch.close_delay after
its end, without any control record from an operator; named epochs still
need open-epoch and close-epoch.

--control-pub FILE: the pipeline operator's Ed25519 public key
(keys/` + keydir.ControlSignKey + `.pub). Epoch open and close records must be
signed by its private half (version 3) for the partition they are in, a
--pipeline served (without --pipeline: any) and "reports", with a Kafka
timestamp within their validity; unsigned, forged, version 2 and replayed
ones are dropped and counted (unsigned-control, bad-control-signature,
unbound-control, replayed-control). Without it
anyone who can write to "reports" opens and closes epochs (logged at start).
--control-key FILE signs the records the schedule writes (then this process
holds the operator's key).`

var epochControlShort = map[string]string{
	"open":  "Open an epoch: the aggregator keeps reports only of open epochs",
	"close": "Close an epoch: summarize undecrypted tags (counts only) and delete pending shares",
}

var epochControlLong = map[string]string{
	"open": `open-epoch writes a control marker into every partition of "reports". Run it
before clients send reports of the epoch: an aggregator drops reports of an
(app, epoch) that is not open (unknown-epoch) or already closed (late). An
aggregator refuses the open, and logs it, when the app already has
--max-open-epochs open epochs (close one first) or the epoch was closed.`,
	"close": `close-epoch writes a control marker into every partition of "reports". When an
aggregator reaches it, after every earlier report, it emits a counts-only
summary of the epoch's undecrypted tags, deletes their shares and drops later
reports of the epoch. The release stage writes the epoch once every partition
has closed it.`,
}

const controlSignerHelp = `

With --control-key the record is signed (version 3, docs/wire.md) for one
pipeline: --pipeline FILE (or --pipeline-digest HEX) names it, and an
aggregator serving other pipelines refuses the record. Run it with the
Kafka "operator" credential (Write on "reports" only), not the admin.`

const auditLong = `audit reads the whole "reports" topic, opens each report's aggregator layer with
--key, and the whole "decrypted" topic, and prints per partition: distinct
reports before the epoch's close marker, duplicate copies (at-least-once
delivery), reports that arrived after the close ("late": dropped by the
aggregator), reports whose tag opened but which were never emitted
("missing"), and emitted reports that are not in Kafka ("orphans"). Late,
missing and orphans are 0 in a healthy run; compare the total with the
clients' "reports sent" to check the relays. It prints counts and offsets
only, never payloads, tags or user ids. It holds every report id of the
topic in memory (~50 bytes each) and peels every report (~60 µs each).
With --control-pub (as given to the aggregator) only a close record the
aggregator applies ends the epoch; refused control records are counted.

Example:
  crowdlog aggregate audit --kafka 127.0.0.1:9092 --key keys/aggregator.key --app query --epoch 2006-03`

const aggregateVectorsLong = `aggregate-vectors joins Kafka consumer group crowdlog-vectors on topic
"vectors" (more processes = more partitions served), sums each group's
blinded vectors, asks the coordinator (NATS, signed with --sign-key) to
unmask each group once every member submitted or the delay passed (double
masking: survivors' self masks, dropped members' pair masks), verifies every
revealed share against its dealer's commitments, and writes each group's
outcome to "group-sums".
State is rebuilt by replaying a partition on assignment (restart-safe).`
