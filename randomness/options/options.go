package options

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/randomness"
)

// Help is the long help of `crowdlog randomness`.
const Help = `randomness evaluates clients' blinded OPRF elements under the key of the
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
pipeline file, unless --epoch-length or --key-grace are given.`

// Options are the flags of the randomness service (`crowdlog randomness`).
type Options struct {
	NATS natsconn.Options
	// Keys is the keys directory; epoch keys live in its
	// keydir.RandomnessKeys subdirectory.
	Keys string
	// RequireTokens requires one Privacy Pass randomness token per element.
	RequireTokens bool
	// Schedule is the epoch schedule: EpochLength, Grace (0 = destroy at
	// the first sweep after close) and Skew (0 = none).
	Schedule randomness.Options
	// PipelineFile, when set, is the pipeline file whose epoch schedule
	// applies unless --epoch-length or --key-grace are given
	// (ApplyPipelineEpoch).
	PipelineFile string
}

// Config is what the randomness service is built from (randomness.New).
type Config struct {
	Keys          string
	RequireTokens bool
	Options       randomness.Options
}

// NewOptions returns the service's defaults: keys directory "keys",
// named epochs, randomness.DefaultGrace and randomness.DefaultSkew, no
// tokens required.
func NewOptions() *Options {
	return &Options{Keys: "keys", Schedule: randomness.Options{Grace: randomness.DefaultGrace, Skew: randomness.DefaultSkew}}
}

// AddFlags adds the service's flags to f, with o's values as defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.NATS.AddFlags(f, "NATS URL; a comma-separated list for a cluster")
	f.StringVar(&o.Keys, "keys", o.Keys, "keys directory; epoch keys live in its "+keydir.RandomnessKeys+" subdirectory")
	f.BoolVar(&o.RequireTokens, "require-tokens", o.RequireTokens, "require one Privacy Pass randomness token per element (keys from the issuer's key files in --keys)")
	f.DurationVar(&o.Schedule.EpochLength, "epoch-length", o.Schedule.EpochLength, "epoch schedule length (e.g. 24h): absolute UTC epochs named START-LENGTH; 0 = named epochs, no schedule")
	f.DurationVar(&o.Schedule.Grace, "key-grace", o.Schedule.Grace, "how long an epoch's key survives its close (and, with --epoch-length, its end) before it is destroyed")
	f.DurationVar(&o.Schedule.Skew, "epoch-skew", o.Schedule.Skew, "with --epoch-length: how far ahead of this clock an epoch may start and still be served")
	f.StringVarP(&o.PipelineFile, "pipeline", "f", "", "pipeline file: its epoch schedule (epoch.length, epoch.grace) unless --epoch-length/--key-grace are given")
}

// ApplyPipelineEpoch takes a pipeline's epoch schedule (length, grace;
// none when length is 0) for the flags f does not have changed.
func (o *Options) ApplyPipelineEpoch(f *pflag.FlagSet, length, grace time.Duration) {
	if length <= 0 {
		return
	}
	if !f.Changed("epoch-length") {
		o.Schedule.EpochLength = length
	}
	if !f.Changed("key-grace") {
		o.Schedule.Grace = grace
	}
}

// Validate errors when the keys directory belongs to another role.
func (o *Options) Validate() error {
	return keydir.RequireRole(o.Keys, "the randomness service", keydir.RoleRandomness)
}

// Config validates o and returns the service's Config: an explicit 0 grace
// or skew becomes "none" (negative) for randomness.Options.
func (o *Options) Config() (Config, error) {
	if err := o.Validate(); err != nil {
		return Config{}, err
	}
	c := Config{Keys: o.Keys, RequireTokens: o.RequireTokens, Options: o.Schedule}
	if c.Options.Grace == 0 {
		c.Options.Grace = -1 // an explicit 0: destroy at the first sweep after close
	}
	if c.Options.Skew == 0 {
		c.Options.Skew = -1
	}
	return c, nil
}

// Connect connects to NATS with the randomness service's credential.
func (o *Options) Connect() (*nats.Conn, error) {
	return o.NATS.Connect("crowdlog-randomness", natsauth.Randomness)
}

// New builds the randomness service of cfg on nc (randomness.New); with
// cfg.RequireTokens every element must come with a randomness token
// verified under the issuer's key files in cfg.Keys (RequireTokens).
func New(ctx context.Context, nc *nats.Conn, cfg Config, log *slog.Logger) (*randomness.Service, error) {
	s, err := randomness.New(ctx, nc, cfg.Keys, cfg.Options, log)
	if err != nil {
		return nil, err
	}
	if cfg.RequireTokens {
		RequireTokens(s, cfg.Keys)
	}
	return s, nil
}

// Start connects to NATS with the service's credential (Connect) and
// builds the service of cfg (New). stop closes the connection.
func (o *Options) Start(ctx context.Context, cfg Config, log *slog.Logger) (s *randomness.Service, nc *nats.Conn, stop func(), err error) {
	if nc, err = o.Connect(); err != nil {
		return nil, nil, nil, err
	}
	if s, err = New(ctx, nc, cfg, log); err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return s, nc, nc.Close, nil
}

// RequireTokens makes rs require one randomness token per element,
// verified under keysDir's per-epoch randomness token keys
// (keydir.LoadTokenKey).
func RequireTokens(rs *randomness.Service, keysDir string) {
	rs.RequireTokens = true
	rs.TokenKeys = func(epoch string) (*token.PrivateKey, error) {
		return keydir.LoadTokenKey(keysDir, token.KindRandomness, epoch)
	}
}

// OpenHelp is the long help of `crowdlog randomness open-epoch`.
const OpenHelp = `open-epoch creates the epoch's OPRF key (RFC 9497, ristretto255) in
DIR/` + keydir.RandomnessKeys + `/NAME.key (mode 0600) and prints its public key, which
clients pin (publish it out of band, e.g. in their pin files, to detect a
service that shows clients different keys).

With named epochs (randomness --epoch-length 0, the default) the service
never creates a key for a request: a client asking for an epoch that was not
opened is refused ("epoch not opened"), so no client can make the service
create key files. Open each epoch before its clients start; running
randomness processes sharing the directory serve it from their next request
on. Opening an open epoch again changes nothing; a closed epoch is never
reopened (open a new name). With --epoch-length the schedule opens its
epochs and this command is not needed. 'crowdlog run' without --external
opens its own epoch.`

// CloseHelp is the long help of `crowdlog randomness close-epoch`.
const CloseHelp = `close-epoch appends the epoch to DIR/` + keydir.RandomnessKeys + `/closed. Running randomness
processes sharing the directory refuse it at their next request ("epoch
closed") and destroy its key once their --key-grace has passed; the epoch is
never given a new key. Run it after 'crowdlog aggregate close-epoch'.`

// EpochOptions are the flags of open-epoch and close-epoch: the keys
// directory and the epoch.
type EpochOptions struct {
	Keys, Epoch string
}

// AddFlags adds --keys and --epoch (described by epochUsage) to f.
func (o *EpochOptions) AddFlags(f *pflag.FlagSet, epochUsage string) {
	f.StringVar(&o.Keys, "keys", "keys", "keys directory of the randomness service")
	f.StringVar(&o.Epoch, "epoch", "", epochUsage)
}

// Open opens the epoch (randomness.Keys.OpenEpoch) and returns the line to
// print: the epoch, whether it was new, the directory and its OPRF public
// key in hex.
func (o *EpochOptions) Open(log *slog.Logger) (string, error) {
	if err := keydir.RequireRole(o.Keys, "randomness open-epoch", keydir.RoleRandomness); err != nil {
		return "", err
	}
	k, err := randomness.Open(filepath.Join(o.Keys, keydir.RandomnessKeys), randomness.Options{Logger: log})
	if err != nil {
		return "", err
	}
	pub, created, err := k.OpenEpoch(o.Epoch)
	if err != nil {
		return "", fmt.Errorf("open epoch %s in %s: %w", o.Epoch, k.Dir(), err)
	}
	state := "opened"
	if !created {
		state = "was already open"
	}
	return fmt.Sprintf("epoch %s %s in %s; OPRF public key %x", o.Epoch, state, k.Dir(), pub), nil
}

// Close closes the epoch (randomness.Keys.Close) and returns the line to
// print.
func (o *EpochOptions) Close() (string, error) {
	if err := keydir.RequireRole(o.Keys, "randomness close-epoch", keydir.RoleRandomness); err != nil {
		return "", err
	}
	k, err := randomness.Open(filepath.Join(o.Keys, keydir.RandomnessKeys), randomness.Options{})
	if err != nil {
		return "", err
	}
	if err := k.Close(o.Epoch); err != nil {
		return "", err
	}
	return fmt.Sprintf("epoch %s closed in %s", o.Epoch, k.Dir()), nil
}
