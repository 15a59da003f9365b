package main

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/aggregator/audit"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/randomness"
	"github.com/crowdlog/crowdlog/relays"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
	"github.com/crowdlog/crowdlog/release/stage"
)

const (
	defaultNATS  = "nats://127.0.0.1:4222"
	defaultKafka = "127.0.0.1:9092"
	defaultCH    = "127.0.0.1:9000"
)

func randomnessCmd() *cobra.Command {
	var natsURL, keys, metricsAddr, pipelineFile string
	var natsSec natsconn.Security
	var o randomness.Options
	var requireTokens bool
	c := &cobra.Command{
		Use:   "randomness [--nats URL] [--keys DIR] [--epoch-length 24h] [--key-grace 1h]",
		Short: "Serve OPRF randomness (RFC 9497, ristretto255) over NATS request/reply",
		Long: `randomness evaluates clients' blinded OPRF elements under the key of the
requested epoch, on subject ` + protocol.RandomnessSubject + ` (queue group: several
processes sharing the key directory share the load), with a DLEQ proof per
batch (RFC 9497 verifiable mode). Epoch public keys are published on
` + protocol.RandomnessPublicKeySubject + `.

Epoch keys: one random key per epoch in DIR/` + keydir.RandomnessKeys + `/EPOCH.key (mode 0600),
created when an operator opens a named epoch ('crowdlog randomness
open-epoch') or, with --epoch-length, on a scheduled epoch's first request;
a request for a named epoch nobody opened is refused ("epoch not opened")
and creates nothing. Processes sharing the directory agree on a key (the
first writer wins). Once an epoch is closed and --key-grace has
passed, its key file is overwritten and removed and the epoch is refused for
good (a tombstone stays; a restart never makes a new key).

Epoch names: with --epoch-length 0 (default) any name (1-64 letters, digits,
'.', '_', '-'), as log replays with historic epochs use, served once opened
with open-epoch; epochs end only when closed. With --epoch-length L (e.g. 24h) epochs follow an absolute UTC
schedule that survives restarts: the epoch containing time t is named by its
start floor(unix(t)/L)*L as ` + randomness.ScheduleLayout + ` plus "-" and L, e.g.
"20060301T000000Z-24h". Epochs starting more than --epoch-skew ahead are
refused (not started); epochs whose end + --key-grace has passed are refused
(expired) and their keys destroyed.

The seed file DIR/randomness.seed of older versions is no longer used (a
warning says so); epochs listed in DIR/randomness.seed.closed stay closed.

--require-tokens (Privacy Pass, RFC 9578): every OPRF element must come with
one unspent randomness token of its epoch, verified under
DIR/` + keydir.IssuerKeys + `/EPOCH.randomness.key (created by 'crowdlog issuer --epoch' run
by this operator on DIR: with separate operators the randomness operator
issues its own randomness tokens, 'keys generate --role randomness');
spends are kept in JetStream KV (` + protocol.SpentTokensBucket + `), shared by every
process. Without it any NATS client may evaluate unlimited candidates (the
online probe of docs/threat-model.md).

--pipeline FILE: the epoch schedule (epoch.length, epoch.grace) from the
pipeline file, unless --epoch-length or --key-grace are given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			if pipelineFile != "" {
				p, err := loadPipeline(pipelineFile)
				if err != nil {
					return err
				}
				if d := p.Defaults(); d.Epoch.Length > 0 {
					if !cmd.Flags().Changed("epoch-length") {
						o.EpochLength = d.Epoch.Length
					}
					if !cmd.Flags().Changed("key-grace") {
						o.Grace = d.Epoch.Grace
					}
				}
			}
			if o.Grace == 0 {
				o.Grace = -1 // an explicit 0: destroy at the first sweep after close
			}
			if o.Skew == 0 {
				o.Skew = -1
			}
			if err := keydir.RequireRole(keys, "the randomness service", keydir.RoleRandomness); err != nil {
				return err
			}
			nc, err := natsconn.ConnectAs(natsURL, "crowdlog-randomness", as(natsSec, natsauth.Randomness))
			if err != nil {
				return err
			}
			defer nc.Close()
			s, err := randomness.New(cmd.Context(), nc, keys, o, log)
			if err != nil {
				return err
			}
			if requireTokens {
				if err := runner.RequireTokens(s, keys); err != nil {
					return err
				}
			} else {
				log.Warn("randomness: tokens not required (--require-tokens off): any client may probe unlimited candidates")
			}
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterRandomness(reg, s) }, s.Run, randomnessChecks(nc, keys, requireTokens)...)
		},
	}
	c.Flags().StringVar(&natsURL, "nats", defaultNATS, "NATS URL; a comma-separated list for a cluster")
	addNATSSecurityFlags(c.Flags(), &natsSec)
	c.Flags().StringVar(&keys, "keys", "keys", "keys directory; epoch keys live in its "+keydir.RandomnessKeys+" subdirectory")
	c.Flags().BoolVar(&requireTokens, "require-tokens", false, "require one Privacy Pass randomness token per element (keys from the issuer's key files in --keys)")
	c.Flags().DurationVar(&o.EpochLength, "epoch-length", 0, "epoch schedule length (e.g. 24h): absolute UTC epochs named START-LENGTH; 0 = named epochs, no schedule")
	c.Flags().DurationVar(&o.Grace, "key-grace", randomness.DefaultGrace, "how long an epoch's key survives its close (and, with --epoch-length, its end) before it is destroyed")
	c.Flags().DurationVar(&o.Skew, "epoch-skew", randomness.DefaultSkew, "with --epoch-length: how far ahead of this clock an epoch may start and still be served")
	c.Flags().StringVarP(&pipelineFile, "pipeline", "f", "", "pipeline file: its epoch schedule (epoch.length, epoch.grace) unless --epoch-length/--key-grace are given")
	addMetricsFlag(c, &metricsAddr)
	c.AddCommand(randomnessOpenCmd(), randomnessCloseCmd())
	return c
}

func randomnessCloseCmd() *cobra.Command {
	var keys, epoch string
	c := &cobra.Command{
		Use:   "close-epoch --keys DIR --epoch NAME",
		Short: "Close an epoch at the randomness service: refused from now on, its key destroyed after --key-grace",
		Long: `close-epoch appends the epoch to DIR/` + keydir.RandomnessKeys + `/closed. Running randomness
processes sharing the directory refuse it at their next request ("epoch
closed") and destroy its key once their --key-grace has passed; the epoch is
never given a new key. Run it after 'crowdlog aggregate close-epoch'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			if err := keydir.RequireRole(keys, "randomness close-epoch", keydir.RoleRandomness); err != nil {
				return err
			}
			k, err := randomness.Open(filepath.Join(keys, keydir.RandomnessKeys), randomness.Options{})
			if err != nil {
				return err
			}
			if err := k.Close(epoch); err != nil {
				return err
			}
			fmt.Printf("epoch %s closed in %s\n", epoch, k.Dir())
			return nil
		},
	}
	c.Flags().StringVar(&keys, "keys", "keys", "keys directory of the randomness service")
	c.Flags().StringVar(&epoch, "epoch", "", "epoch to close")
	c.MarkFlagRequired("epoch")
	return c
}

func relayCmd() *cobra.Command {
	var o relays.Options
	var natsURL, metricsAddr string
	var natsSec natsconn.Security
	var gcPercent int
	c := &cobra.Command{
		Use:   "relay --name a|b --key FILE [--nats URL[,URL...]] [--kafka ADDR[,ADDR...]]",
		Short: "Run a relay: peel one onion layer, batch, shuffle, forward",
		Long: `relay consumes its subject crowdlog.relay.NAME (a JetStream work queue: more
processes with the same --name and key = more capacity), peels its HPKE
layer and holds the peeled messages in a pool: once --pool messages are
held, or --pool-timeout after the oldest arrived, it shuffles them with
crypto randomness and forwards each to the next hop of the route (relay a:
only relay b; relay b: only Kafka topic "reports", keyed by a 1-byte tag
bucket). Messages are acknowledged only after forwarding (at-least-once): a
relay killed mid-pool loses nothing. Malformed, oversized, wrong-key,
wrong-hop and replayed messages are counted and dropped. A larger pool or
timeout means larger anonymity sets and more latency (docs/threat-model.md,
"Mixing").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			if o.Name == "" {
				return errors.New("--name is required (a or b)")
			}
			setGCPercent(gcPercent)
			if len(o.KeyPaths) == 0 {
				return errors.New("--key is required (see `crowdlog keys generate`)")
			}
			nc, err := natsconn.ConnectAs(natsURL, "crowdlog-relay-"+o.Name, as(natsSec, natsauth.RelayRole(o.Name)))
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			r, closeW, err := relays.New(cmd.Context(), js, o, log)
			if err != nil {
				return err
			}
			defer closeW()
			reg, err := serveMetrics(cmd.Context(), metricsAddr, nil, relayChecks(cmd.Context(), nc, o)...)
			if err != nil {
				return err
			}
			r.Registerer = reg
			return r.Run(cmd.Context())
		},
	}
	f := c.Flags()
	f.StringVar(&o.Name, "name", "", "relay name: its subject is crowdlog.relay.NAME")
	f.StringSliceVar(&o.KeyPaths, "key", nil, "HPKE key file (repeat for two keys during a rotation)")
	f.StringVar(&natsURL, "nats", defaultNATS, "NATS URL; a comma-separated list for a cluster")
	addNATSSecurityFlags(f, &natsSec)
	f.StringSliceVar(&o.Kafka, "kafka", []string{defaultKafka}, "Kafka bootstrap brokers, comma-separated host:port list (used by the last relay)")
	f.IntVar(&o.BatchSize, "batch", relays.DefaultBatchSize, "most messages per fetch from the inbox")
	f.DurationVar(&o.BatchTimeout, "batch-timeout", 50*time.Millisecond, "longest wait of one fetch (poll interval; --pool-timeout decides when to forward)")
	f.IntVar(&o.PoolSize, "pool", relays.DefaultPoolSize, "forward once this many peeled messages are held (P: the least anonymity set when at least P per --pool-timeout arrive)")
	f.DurationVar(&o.PoolTimeout, "pool-timeout", relays.DefaultPoolTimeout, "forward what is held this long after the oldest held message arrived, even below --pool (T: bounds each message's wait); --ack-wait must be at least twice this")
	f.StringVar(&o.Next, "next", "", `next hop on the route: empty = relay b for relay a, Kafka for any other; "." = last hop (Kafka only)`)
	f.DurationVar(&o.AckWait, "ack-wait", 30*time.Second, "redeliver a message this long after a relay took it without acknowledging (crash)")
	f.IntVar(&gcPercent, "gogc", relays.DefaultGCPercent, "Go GC target percent (as GOGC; the GOGC environment variable, when set, wins): higher trades memory for less collector CPU")
	addMetricsFlag(c, &metricsAddr)
	return c
}

func aggregateCmd() *cobra.Command {
	var kafkaAddrs []string
	var group, metricsAddr string
	var keyPaths []string
	var session time.Duration
	var maxOpen int
	var maxPending, maxPendingBytes int64
	var tokenKeys, spillDir, snapshotDir, controlPub, controlKey string
	var snapshotEvery int
	var pipelineFiles []string
	c := &cobra.Command{
		Use:   "aggregate --key FILE [--kafka ADDR[,ADDR...]] [--keys DIR] [--pipeline FILE ...]",
		Short: "Run the threshold aggregator on Kafka topic reports",
		Long: `aggregate joins Kafka consumer group --group on topic "reports" (more processes =
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
holds the operator's key).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			if len(keyPaths) == 0 {
				return errors.New("--key is required (see `crowdlog keys generate`)")
			}
			s, err := aggregator.New(kafkaAddrs, keyPaths, log)
			if err != nil {
				return err
			}
			s.GroupID = group
			s.SessionTimeout = session
			if controlPub != "" {
				if s.ControlKey, err = keydir.LoadSigningPublic(controlPub); err != nil {
					return usageError(fmt.Errorf("--control-pub: %w", err))
				}
			}
			s.MaxOpenEpochs, s.MaxPendingReports, s.MaxPendingBytes = maxOpen, maxPending, maxPendingBytes
			s.SpillDir = spillDir
			s.SnapshotDir, s.SnapshotEvery = snapshotDir, snapshotEvery
			if len(pipelineFiles) > 0 {
				s.Pipelines = map[[32]byte]bool{}
				for _, f := range pipelineFiles {
					p, err := loadPipeline(f)
					if err != nil {
						return err
					}
					d, err := p.Digest()
					if err != nil {
						return usageError(fmt.Errorf("pipeline %s: %w (the aggregator needs the definition the clients seal for: give policy.users for DP policies)", f, err))
					}
					s.Pipelines[d] = true
					log.Info("aggregate: serving pipeline", "file", f, "name", p.Name, "pipeline", pipeline.DigestString(d))
					if dp := p.Defaults(); dp.Epoch.Length > 0 {
						if s.Schedule == nil {
							s.Schedule = &aggregator.Schedule{Length: dp.Epoch.Length, CloseDelay: dp.Epoch.CloseDelay}
						} else if s.Schedule.Length != dp.Epoch.Length || s.Schedule.CloseDelay != dp.Epoch.CloseDelay {
							return usageError(fmt.Errorf("pipeline %s: epoch length %s and close delay %s differ from another --pipeline's %s and %s: run one aggregator group per schedule",
								f, dp.Epoch.Length, dp.Epoch.CloseDelay, s.Schedule.Length, s.Schedule.CloseDelay))
						}
						s.Schedule.Apps = append(s.Schedule.Apps, dp.App.Name)
						if s.Schedule.Pipelines == nil {
							s.Schedule.Pipelines = map[string][32]byte{}
						}
						if _, dup := s.Schedule.Pipelines[dp.App.Name]; !dup {
							s.Schedule.Pipelines[dp.App.Name] = d // the first scheduled pipeline of the app signs its records
						}
					}
				}
				if s.Schedule != nil && controlKey != "" {
					if s.Schedule.Key, err = keydir.LoadSigningKey(controlKey); err != nil {
						return usageError(fmt.Errorf("--control-key: %w", err))
					}
				}
				if s.Schedule != nil {
					log.Info("aggregate: scheduled epochs opened and closed on this clock", "apps", s.Schedule.Apps,
						"epoch_length", s.Schedule.Length, "close_delay", s.Schedule.CloseDelay)
				}
			}
			if s.Schedule == nil && controlKey != "" {
				log.Warn("aggregate: --control-key unused: no --pipeline with an epoch schedule (this process writes no control records)")
			}
			if tokenKeys != "" {
				if err := keydir.RequireRole(tokenKeys, "the aggregator", keydir.RoleAggregator); err != nil {
					return err
				}
				runner.AggregatorTokens(s, tokenKeys)
			} else {
				log.Warn("aggregate: report tokens and ARC presentations not checked (--keys not set): one client may send unlimited reports and be k users under FT_u")
			}
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterAggregator(reg, s) }, s.Run, kafkaCheck(cmd.Context(), kafkaAddrs))
		},
	}
	c.Flags().StringSliceVar(&kafkaAddrs, "kafka", []string{defaultKafka}, "Kafka bootstrap brokers, comma-separated host:port list")
	c.Flags().StringSliceVar(&keyPaths, "key", nil, "aggregator HPKE key file (repeat during a rotation)")
	c.Flags().StringVar(&group, "group", "crowdlog-aggregator", "Kafka consumer group")
	c.Flags().StringVar(&tokenKeys, "keys", "", "keys directory holding the issuer's report-token and ARC keys; set: reports need tokens (and FT_u ARC presentations) (--token-keys: the former spelling)")
	respell(c, map[string]string{"token-keys": "keys"})
	c.Flags().StringArrayVarP(&pipelineFiles, "pipeline", "f", nil, "pipeline file served (repeat for several); reports sealed for another definition are dropped (pipeline-mismatch); none: every definition")
	c.Flags().DurationVar(&session, "session-timeout", 20*time.Second, "a member silent this long leaves the group and its partitions move (also the wait after a crash)")
	c.Flags().IntVar(&maxOpen, "max-open-epochs", aggregator.DefaultMaxOpenEpochs, "open epochs per app; an open beyond it is refused (logged)")
	c.Flags().Int64Var(&maxPending, "max-pending-reports", aggregator.DefaultMaxPendingReports, "reports held below threshold per (app, epoch) and partition; beyond it reports are dropped (epoch-full)")
	c.Flags().Int64Var(&maxPendingBytes, "max-pending-bytes", aggregator.DefaultMaxPendingBytes, "bytes of those reports per (app, epoch) and partition; beyond it reports are dropped (epoch-full)")
	c.Flags().StringVar(&spillDir, "spill-dir", "", "directory for the spill files of pending reports (≈ 350 B each on disk); default: the system's temporary directory")
	c.Flags().StringVar(&snapshotDir, "snapshot-dir", "", "directory for partition snapshots and their spill segments (shared by the group's processes); set: a moved partition is restored, not replayed from the epoch's start")
	c.Flags().IntVar(&snapshotEvery, "snapshot-every", 20_000, "messages applied between two snapshots of a partition (with --snapshot-dir; more when it holds over 25× as many pending reports); a move replays at most this many")
	c.Flags().StringVar(&controlPub, "control-pub", "", "the pipeline operator's Ed25519 public key (PEM, keys/"+keydir.ControlSignKey+".pub): epoch open/close records must be signed by it; empty: not checked (logged)")
	c.Flags().StringVar(&controlKey, "control-key", "", "the pipeline operator's Ed25519 key (PEM, keys/"+keydir.ControlSignKey+") that signs the records of a --pipeline schedule; empty: unsigned")
	addMetricsFlag(c, &metricsAddr)

	var app, epoch string
	var opKey, opPipeline, opDigest string
	closeCmd := &cobra.Command{
		Use:   "close-epoch --app APP --epoch EPOCH --control-key FILE --pipeline FILE [--kafka ADDR[,ADDR...]]",
		Short: "Close an epoch: summarize undecrypted tags (counts only) and delete pending shares",
		Long: `close-epoch writes a control marker into every partition of "reports". When an
aggregator reaches it, after every earlier report, it emits a counts-only
summary of the epoch's undecrypted tags, deletes their shares and drops later
reports of the epoch. The release stage writes the epoch once every partition
has closed it.` + controlSignerHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			if app == "" || epoch == "" {
				return errors.New("--app and --epoch are required")
			}
			signer, err := loadControlSigner(opKey, opPipeline, opDigest)
			if err != nil {
				return err
			}
			return aggregator.CloseEpoch(cmd.Context(), kafkaAddrs, signer, app, epoch)
		},
	}
	closeCmd.Flags().StringSliceVar(&kafkaAddrs, "kafka", []string{defaultKafka}, "Kafka bootstrap brokers, comma-separated host:port list")
	closeCmd.Flags().StringVar(&app, "app", "query", "application")
	closeCmd.Flags().StringVar(&epoch, "epoch", "", "epoch to close")
	closeCmd.Flags().StringVar(&opKey, "control-key", "", controlKeyHelp)
	closeCmd.Flags().StringVarP(&opPipeline, "pipeline", "f", "", controlPipelineHelp)
	closeCmd.Flags().StringVar(&opDigest, "pipeline-digest", "", controlDigestHelp)
	openCmd := &cobra.Command{
		Use:   "open-epoch --app APP --epoch EPOCH --control-key FILE --pipeline FILE [--kafka ADDR[,ADDR...]]",
		Short: "Open an epoch: the aggregator keeps reports only of open epochs",
		Long: `open-epoch writes a control marker into every partition of "reports". Run it
before clients send reports of the epoch: an aggregator drops reports of an
(app, epoch) that is not open (unknown-epoch) or already closed (late). An
aggregator refuses the open, and logs it, when the app already has
--max-open-epochs open epochs (close one first) or the epoch was closed.` + controlSignerHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			if app == "" || epoch == "" {
				return errors.New("--app and --epoch are required")
			}
			signer, err := loadControlSigner(opKey, opPipeline, opDigest)
			if err != nil {
				return err
			}
			return aggregator.OpenEpoch(cmd.Context(), kafkaAddrs, signer, app, epoch)
		},
	}
	openCmd.Flags().StringSliceVar(&kafkaAddrs, "kafka", []string{defaultKafka}, "Kafka bootstrap brokers, comma-separated host:port list")
	openCmd.Flags().StringVar(&app, "app", "query", "application")
	openCmd.Flags().StringVar(&epoch, "epoch", "", "epoch to open")
	openCmd.Flags().StringVar(&opKey, "control-key", "", controlKeyHelp)
	openCmd.Flags().StringVarP(&opPipeline, "pipeline", "f", "", controlPipelineHelp)
	openCmd.Flags().StringVar(&opDigest, "pipeline-digest", "", controlDigestHelp)
	c.AddCommand(openCmd, closeCmd, auditCmd())
	return c
}

const controlKeyHelp = "the pipeline operator's Ed25519 key (PEM, keys/" + keydir.ControlSignKey + ") that signs the record; empty: unsigned, refused by aggregators with --control-pub"

const (
	controlPipelineHelp = "the pipeline file whose epoch this is: its digest is bound into the signed record (with --control-key; or --pipeline-digest)"
	controlDigestHelp   = "the pipeline digest (64 hex digits, `crowdlog pipeline show`) bound into the signed record, instead of --pipeline"
	controlSignerHelp   = `

With --control-key the record is signed (version 3, docs/wire.md) for one
pipeline: --pipeline FILE (or --pipeline-digest HEX) names it, and an
aggregator serving other pipelines refuses the record. Run it with the
Kafka "operator" credential (Write on "reports" only), not the admin.`
)

// loadControlSigner reads the control signing key of --control-key
// (keydir.LoadSigningKey) and the pipeline digest it signs for, from
// --pipeline (a pipeline file) or --pipeline-digest (hex); key "" gives
// nil (unsigned records, logged). Errors (usage errors): a key without a
// pipeline or with both, an unreadable key or file, a digest that is not
// 64 hex digits, a pipeline whose digest cannot be computed.
func loadControlSigner(path, pipelineFile, digest string) (*aggregator.ControlSigner, error) {
	if path == "" {
		if pipelineFile != "" || digest != "" {
			return nil, usageError(errors.New("--pipeline and --pipeline-digest name what --control-key signs for: give --control-key too"))
		}
		slog.Warn("control record written unsigned (no --control-key): aggregators started with --control-pub refuse it")
		return nil, nil
	}
	key, err := keydir.LoadSigningKey(path)
	if err != nil {
		return nil, usageError(fmt.Errorf("--control-key: %w", err))
	}
	s := &aggregator.ControlSigner{Key: key}
	switch {
	case (pipelineFile == "") == (digest == ""):
		return nil, usageError(errors.New("--control-key needs exactly one of --pipeline FILE and --pipeline-digest HEX: the signed record names the pipeline whose epoch it opens or closes"))
	case pipelineFile != "":
		p, err := loadPipeline(pipelineFile)
		if err != nil {
			return nil, err
		}
		if s.Pipeline, err = p.Digest(); err != nil {
			return nil, usageError(fmt.Errorf("pipeline %s: %w (give policy.users for DP policies, or --pipeline-digest)", pipelineFile, err))
		}
	default:
		b, err := hex.DecodeString(digest)
		if err != nil || len(b) != len(s.Pipeline) {
			return nil, usageError(fmt.Errorf("--pipeline-digest %q: want 64 hex digits (`crowdlog pipeline show FILE`)", digest))
		}
		copy(s.Pipeline[:], b)
	}
	return s, nil
}

// auditCmd is `crowdlog aggregate audit`: aggregator/audit from the shell.
func auditCmd() *cobra.Command {
	var kafkaAddrs, keyPaths []string
	var app, epoch, controlPub string
	c := &cobra.Command{
		Use:   "audit --key FILE --app APP --epoch EPOCH [--kafka ADDR[,ADDR...]] [--control-pub FILE]",
		Short: "Reconcile topic reports with topic decrypted, report id by report id (counts only)",
		Long: `audit reads the whole "reports" topic, opens each report's aggregator layer with
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
  crowdlog aggregate audit --kafka 127.0.0.1:9092 --key keys/aggregator.key --app query --epoch 2006-03`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			if len(keyPaths) == 0 || epoch == "" {
				return errors.New("--key and --epoch are required")
			}
			keys, err := keydir.LoadKeyPairs(keyPaths)
			if err != nil {
				return err
			}
			var pub ed25519.PublicKey
			if controlPub != "" {
				if pub, err = keydir.LoadSigningPublic(controlPub); err != nil {
					return usageError(fmt.Errorf("--control-pub: %w", err))
				}
			}
			res, err := audit.RunVerified(cmd.Context(), kafkaAddrs, protocol.ReportsTopic, protocol.DecryptedTopic, keys, pub, app, epoch)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), res.String())
			if late, missing := res.Lost(); late > 0 || missing > 0 || res.Orphans > 0 {
				return exitCode{3, fmt.Errorf("audit: %d late, %d missing, %d orphan reports (see the table above)", late, missing, res.Orphans)}
			}
			return nil
		},
	}
	c.Flags().StringSliceVar(&kafkaAddrs, "kafka", []string{defaultKafka}, "Kafka bootstrap brokers, comma-separated host:port list")
	c.Flags().StringSliceVar(&keyPaths, "key", nil, "aggregator HPKE key file (repeat during a rotation)")
	c.Flags().StringVar(&app, "app", "query", "application")
	c.Flags().StringVar(&epoch, "epoch", "", "epoch to audit")
	c.Flags().StringVar(&controlPub, "control-pub", "", "the pipeline operator's Ed25519 public key (PEM), as given to the aggregator: only close records it signed end the epoch")
	return c
}

func releaseCmd() *cobra.Command {
	var kafkaAddrs []string
	var ch, db, metricsAddr, pol, dataset, summary, pipelineFile, app string
	var k int
	var dp policy.Params
	var appOpts apps.Options
	var budget release.Budget
	c := &cobra.Command{
		Use:   "release [--kafka ADDR[,ADDR...]] [--clickhouse ADDR] [--pipeline FILE | --policy ft-u --k 5 | --policy dp-u --users U ...]",
		Short: "Write released histograms from topic decrypted into ClickHouse",
		Long: `release reads topic "decrypted", drops duplicate reports (at-least-once
delivery), and when every partition has closed an epoch writes its histogram
(released_items), the counts-only undecrypted summary and a releases row to
ClickHouse. Writes are idempotent per (app, epoch, policy, k); a ClickHouse
outage is retried. Only items sealed for the pipeline are released: every
report carries the digest of the pipeline definition its client sealed for
(application and options, policy and parameters), and this stage computes
its own from --pipeline FILE or the flags (--app, its options, --policy,
--k or the DP parameters); items of any other digest, policy or k are
counted and logged naming both digests, never released. With --policy dp-a, dp-u, zealous, dp-su or dp-gsu (and
--users U) the items are released with noise and the spend is recorded in
privacy_ledger; a release over --budget-epsilon/--budget-delta is refused and
logged.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			p, err := pipelineFlag(cmd.Flags(), pipelineFile)
			if err != nil {
				return err
			}
			if p != nil {
				var cfg runner.Config
				runner.ApplyPipeline(&cfg, p)
				pol, k, dp, dataset, budget, summary = cfg.Policy, cfg.K, cfg.DP, cfg.Dataset, cfg.Budget, string(cfg.Summary)
				app, appOpts = cfg.App, cfg.AppOptions
			}
			rp, err := runner.ResolvePolicy(pol, k, dp)
			if err != nil {
				return usageError(err)
			}
			digest, err := pipeline.Digest(app, appOpts, rp)
			if err != nil {
				return usageError(err)
			}
			if err := requireWriterLogin(cmd, "crowdlog release"); err != nil {
				return err
			}
			st, w, err := stage.New(cmd.Context(), kafkaAddrs, ch, db, log)
			if err != nil {
				return err
			}
			defer w.Close()
			if st.Summary, err = release.ParseSummaryMode(summary); err != nil {
				return err
			}
			st.Policy, st.Pipeline = rp, digest
			if rp.Kind.IsDP() {
				st.Dataset, st.Budget = dataset, budget
			}
			log.Info("release: pipeline; items sealed for any other are not released", "app", app, "policy", rp.String(), "pipeline", pipeline.DigestString(digest))
			return serveRole(cmd.Context(), metricsAddr, func(reg prometheus.Registerer) { runner.RegisterRelease(reg, st) }, st.Run, kafkaCheck(cmd.Context(), kafkaAddrs), clickhouseCheck(w.Ping))
		},
	}
	c.Flags().StringSliceVar(&kafkaAddrs, "kafka", []string{defaultKafka}, "Kafka bootstrap brokers, comma-separated host:port list")
	c.Flags().StringVar(&ch, "clickhouse", defaultCH, "ClickHouse native address")
	c.Flags().StringVar(&db, "database", "crowdlog", "ClickHouse database")
	c.Flags().StringVar(&summary, "summary", string(release.SummaryCoarse), summaryHelp)
	c.Flags().StringVarP(&pipelineFile, "pipeline", "f", "", "pipeline file (crowdlog pipeline --help): policy, parameters, budget and summary from it instead of their flags")
	c.Flags().StringVar(&app, "app", "query", "the pipeline's application (its options below): part of the pipeline digest items must carry")
	appFlags(c.Flags(), &appOpts)
	c.Flags().StringVar(&pol, "policy", "ft-u", "the pipeline's policy: ft-u, ft-a (exact counts), dp-a, dp-u, zealous, dp-su or dp-gsu (noise, ledger); only items sealed for it are released")
	c.Flags().IntVar(&k, "k", 5, "threshold k of ft-u/ft-a (DP policies derive their Shamir k)")
	policyFlags(c.Flags(), &dp)
	budgetFlags(c.Flags(), &dataset, &budget)
	addMetricsFlag(c, &metricsAddr)
	return c
}

const summaryHelp = "undecrypted summary published next to each release: coarse (report counts in power-of-two buckets), exact or none; DP releases withhold theirs in every mode"

// appFlags registers the application options (apps.Options, see
// docs/applications.md) on f; run and ingest must mine with the same ones.
func appFlags(f *pflag.FlagSet, o *apps.Options) {
	f.StringVar(&o.URLLevel, "url-level", apps.URLDomain, "apps click, url, ltr: how much of a clicked URL to keep: full, domain or dir")
	f.DurationVar(&o.SessionGap, "session-gap", apps.DefaultSessionGap, "app reformulation: an idle time longer than this starts a new session")
	f.StringVar(&o.PairOrder, "pair-order", apps.PairTime, "app reformulation: time (q1 → q2 as searched) or sorted (one artifact for both directions)")
	f.IntSliceVar(&o.Buckets.Rank, "rank-buckets", apps.DefaultRankBuckets, "app ltr: upper bounds of the click-rank buckets")
	f.DurationSliceVar(&o.Buckets.Dwell, "dwell-buckets", apps.DefaultDwellBuckets, "app ltr: upper bounds of the dwell-time buckets")
	f.IntSliceVar(&o.Buckets.Length, "length-buckets", apps.DefaultLengthBuckets, "app ltr: upper bounds of the query-length buckets (tokens)")
}

// setGCPercent applies a role's --gogc unless the operator set GOGC in the
// environment (which the Go runtime already applied).
func setGCPercent(p int) {
	if _, set := os.LookupEnv("GOGC"); !set && p != 0 {
		debug.SetGCPercent(p)
	}
}
