package aggregator

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/pipelinespec"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// DefaultGroup is the Kafka consumer group of the aggregators.
const DefaultGroup = "crowdlog-aggregator"

// Options are the settings of one aggregator process (`crowdlog
// aggregate`, and the aggregator `crowdlog run` starts in process): the
// flags of AddFlags, the pipelines it serves and the run-only verifying
// key. DefaultOptions gives the defaults; Validate checks them and Service
// builds the Service.
type Options struct {
	Kafka    []string // bootstrap brokers, host:port
	KeyPaths []string // HPKE key files (two during a rotation); required
	Group    string   // Kafka consumer group
	// KeysDir is the keys directory of the issuer's per-epoch report-token
	// and ARC keys; set, a report needs an unspent token (and under FT_u
	// an ARC presentation); "" checks neither (logged).
	KeysDir string
	// PipelineFiles are the --pipeline files; the aggregator reads no
	// pipeline file itself (pipelines/runner.NewAggregator reads them into
	// Pipelines).
	PipelineFiles []string
	// Pipelines are the definitions served; none: every definition.
	Pipelines         []Served
	SessionTimeout    time.Duration // a member silent this long leaves the group
	MaxOpenEpochs     int           // open epochs per app
	MaxPendingReports int64         // reports below threshold per (app, epoch) and partition
	MaxPendingBytes   int64         // their bytes per (app, epoch) and partition
	SpillDir          string        // spill files of pending reports; "" = the system's temporary directory
	SnapshotDir       string        // partition snapshots; "" = none (a moved partition is replayed)
	SnapshotEvery     int           // messages applied between two snapshots
	// ControlPub is the file of the pipeline operator's Ed25519 public key
	// (PEM) that must sign epoch control records; ControlPublic is the key
	// itself (a run holds it in memory) and wins over the file. Neither:
	// control records are not authenticated (logged).
	ControlPub    string
	ControlPublic ed25519.PublicKey
	// ControlKey is the file of the operator's Ed25519 private key (PEM)
	// that signs the records of a scheduled pipeline's epochs.
	ControlKey string
	// NATS is where the process announces the pipelines it serves and its
	// report counts (Service.NATS, protocol.PipelineSubject), connecting
	// as natsauth.Aggregator; URL "" (the default): no announcement, and
	// clients cannot verify their configuration against this aggregator.
	NATS natsconn.Options
	// SignKey is the file of the aggregator operator's Ed25519 key (PEM,
	// keydir.AggregatorSignKey) that signs the announced definitions
	// (Service.SignKey); "": the aggregator-sign.key beside the first
	// KeyPaths file, when there is one (else unsigned, logged).
	SignKey string
}

// Served is one pipeline definition an aggregator serves, as read from its
// file: its digest, and for a definition with an epoch schedule its app,
// epoch length and close delay.
type Served struct {
	File, Name string   // where it was read and its name, for errors and the log
	Digest     [32]byte // pipeline.Pipeline.Digest
	// Spec is the definition's pipelinespec.Spec (Digest is its Digest),
	// announced to clients (Service.Announce).
	Spec        pipelinespec.Spec
	App         string // the application of the scheduled epochs
	EpochLength time.Duration
	CloseDelay  time.Duration // with EpochLength > 0: the close, after the epoch's end
}

// DefaultOptions returns the options of `crowdlog aggregate` without
// flags.
func DefaultOptions() Options {
	return Options{
		Kafka:             []string{infrakafka.DefaultBroker},
		Group:             DefaultGroup,
		SessionTimeout:    20 * time.Second,
		MaxOpenEpochs:     DefaultMaxOpenEpochs,
		MaxPendingReports: DefaultMaxPendingReports,
		MaxPendingBytes:   DefaultMaxPendingBytes,
		SnapshotEvery:     20_000,
	}
}

// AddFlags adds the flags of `crowdlog aggregate` to f, filling o; the
// values in o are the defaults shown.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&o.Kafka, "kafka", o.Kafka, "Kafka bootstrap brokers, comma-separated host:port list")
	f.StringSliceVar(&o.KeyPaths, "key", o.KeyPaths, "aggregator HPKE key file (repeat during a rotation)")
	f.StringVar(&o.Group, "group", o.Group, "Kafka consumer group")
	f.StringVar(&o.KeysDir, "keys", o.KeysDir, "keys directory holding the issuer's report-token and ARC keys; set: reports need tokens (and FT_u ARC presentations) (--token-keys: the former spelling)")
	f.StringArrayVarP(&o.PipelineFiles, "pipeline", "f", o.PipelineFiles, "pipeline file served (repeat for several); reports sealed for another definition are dropped (pipeline-mismatch); none: every definition")
	f.DurationVar(&o.SessionTimeout, "session-timeout", o.SessionTimeout, "a member silent this long leaves the group and its partitions move (also the wait after a crash)")
	f.IntVar(&o.MaxOpenEpochs, "max-open-epochs", o.MaxOpenEpochs, "open epochs per app; an open beyond it is refused (logged)")
	f.Int64Var(&o.MaxPendingReports, "max-pending-reports", o.MaxPendingReports, "reports held below threshold per (app, epoch) and partition; beyond it reports are dropped (epoch-full)")
	f.Int64Var(&o.MaxPendingBytes, "max-pending-bytes", o.MaxPendingBytes, "bytes of those reports per (app, epoch) and partition; beyond it reports are dropped (epoch-full)")
	f.StringVar(&o.SpillDir, "spill-dir", o.SpillDir, "directory for the spill files of pending reports (≈ 350 B each on disk); default: the system's temporary directory")
	f.StringVar(&o.SnapshotDir, "snapshot-dir", o.SnapshotDir, "directory for partition snapshots and their spill segments (shared by the group's processes); set: a moved partition is restored, not replayed from the epoch's start")
	f.IntVar(&o.SnapshotEvery, "snapshot-every", o.SnapshotEvery, "messages applied between two snapshots of a partition (with --snapshot-dir; more when it holds over 25× as many pending reports); a move replays at most this many")
	f.StringVar(&o.ControlPub, "control-pub", o.ControlPub, "the pipeline operator's Ed25519 public key (PEM, keys/"+keydir.ControlSignKey+".pub): epoch open/close records must be signed by it; empty: not checked (logged)")
	f.StringVar(&o.NATS.URL, "nats", o.NATS.URL, "NATS URL(s), comma-separated: announce the --pipeline definitions and report counts to clients on "+protocol.PipelineSubject+" (they verify k, policy, app and digest before sending); empty: no announcement")
	o.NATS.Security.AddFlags(f)
	f.StringVar(&o.SignKey, "sign-key", o.SignKey, "the aggregator operator's Ed25519 key (PEM, keys/"+keydir.AggregatorSignKey+") that signs the --nats announcement, which clients verify against its pinned public half; empty: "+keydir.AggregatorSignKey+" beside --key, if present")
	f.StringVar(&o.ControlKey, "control-key", o.ControlKey, "the pipeline operator's Ed25519 key (PEM, keys/"+keydir.ControlSignKey+") that signs the records of a --pipeline schedule; empty: unsigned")
}

// Validate checks what needs no file: a key file is given.
func (o *Options) Validate() error {
	if len(o.KeyPaths) == 0 {
		return errors.New("--key is required (see `crowdlog keys generate`)")
	}
	return nil
}

// Service validates o and builds the aggregator: it reads the key files,
// the control keys and (with KeysDir, which must not be another
// operator's directory) the token keys on demand, and logs what it
// serves and what it does not check. Errors of a flag's value are
// config.UsageError.
func (o *Options) Service(log *slog.Logger) (*Service, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s, err := New(o.Kafka, o.KeyPaths, log)
	if err != nil {
		return nil, err
	}
	s.GroupID, s.SessionTimeout = o.Group, o.SessionTimeout
	s.MaxOpenEpochs, s.MaxPendingReports, s.MaxPendingBytes = o.MaxOpenEpochs, o.MaxPendingReports, o.MaxPendingBytes
	s.SpillDir, s.SnapshotDir, s.SnapshotEvery = o.SpillDir, o.SnapshotDir, o.SnapshotEvery
	s.ControlKey = o.ControlPublic
	if s.ControlKey == nil && o.ControlPub != "" {
		if s.ControlKey, err = keydir.LoadSigningPublic(o.ControlPub); err != nil {
			return nil, config.UsageError{Err: fmt.Errorf("--control-pub: %w", err)}
		}
	}
	if err := o.serve(s, log); err != nil {
		return nil, err
	}
	if o.NATS.URL != "" {
		if s.NATS, err = o.NATS.Connect("crowdlog-aggregate", natsauth.Aggregator); err != nil {
			return nil, fmt.Errorf("aggregate: --nats: %w", err)
		}
		s.closeNATS = true
		if s.SignKey, err = o.signKey(); err != nil {
			return nil, err
		}
	} else if len(o.Pipelines) > 0 {
		log.Warn("aggregate: --pipeline without --nats: clients cannot verify their k, policy and pipeline digest against this aggregator, and see no count of refused reports")
	}
	if o.KeysDir == "" {
		log.Warn("aggregate: report tokens and ARC presentations not checked (--keys not set): one client may send unlimited reports and be k users under FT_u")
		return s, nil
	}
	if err := keydir.RequireRole(o.KeysDir, "the aggregator", keydir.RoleAggregator); err != nil {
		return nil, err
	}
	UseTokenKeys(s, o.KeysDir)
	return s, nil
}

// signKey loads SignKey, or the aggregator-sign.key beside the first
// key file when SignKey is empty (nil when there is none).
func (o *Options) signKey() (ed25519.PrivateKey, error) {
	path := o.SignKey
	if path == "" {
		path = filepath.Join(filepath.Dir(o.KeyPaths[0]), keydir.AggregatorSignKey)
		if _, err := os.Stat(path); err != nil {
			return nil, nil
		}
	}
	k, err := keydir.LoadSigningKey(path)
	if err != nil {
		return nil, config.UsageError{Err: fmt.Errorf("--sign-key: %w (crowdlog keys generate --role aggregator creates %s)", err, keydir.AggregatorSignKey)}
	}
	return k, nil
}

// serve sets the pipelines s serves and the schedule of those with one;
// the schedule's records are signed with ControlKey.
func (o *Options) serve(s *Service, log *slog.Logger) error {
	if len(o.Pipelines) > 0 {
		s.Pipelines = map[[32]byte]bool{}
	}
	for _, p := range o.Pipelines {
		s.Pipelines[p.Digest] = true
		if p.Spec.App != "" {
			s.Announce = append(s.Announce, p.Spec)
			if s.PipelineSealing == nil {
				s.PipelineSealing = map[[32]byte]Sealing{}
			}
			s.PipelineSealing[p.Digest] = Sealing{K: p.Spec.ShamirK, Policy: p.Spec.Sealing()}
		}
		log.Info("aggregate: serving pipeline", "file", p.File, "name", p.Name, "pipeline", fmt.Sprintf("%x", p.Digest))
		if err := addSchedule(&s.Schedule, p); err != nil {
			return err
		}
	}
	if s.Schedule == nil {
		if o.ControlKey != "" {
			log.Warn("aggregate: --control-key unused: no --pipeline with an epoch schedule (this process writes no control records)")
		}
		return nil
	}
	if o.ControlKey != "" {
		var err error
		if s.Schedule.Key, err = keydir.LoadSigningKey(o.ControlKey); err != nil {
			return config.UsageError{Err: fmt.Errorf("--control-key: %w", err)}
		}
	}
	log.Info("aggregate: scheduled epochs opened and closed on this clock", "apps", s.Schedule.Apps,
		"epoch_length", s.Schedule.Length, "close_delay", s.Schedule.CloseDelay)
	return nil
}

// addSchedule adds p's app to the schedule *sc (created at p's length and
// close delay) when p has an epoch schedule; the first scheduled pipeline
// of an app signs its records. Every scheduled pipeline must share one
// length and close delay (else a config.UsageError).
func addSchedule(sc **Schedule, p Served) error {
	if p.EpochLength <= 0 {
		return nil
	}
	if *sc == nil {
		*sc = &Schedule{Length: p.EpochLength, CloseDelay: p.CloseDelay, Pipelines: map[string][32]byte{}}
	} else if (*sc).Length != p.EpochLength || (*sc).CloseDelay != p.CloseDelay {
		return config.UsageError{Err: fmt.Errorf("pipeline %s: epoch length %s and close delay %s differ from another --pipeline's %s and %s: run one aggregator group per schedule",
			p.File, p.EpochLength, p.CloseDelay, (*sc).Length, (*sc).CloseDelay)}
	}
	(*sc).Apps = append((*sc).Apps, p.App)
	if _, dup := (*sc).Pipelines[p.App]; !dup {
		(*sc).Pipelines[p.App] = p.Digest
	}
	return nil
}

// UseTokenKeys makes s accept a report only with an unspent report token
// bound to it, and under FT_u with a valid ARC presentation, under the
// epoch's keys in keysDir (keydir.LoadTokenKey, keydir.LoadARCKey).
func UseTokenKeys(s *Service, keysDir string) {
	s.ReportKeys = func(epoch string) (*token.PrivateKey, error) {
		return keydir.LoadTokenKey(keysDir, token.KindReport, epoch)
	}
	s.ARCKeys = func(epoch string) (*arc.PrivateKey, error) { return keydir.LoadARCKey(keysDir, epoch) }
}
