package prio3

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/gofrs/flock"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/ingest/pinfile"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// Errors of New (errors.Is works on what it returns).
var (
	// ErrSettingsMismatch: the leader's announced campaign settings differ
	// from the device's Config; the error is a *SettingsMismatchError
	// naming the value and the Config field.
	ErrSettingsMismatch = errors.New("prio3: the leader's campaign settings differ from this device's")
	// ErrSettingsChanged: the leader announces other settings for the
	// campaign than those this device pinned on its first run (state file
	// settings.pins): it changed them mid-campaign, or shows clients
	// different settings.
	ErrSettingsChanged = errors.New("prio3: the leader's campaign settings changed since this device pinned them")
	// ErrKeyChanged: a public key in Config.KeysDir differs from the copy
	// this device pinned (state directory keys/), and Config.Fingerprints
	// does not vouch for the new one.
	ErrKeyChanged = errors.New("prio3: an operator's public key changed since this device pinned it")
	// ErrKeyFingerprint: a public key file's SHA-256 differs from its
	// fingerprint in Config.Fingerprints.
	ErrKeyFingerprint = errors.New("prio3: an operator's public key does not match its published fingerprint")
	// ErrSettingsWeaker: the leader announces privacy settings weaker than
	// the device's floor (Config.MaxEpsilon, Config.MinBatchFloor,
	// Config.AllowExactShares, Config.MaxStatusEpsilon,
	// Config.MaxStatusDelta, Config.AllowExactStatus); the error is a
	// *SettingsWeakerError naming
	// the parameter. Returned by New, and by Upload when the leader's
	// announcement changed since (nothing is sealed or sent).
	ErrSettingsWeaker = errors.New("prio3: the leader announces weaker privacy settings than this device accepts")
)

// Defaults of the device's privacy floor (Config): they accept the
// aggregators' shipped defaults (`crowdlog aggregate-prio3`: --epsilon 1,
// --min-batch-size 100) and refuse clearly weaker announcements.
const (
	// DefaultMaxEpsilon is the largest ε per person-day (the Laplace
	// noise of scale S/ε on each keyword of each aggregator's share) a
	// device accepts when Config.MaxEpsilon is 0: the aggregators' default
	// --epsilon.
	DefaultMaxEpsilon = 1.0
	// DefaultMinBatchFloor is the smallest minimum batch size (reports a
	// day is released with) a device accepts when Config.MinBatchFloor is
	// 0: a tenth of the aggregators' default --min-batch-size 100.
	DefaultMinBatchFloor = 10
	// DefaultMaxStatusEpsilon is the largest ε_c of a day's
	// released/withheld status (the leader's noisy count test, one count
	// query of sensitivity 1 per person-day) a device accepts when
	// Config.MaxStatusEpsilon is 0: the same as DefaultMaxEpsilon. By
	// basic composition (Dwork & Roth, "The Algorithmic Foundations of
	// Differential Privacy", 2014, Thm. 3.16) a person-day then costs at
	// most ε + ε_c ≤ 2 under the default floor; the aggregators' default
	// ε_c is 0.1 × ε (0.1 at ε = 1), well inside it. At ε_c = 1 and δ =
	// 10⁻⁶ the noisy count must pass the minimum by 14; at ε_c = 50 by 1,
	// about the exact rule, which the floor refuses.
	DefaultMaxStatusEpsilon = DefaultMaxEpsilon
	// DefaultMaxStatusDelta is the largest δ of the status a device
	// accepts when Config.MaxStatusDelta is 0: ten times the aggregators'
	// default --status-delta 10⁻⁶, and below 1/n for a campaign of up to
	// 10⁵ people (δ must be well under the inverse of the population:
	// Dwork & Roth §2.3).
	DefaultMaxStatusDelta = 1e-5
)

// Key files a Prio3 device pins (names in Config.KeysDir, the state
// directory's keys/ and Config.Fingerprints): relay a's and relay b's
// onion keys, the leader's report key, the helper's input-share key and
// the leader operator's Ed25519 signing key (which signs the campaign
// settings). Each operator publishes its files with `crowdlog keys
// export-public`.
var KeyFiles = []string{
	keydir.RelayAKey + ".pub", keydir.RelayBKey + ".pub",
	keydir.Prio3LeaderKey + ".pub", keydir.Prio3HelperKey + ".pub", keydir.Prio3LeaderSignKey + ".pub",
}

// State directory entries (Config.StateDir).
const (
	stateLock         = "lock"
	stateKeys         = "keys"
	stateIdentity     = "identity.key"
	stateIssuerPins   = "issuer.pins"
	stateSettingsPins = "settings.pins"
)

// StateFile is the path of the upload record of campaign in a device's
// state directory dir: "prio3-" + campaign + ".json" (Client.StatePath).
func StateFile(dir, campaign string) string {
	return filepath.Join(dir, "prio3-"+campaign+".json")
}

// Retry is how a Device retries a step that failed for a reason that may
// pass (no leader answering yet, the issuer or NATS unreachable, a publish
// not acknowledged): exponential waits from Initial, doubling with ±50 %
// jitter up to Max, for at most MaxElapsed in all and MaxTries tries
// (github.com/cenkalti/backoff/v5). Zero fields take the defaults:
// Initial 500 ms, Max 30 s, MaxElapsed 5 min, MaxTries unlimited within
// MaxElapsed. Refusals that cannot pass (settings that disagree, a key
// that changed, an identity not enrolled or over its budget, a day
// already uploaded) are never retried.
type Retry struct {
	Initial, Max, MaxElapsed time.Duration
	MaxTries                 uint
}

func (r Retry) run(ctx context.Context, log *slog.Logger, what string, f func() error) error {
	b := &backoff.ExponentialBackOff{InitialInterval: cmpOr(r.Initial, 500*time.Millisecond), RandomizationFactor: 0.5,
		Multiplier: 2, MaxInterval: cmpOr(r.Max, 30*time.Second)}
	opts := []backoff.RetryOption{backoff.WithBackOff(b), backoff.WithMaxElapsedTime(cmpOr(r.MaxElapsed, 5*time.Minute)),
		backoff.WithNotify(func(err error, next time.Duration) {
			log.Warn("prio3 device: "+what+" failed, retrying", "err", err, "in", next.Round(time.Millisecond))
		})}
	if r.MaxTries > 0 {
		opts = append(opts, backoff.WithMaxTries(r.MaxTries))
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) { return struct{}{}, f() }, opts...)
	return err
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Config configures a Prio3 Device (New). Zero fields take the defaults
// given.
type Config struct {
	// StateDir is the device's state directory (created 0700 when
	// missing; one process at a time, held by a lock file). It holds:
	//
	//   - keys/: the pinned copies of the operators' public keys
	//     (KeyFiles), copied from KeysDir on first use;
	//   - settings.pins: "CAMPAIGN hex-digest" lines, the digest
	//     (p3.Settings.Digest) of the leader's settings seen first;
	//   - prio3-CAMPAIGN.json: the days uploaded and the onion of a day
	//     whose publish has not been acknowledged (StateFile, mode 0600);
	//   - identity.key: the Ed25519 identity enrolled at the helper
	//     operator's attester (HelperTokens, unless Identity is given);
	//   - issuer.pins: the helper-token issuer's public keys seen first,
	//     per campaign-day (tokenclient.Client.PinFile);
	//   - lock.
	//
	// Losing it: without prio3-CAMPAIGN.json the device no longer knows
	// which days it uploaded; a second upload of a day is refused by the
	// helper operator's issuer (one helper token per identity per
	// campaign-day) as long as identity.key survives, and would count the
	// device twice that day otherwise. Without identity.key the device is
	// a new identity the operator must enroll again. Without keys/ and
	// the pins the device trusts what KeysDir and the leader show it next
	// (first use again), unless Fingerprints pins the keys.
	StateDir string

	// NATS is the deployment's NATS URL, or comma-separated URLs of a
	// cluster; New connects and Close disconnects. Conn, when set, is used
	// instead and left open by Close.
	NATS string
	Conn *nats.Conn
	// NATSSecurity is the clients' NATS credential and TLS files
	// (ingest.NATSSecurity, the type every client mode takes); errors
	// connecting name its fields.
	NATSSecurity ingest.NATSSecurity

	// KeysDir holds the operators' public key files (KeyFiles). New
	// copies them into StateDir/keys on first use; later runs may leave
	// it empty. A file that differs from the pinned copy is refused with
	// ErrKeyChanged unless Fingerprints vouches for it (a rotation).
	KeysDir string
	// Fingerprints are the operators' published fingerprints of the key
	// files: file name (KeyFiles) → lowercase hex SHA-256 of the file's
	// bytes (what `sha256sum FILE` prints). Get them out of band — the
	// campaign's web page, the operators' signed release notes — and
	// compile them into the app; a key file whose SHA-256 differs is
	// refused (ErrKeyFingerprint). Empty: trust on first use (keys/).
	Fingerprints map[string]string
	// SkipRouteCheck skips asking relays a and b whether they hold the
	// route's key ids (ingest.CheckRelayKeys).
	SkipRouteCheck bool

	// Campaign is the campaign's name, Keywords its monitored keyword
	// list (keywords.Load; its length is L, its hash is compared with the
	// leader's) and Measurement its measurement: Kind, Bits (SumVec),
	// MaxWeight (presence), Chunk (0 = p3.DefaultChunk) and L1 (the bound
	// S on a client's daily sum of clipped counts; SumVec). Length 0
	// means Keywords.Len(). All of it must equal the leader's
	// announcement (ErrSettingsMismatch).
	Campaign    string
	Keywords    *keywords.List
	Measurement p3.Config
	// Digest, when set, is the campaign digest the operators publish
	// (p3.Settings.Digest, lowercase hex, as the leader logs it): the
	// leader's settings must have it.
	Digest string
	// Blacklist holds keywords the user never shares (normalized): they
	// count 0 in UploadSearches (PDD §6.1).
	Blacklist map[string]bool

	// The privacy floor: the weakest settings the app accepts from the
	// leader's signed announcement. The leader's operator alone chooses
	// what it announces; a device refuses to seal or send (New and each
	// Upload, ErrSettingsWeaker naming the parameter) when the announced
	// ε per person-day exceeds MaxEpsilon, the announced minimum batch
	// size is below MinBatchFloor, or the announcement says exact shares
	// (ε = 0: no noise) and AllowExactShares is false. The measurement
	// (kind, L, bits, max weight, chunk, the bound S that scales the
	// noise, the keyword list) must equal the Config's exactly
	// (ErrSettingsMismatch). Set them from the campaign's published terms.
	//
	// MaxEpsilon: 0 means DefaultMaxEpsilon (1); a finite ε > 0.
	MaxEpsilon float64
	// MinBatchFloor: 0 means DefaultMinBatchFloor (10).
	MinBatchFloor uint64
	// AllowExactShares accepts a leader that announces ε = 0 (aggregate
	// shares without noise: the totals only k-anonymous by the minimum
	// batch, and a malicious leader padding a batch reads one client's
	// vector). Only for a campaign that says so, or a test.
	AllowExactShares bool
	// The status floor: the leader decides each day's released/withheld
	// status from a noisy count, (ε_c, δ)-DP per person-day
	// (aggregator/prio3 status.go), and announces (ε_c, δ). A device
	// refuses ε_c above MaxStatusEpsilon (0 means
	// DefaultMaxStatusEpsilon, 1), δ above MaxStatusDelta (0 means
	// DefaultMaxStatusDelta, 10⁻⁵), and the exact minimum batch rule (ε_c
	// = 0: a day of min − 1 reports is withheld and one of min released,
	// so the status tells whether one person took part) unless
	// AllowExactStatus. A leader running exact shares with the default
	// --status-epsilon (0.1 × ε = 0) runs the exact rule: such a
	// campaign's devices set both AllowExactShares and AllowExactStatus.
	MaxStatusEpsilon float64
	MaxStatusDelta   float64
	AllowExactStatus bool

	// HelperTokens fetches, per upload, a helper token from the helper
	// operator's issuer with the device's identity (a helper run without
	// --no-helper-tokens refuses reports without one). Identity is the
	// enrolled Ed25519 key; nil: StateDir/identity.key, created on first
	// use (print its public half for the operator to enroll:
	// IdentityPublic).
	HelperTokens bool
	// LeaderTokens likewise fetches a leader token from the leader
	// operator's issuer with the same identity (enrolled at both
	// operators); a leader run without --no-leader-tokens refuses reports
	// without one.
	LeaderTokens bool
	// Identity is the enrolled Ed25519 key the tokens are issued to; nil:
	// StateDir/identity.key, created on first use.
	Identity ed25519.PrivateKey
	// IssuerTimeout bounds each issuer request (0:
	// tokenclient.DefaultTimeout); with its re-sends (no issuer
	// subscribed, the issuer temporarily unavailable, a timeout) a token
	// request takes at most tokenclient.IssueAttempts × IssuerTimeout,
	// after which Retry re-runs the upload with the same report.
	IssuerTimeout time.Duration

	// SettingsTimeout bounds one request for the leader's settings (0:
	// 10 s); Retry governs the retries of it and of each upload.
	SettingsTimeout time.Duration
	Retry           Retry
	// MaxPending bounds the uploads accepted but not yet stored by
	// JetStream (publish.Publisher.MaxPending); 0 means 4096.
	MaxPending int

	// Logger gets the device's log lines (never keys, counts or
	// queries); nil means slog.Default().
	Logger *slog.Logger
}

// SettingsMismatchError names a value on which the leader's announced
// settings and the device's Config disagree.
type SettingsMismatchError struct {
	Value  string // the setting, e.g. "bits"
	Field  string // the Config field that sets it, e.g. "Config.Measurement.Bits"
	Leader string // the leader's value
	Device string // the device's value
	Hint   string // what to do, when not "set Field to the leader's value"
}

// Error names the disagreeing value, both sides and what to do.
func (e *SettingsMismatchError) Error() string {
	hint := e.Hint
	if hint == "" {
		hint = "set " + e.Field + " to the leader's value (or ask the operators which is the campaign's)"
	}
	return fmt.Sprintf("prio3: the leader's campaign settings disagree on %s: the leader runs with %s, this device with %s (%s): %s",
		e.Value, e.Leader, e.Device, e.Field, hint)
}

// Unwrap makes errors.Is(err, ErrSettingsMismatch) true.
func (e *SettingsMismatchError) Unwrap() error { return ErrSettingsMismatch }

// SettingsWeakerError names the privacy parameter the leader announces
// weaker than the device's floor.
type SettingsWeakerError struct {
	Param  string // the parameter, e.g. "epsilon" or "min batch size"
	Field  string // the Config field that sets the floor, e.g. "Config.MaxEpsilon"
	Leader string // the leader's announced value
	Floor  string // the weakest the device accepts, e.g. "ε ≤ 1"
}

// Error names the parameter, both values and what to do.
func (e *SettingsWeakerError) Error() string {
	return fmt.Sprintf("%s: %s: the leader announces %s, this device's floor is %s (%s): nothing sealed or sent; ask the operators why (the campaign's published terms), and change %s only if they say so",
		ErrSettingsWeaker, e.Param, e.Leader, e.Floor, e.Field, e.Field)
}

// Unwrap makes errors.Is(err, ErrSettingsWeaker) true.
func (e *SettingsWeakerError) Unwrap() error { return ErrSettingsWeaker }

// CheckFloor compares the privacy parameters of the leader's settings s
// with cfg's floor (MaxEpsilon, MinBatchFloor, AllowExactShares,
// MaxStatusEpsilon, MaxStatusDelta, AllowExactStatus; zero fields take
// the defaults) and returns a *SettingsWeakerError (wrapping
// ErrSettingsWeaker) for the first one weaker — param "noise", "epsilon",
// "min batch size", "status noise", "status epsilon" or "status delta" —
// else nil. New, Upload and VerifySettings call it.
func (cfg Config) CheckFloor(s *p3.Settings) error {
	maxEps, minBatch := cfg.MaxEpsilon, cfg.MinBatchFloor
	if maxEps == 0 {
		maxEps = DefaultMaxEpsilon
	}
	if minBatch == 0 {
		minBatch = DefaultMinBatchFloor
	}
	maxStatus, maxDelta := cfg.MaxStatusEpsilon, cfg.MaxStatusDelta
	if maxStatus == 0 {
		maxStatus = DefaultMaxStatusEpsilon
	}
	if maxDelta == 0 {
		maxDelta = DefaultMaxStatusDelta
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	switch {
	case s.Epsilon == 0 && !cfg.AllowExactShares:
		return &SettingsWeakerError{Param: "noise", Field: "Config.AllowExactShares", Leader: "exact shares (ε = 0, no noise)", Floor: "noise, ε ≤ " + f(maxEps)}
	case s.Epsilon > maxEps:
		return &SettingsWeakerError{Param: "epsilon", Field: "Config.MaxEpsilon", Leader: "ε = " + f(s.Epsilon) + " per person-day", Floor: "ε ≤ " + f(maxEps)}
	case s.MinBatchSize < minBatch:
		return &SettingsWeakerError{Param: "min batch size", Field: "Config.MinBatchFloor", Leader: "a minimum of " + strconv.FormatUint(s.MinBatchSize, 10) + " reports per day",
			Floor: "a minimum of at least " + strconv.FormatUint(minBatch, 10)}
	case s.StatusEpsilon == 0 && !cfg.AllowExactStatus:
		return &SettingsWeakerError{Param: "status noise", Field: "Config.AllowExactStatus",
			Leader: "the exact minimum batch rule for each day's status (ε_c = 0: a day of min − 1 reports withheld, one of min released)",
			Floor:  "a noisy status, ε_c ≤ " + f(maxStatus)}
	case s.StatusEpsilon > maxStatus:
		return &SettingsWeakerError{Param: "status epsilon", Field: "Config.MaxStatusEpsilon", Leader: "ε_c = " + f(s.StatusEpsilon) + " per person-day for each day's status",
			Floor: "ε_c ≤ " + f(maxStatus)}
	case s.StatusEpsilon > 0 && s.StatusDelta > maxDelta:
		return &SettingsWeakerError{Param: "status delta", Field: "Config.MaxStatusDelta", Leader: "δ = " + f(s.StatusDelta) + " for each day's status",
			Floor: "δ ≤ " + f(maxDelta)}
	}
	return nil
}

// Stats are a device's counters since New (not kept across restarts).
type Stats struct {
	// Uploaded counts the reports sealed and stored at relay a.
	Uploaded uint64
	// SettingsWeaker counts uploads refused before sealing because the
	// leader's announcement, asked again, was weaker than the floor
	// (ErrSettingsWeaker).
	SettingsWeaker uint64
	// SettingsChanged counts uploads refused before sealing because the
	// leader's verified announcement no longer agrees with the Config
	// (ErrSettingsMismatch).
	SettingsChanged uint64
	// SettingsUnverified counts uploads for which the leader's
	// announcement could not be asked again or did not verify (no answer,
	// a malformed or unsigned answer): they went ahead under the settings
	// verified last.
	SettingsUnverified uint64
}

// Device is a Prio3-mode client device: it pins the operators' keys,
// verifies the leader's signed campaign settings against its own before
// anything is sent, and uploads at most one report per campaign-day
// (Client), with its state in Config.StateDir. Safe for concurrent use;
// uploads are serialized.
type Device struct {
	cfg      Config
	log      *slog.Logger
	settings p3.Settings
	client   *Client
	tr       *Transport
	vdaf     *p3.VDAF
	pub      *publish.Publisher
	nc       *nats.Conn // owned; nil when Config.Conn
	lock     *flock.Flock
	identity ed25519.PrivateKey
	conn     *nats.Conn        // the connection the settings are asked on
	signPub  ed25519.PublicKey // the leader's pinned signing key
	leaderPK onion.PublicKey   // the leader report key sealed to

	mu    sync.Mutex // serializes uploads (one VDAF)
	smu   sync.Mutex // guards settings (after New) and stats
	stats Stats
}

// New opens a Prio3 device: its state directory, the pinned keys, a NATS
// connection, the relays' key check, the leader's signed settings (checked
// against cfg: ErrSettingsMismatch names the value and field; against the
// privacy floor: ErrSettingsWeaker names the parameter) and the upload
// record. Every blocking step is bounded by ctx. Errors say which
// Config field to fix.
func New(ctx context.Context, cfg Config) (*Device, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("campaign", cfg.Campaign)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, stateKeys), 0o700); err != nil {
		return nil, fmt.Errorf("prio3: device state %s: %w (give Config.StateDir a writable directory)", cfg.StateDir, err)
	}
	lock := flock.New(filepath.Join(cfg.StateDir, stateLock), flock.SetPermissions(0o600))
	if ok, err := lock.TryLock(); err != nil {
		return nil, fmt.Errorf("prio3: device state %s: lock: %w (give Config.StateDir a writable directory)", cfg.StateDir, err)
	} else if !ok {
		return nil, fmt.Errorf("prio3: %w: %s (stop the other device, or give this one its own Config.StateDir)", ingest.ErrStateInUse, cfg.StateDir)
	}
	d := &Device{cfg: cfg, log: log, lock: lock}
	fail := func(err error) (*Device, error) {
		d.release()
		return nil, err
	}
	if err := d.pinKeys(); err != nil {
		return fail(err)
	}
	keys := filepath.Join(cfg.StateDir, stateKeys)
	ra, err := onion.LoadPublicKeyFor(filepath.Join(keys, keydir.RelayAKey+".pub"), "relay-a")
	if err != nil {
		return fail(fmt.Errorf("prio3: %w (Config.KeysDir)", err))
	}
	rb, err := onion.LoadPublicKeyFor(filepath.Join(keys, keydir.RelayBKey+".pub"), "relay-b")
	if err != nil {
		return fail(fmt.Errorf("prio3: %w (Config.KeysDir)", err))
	}
	lk, err := onion.LoadPublicKey(filepath.Join(keys, keydir.Prio3LeaderKey+".pub"))
	if err != nil {
		return fail(fmt.Errorf("prio3: leader's report key: %w (Config.KeysDir)", err))
	}
	hk, err := onion.LoadPublicKey(filepath.Join(keys, keydir.Prio3HelperKey+".pub"))
	if err != nil {
		return fail(fmt.Errorf("prio3: helper's input-share key: %w (Config.KeysDir)", err))
	}
	signPub, err := keydir.LoadSigningPublic(filepath.Join(keys, keydir.Prio3LeaderSignKey+".pub"))
	if err != nil {
		return fail(fmt.Errorf("prio3: leader's signing key %s: %w (Config.KeysDir: the leader operator's public bundle)", keydir.Prio3LeaderSignKey+".pub", err))
	}
	nc := cfg.Conn
	if nc == nil {
		if nc, err = cfg.NATSSecurity.Connect(cfg.NATS, "crowdlog-prio3-device"); err != nil {
			return fail(fmt.Errorf("prio3: connect to NATS %s (Config.NATS): %w", cfg.NATS, err))
		}
		d.nc = nc
	}
	if !cfg.SkipRouteCheck {
		if err := ingest.CheckRelayKeys(ctx, ingest.NATSRelayKeys(nc), []ingest.RelayHop{{Name: "a", Key: ra}, {Name: "b", Key: rb}}, log); err != nil {
			return fail(fmt.Errorf("prio3: %w", err))
		}
	}
	d.conn, d.signPub, d.leaderPK = nc, signPub, lk
	if err := d.checkSettings(ctx, nc, signPub, lk); err != nil {
		return fail(err)
	}
	if d.vdaf, err = p3.New(cfg.Campaign, cfg.Measurement); err != nil {
		return fail(fmt.Errorf("prio3: Config.Measurement: %w", err))
	}
	path := StateFile(cfg.StateDir, cfg.Campaign)
	c, err := Open(path, cfg.Campaign)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c = &Client{Campaign: cfg.Campaign, StatePath: path}
	case err != nil:
		return fail(fmt.Errorf("%w (move the file aside only if this device never uploaded with it: it records the days sent)", err))
	}
	c.List, c.Config = cfg.Keywords, cfg.Measurement
	if cfg.HelperTokens || cfg.LeaderTokens {
		if d.identity = cfg.Identity; d.identity == nil {
			if d.identity, err = keydir.EnsureIdentityKey(filepath.Join(cfg.StateDir, stateIdentity)); err != nil {
				return fail(fmt.Errorf("prio3: identity key in the device state: %w", err))
			}
		}
		tc := &tokenclient.Client{NC: nc, Identity: d.identity, Timeout: cfg.IssuerTimeout, Logger: log,
			PinFile: filepath.Join(cfg.StateDir, stateIssuerPins)}
		if cfg.HelperTokens {
			c.HelperToken = func(ctx context.Context, campaign string, day p3.Day, nonce [32]byte) ([]byte, error) {
				return tc.Prio3HelperToken(ctx, campaign, uint32(day), nonce)
			}
		}
		if cfg.LeaderTokens {
			c.LeaderToken = func(ctx context.Context, campaign string, day p3.Day, nonce [32]byte) ([]byte, error) {
				return tc.Prio3LeaderToken(ctx, campaign, uint32(day), nonce)
			}
		}
	}
	d.client = c
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(fmt.Errorf("prio3: JetStream: %w", err))
	}
	d.pub = &publish.Publisher{JS: js, Subject: protocol.RelaySubject("a"), MaxPending: cfg.MaxPending, Logger: log}
	d.tr = &Transport{Route: ingest.Route{RelayA: ra, RelayB: rb, SubjectB: protocol.RelaySubject("b")}, Leader: lk, Helper: hk, Publish: d.pub.Publish}
	log.Info("prio3 device: ready", "digest", hex.EncodeToString(sumDigest(d.settings)), "L", cfg.Measurement.Length)
	return d, nil
}

func sumDigest(s p3.Settings) []byte { d := s.Digest(); return d[:] }

// check validates cfg and fills Measurement.Length.
func (cfg *Config) check() error {
	switch {
	case cfg.StateDir == "":
		return errors.New("prio3: Config.StateDir is empty: give the device a directory for its state")
	case cfg.Conn == nil && cfg.NATS == "":
		return errors.New("prio3: no NATS: set Config.NATS to the deployment's NATS URL (or Config.Conn)")
	case !blind.ValidCampaign(cfg.Campaign):
		return fmt.Errorf("prio3: Config.Campaign %q: give the campaign's name (1-64 letters, digits, '.', '_' or '-')", cfg.Campaign)
	case cfg.Keywords == nil:
		return errors.New("prio3: Config.Keywords is nil: load the campaign's keyword list (keywords.Load)")
	case cfg.Identity != nil && len(cfg.Identity) != ed25519.PrivateKeySize:
		return errors.New("prio3: Config.Identity is not an Ed25519 private key")
	case math.IsNaN(cfg.MaxEpsilon) || math.IsInf(cfg.MaxEpsilon, 0) || cfg.MaxEpsilon < 0:
		return fmt.Errorf("prio3: Config.MaxEpsilon %v: give a finite ε > 0 (0: DefaultMaxEpsilon %g)", cfg.MaxEpsilon, DefaultMaxEpsilon)
	case math.IsNaN(cfg.MaxStatusEpsilon) || math.IsInf(cfg.MaxStatusEpsilon, 0) || cfg.MaxStatusEpsilon < 0:
		return fmt.Errorf("prio3: Config.MaxStatusEpsilon %v: give a finite ε_c > 0 (0: DefaultMaxStatusEpsilon %g)", cfg.MaxStatusEpsilon, DefaultMaxStatusEpsilon)
	case math.IsNaN(cfg.MaxStatusDelta) || !(cfg.MaxStatusDelta >= 0 && cfg.MaxStatusDelta < 0.5):
		return fmt.Errorf("prio3: Config.MaxStatusDelta %v: give a δ in (0, 0.5) (0: DefaultMaxStatusDelta %g)", cfg.MaxStatusDelta, DefaultMaxStatusDelta)
	}
	if cfg.Measurement.Length == 0 {
		cfg.Measurement.Length = cfg.Keywords.Len()
	}
	if cfg.Measurement.Length != cfg.Keywords.Len() {
		return fmt.Errorf("prio3: Config.Measurement.Length %d but Config.Keywords has %d keywords: leave Length 0", cfg.Measurement.Length, cfg.Keywords.Len())
	}
	if err := cfg.Measurement.Check(); err != nil {
		return fmt.Errorf("prio3: Config.Measurement: %w", err)
	}
	for name, fp := range cfg.Fingerprints {
		if !isKeyFile(name) {
			return fmt.Errorf("prio3: Config.Fingerprints names %q: use the key file names %v", name, KeyFiles)
		}
		if b, err := hex.DecodeString(fp); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("prio3: Config.Fingerprints[%q]: want 64 hex digits (sha256sum of the file)", name)
		}
	}
	return nil
}

func isKeyFile(name string) bool {
	for _, k := range KeyFiles {
		if k == name {
			return true
		}
	}
	return false
}

// pinKeys copies KeysDir's key files into the state's keys/ on first use,
// checks each against Fingerprints, and refuses a changed key that no
// fingerprint vouches for.
func (d *Device) pinKeys() error {
	dst := filepath.Join(d.cfg.StateDir, stateKeys)
	for _, name := range KeyFiles {
		pinned, perr := os.ReadFile(filepath.Join(dst, name))
		if perr != nil && !errors.Is(perr, os.ErrNotExist) {
			return fmt.Errorf("prio3: pinned key %s: %w", name, perr)
		}
		b := pinned
		if d.cfg.KeysDir != "" {
			var err error
			if b, err = os.ReadFile(filepath.Join(d.cfg.KeysDir, name)); err != nil {
				return fmt.Errorf("prio3: Config.KeysDir: %w (give the operators' public key files %v)", err, KeyFiles)
			}
		} else if perr != nil {
			return fmt.Errorf("prio3: no pinned %s in the device state and Config.KeysDir is empty: give KeysDir (the operators' public key files) once", name)
		}
		sum := sha256.Sum256(b)
		fp, vouched := d.cfg.Fingerprints[name]
		if vouched && hex.EncodeToString(sum[:]) != fp {
			return fmt.Errorf("%w: %s has SHA-256 %x, Config.Fingerprints[%q] says %s: get the key file from its operator again and compare out of band",
				ErrKeyFingerprint, name, sum[:], name, fp)
		}
		if perr == nil && bytes.Equal(pinned, b) {
			continue
		}
		if perr == nil && !vouched {
			old := sha256.Sum256(pinned)
			return fmt.Errorf("%w: %s in Config.KeysDir has SHA-256 %x, the pinned copy %x: if the operator rotated it, verify the new fingerprint out of band and set Config.Fingerprints[%q]",
				ErrKeyChanged, name, sum[:], old[:], name)
		}
		if perr == nil {
			d.log.Info("prio3 device: key rotated (fingerprint vouched); pinning the new one", "key", name)
		}
		if err := atomicfile.WriteFile(filepath.Join(dst, name), b, 0o600); err != nil {
			return fmt.Errorf("prio3: pin %s in the device state: %w", name, err)
		}
	}
	return nil
}

// checkSettings verifies the leader's settings (VerifySettings), checks
// them against the privacy floor (Config.CheckFloor) and pins their
// digest in the state directory.
func (d *Device) checkSettings(ctx context.Context, nc *nats.Conn, signPub ed25519.PublicKey, lk onion.PublicKey) error {
	s, err := verifySettings(ctx, nc, signPub, d.cfg, lk, d.log)
	if err != nil {
		return err
	}
	if err := d.cfg.CheckFloor(&s); err != nil {
		return err
	}
	digest := hex.EncodeToString(sumDigest(s))
	pins := filepath.Join(d.cfg.StateDir, stateSettingsPins)
	old, found, err := pinfile.Lookup(pins, d.cfg.Campaign)
	if err != nil {
		return fmt.Errorf("prio3: device state %s: %w", pins, err)
	}
	switch {
	case !found:
		if err := pinfile.Append(pins, d.cfg.Campaign, digest); err != nil {
			return fmt.Errorf("prio3: device state %s: %w", pins, err)
		}
	case old != digest:
		return fmt.Errorf("%w: campaign %s, pinned digest %s…, the leader now shows %s…: stop and compare with the operators out of band",
			ErrSettingsChanged, d.cfg.Campaign, old[:min(8, len(old))], digest[:8])
	}
	d.settings = s
	return nil
}

// VerifySettings asks the leader on nc (protocol.Prio3SettingsSubject)
// for the campaign settings of cfg.Campaign, verifies their signature
// with the leader operator's public signing key signPub, and compares
// them with cfg (Campaign, Keywords, Measurement, Digest) and the leader
// report key the client seals to (leader), and applies cfg's privacy
// floor as a Device does (Config.CheckFloor: zero floor fields take the
// defaults, so a caller whose campaign runs weaker settings on purpose
// says so in cfg). Only cfg's campaign, measurement and floor fields,
// SettingsTimeout, Retry and Logger are read. Errors: an answer that does
// not verify (wraps p3.ErrSettings), a *SettingsMismatchError naming the
// value and the Config field, a *SettingsWeakerError (ErrSettingsWeaker)
// naming the parameter, or the request's error after cfg.Retry. A
// program that drives Clients itself (a log replay: `crowdlog pdd --mode
// prio3`) calls it once before uploading.
func VerifySettings(ctx context.Context, nc *nats.Conn, signPub ed25519.PublicKey, cfg Config, leader onion.PublicKey) (p3.Settings, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Keywords == nil {
		return p3.Settings{}, errors.New("prio3: Config.Keywords is nil: load the campaign's keyword list (keywords.Load)")
	}
	if cfg.Measurement.Length == 0 {
		cfg.Measurement.Length = cfg.Keywords.Len()
	}
	s, err := verifySettings(ctx, nc, signPub, cfg, leader, log)
	if err != nil {
		return p3.Settings{}, err
	}
	if err := cfg.CheckFloor(&s); err != nil {
		return p3.Settings{}, err
	}
	return s, nil
}

func verifySettings(ctx context.Context, nc *nats.Conn, signPub ed25519.PublicKey, cfg Config, lk onion.PublicKey, log *slog.Logger) (p3.Settings, error) {
	var a *p3.SignedSettings
	timeout := cmpOr(cfg.SettingsTimeout, 10*time.Second)
	err := cfg.Retry.run(ctx, log, "asking the leader for its campaign settings", func() error {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		m, err := nc.RequestWithContext(rctx, protocol.Prio3SettingsSubject, []byte(cfg.Campaign))
		if err != nil {
			if errors.Is(err, nats.ErrNoResponders) {
				return fmt.Errorf("prio3: no leader answers on %s (is `crowdlog aggregate-prio3 --role leader` running?): %w", protocol.Prio3SettingsSubject, err)
			}
			return fmt.Errorf("prio3: the leader's campaign settings (waited %s): %w", timeout, err)
		}
		if a, err = p3.ParseSignedSettings(m.Data); err != nil {
			return backoff.Permanent(fmt.Errorf("prio3: the leader's campaign settings: %w", err))
		}
		return nil
	})
	if err != nil {
		return p3.Settings{}, err
	}
	if err := a.Verify(signPub); err != nil {
		return p3.Settings{}, fmt.Errorf("%w: the answer on %s is not the pinned leader's (%s in Config.KeysDir / Config.Fingerprints); do not upload", err, protocol.Prio3SettingsSubject, keydir.Prio3LeaderSignKey+".pub")
	}
	if err := compareSettings(&a.Settings, cfg, lk); err != nil {
		return p3.Settings{}, err
	}
	return a.Settings, nil
}

// compare names the first setting on which the leader and the Config
// disagree.
func compareSettings(s *p3.Settings, cfg Config, lk onion.PublicKey) error {
	mine := cfg.Measurement.Resolved()
	theirs := s.Measurement.Resolved()
	kind := func(k p3.Kind) string {
		switch k {
		case p3.KindSumVec:
			return "sumvec"
		case p3.KindPresence:
			return "presence"
		}
		return strconv.Itoa(int(k))
	}
	u := func(x uint64) string { return strconv.FormatUint(x, 10) }
	i := func(x int) string { return strconv.Itoa(x) }
	listHash := cfg.Keywords.Hash()
	checks := []struct {
		ok                   bool
		value, field, l, dev string
	}{
		{s.Campaign == cfg.Campaign, "campaign", "Config.Campaign", strconv.Quote(s.Campaign), strconv.Quote(cfg.Campaign)},
		{theirs.Kind == mine.Kind, "kind", "Config.Measurement.Kind", kind(theirs.Kind), kind(mine.Kind)},
		{theirs.Length == mine.Length, "L (keywords in the list)", "Config.Keywords", i(theirs.Length), i(mine.Length)},
		{s.ListHash == listHash, "keyword list hash", "Config.Keywords", hex.EncodeToString(s.ListHash[:4]) + "…", hex.EncodeToString(listHash[:4]) + "…"},
		{theirs.Bits == mine.Bits, "bits", "Config.Measurement.Bits", i(theirs.Bits), i(mine.Bits)},
		{theirs.MaxWeight == mine.MaxWeight, "max weight", "Config.Measurement.MaxWeight", i(theirs.MaxWeight), i(mine.MaxWeight)},
		{theirs.Chunk == mine.Chunk, "chunk", "Config.Measurement.Chunk", i(theirs.Chunk), i(mine.Chunk)},
		{theirs.L1 == mine.L1, "L1 bound S", "Config.Measurement.L1", u(theirs.L1), u(mine.L1)},
	}
	for _, c := range checks {
		if !c.ok {
			return &SettingsMismatchError{Value: c.value, Field: c.field, Leader: c.l, Device: c.dev}
		}
	}
	if cfg.Digest != "" {
		if got := hex.EncodeToString(sumDigest(*s)); got != cfg.Digest {
			return &SettingsMismatchError{Value: "campaign digest", Field: "Config.Digest", Leader: got, Device: cfg.Digest}
		}
	}
	mk, err := lk.Key.MarshalBinary()
	if err != nil {
		return fmt.Errorf("prio3: leader's report key: %w", err)
	}
	for _, k := range s.LeaderKeys {
		if k.ID == lk.ID && bytes.Equal(k.Key[:], mk) {
			return nil
		}
	}
	ids := make([]string, len(s.LeaderKeys))
	for i, k := range s.LeaderKeys {
		ids[i] = fmt.Sprintf("id %d %x…", k.ID, k.Key[:4])
	}
	return &SettingsMismatchError{Value: "leader report key", Field: "Config.KeysDir " + keydir.Prio3LeaderKey + ".pub",
		Leader: strings.Join(ids, ", "), Device: fmt.Sprintf("id %d %x…", lk.ID, mk[:min(4, len(mk))]),
		Hint: "get the leader operator's current public bundle, compare its fingerprint out of band (Config.Fingerprints) and give it in Config.KeysDir"}
}

// Settings returns the leader's campaign settings the device verified
// last (at New or before the last Upload).
func (d *Device) Settings() p3.Settings {
	d.smu.Lock()
	defer d.smu.Unlock()
	return d.settings
}

// Digest returns the campaign digest (p3.Settings.Digest) of the verified
// settings, lowercase hex: what Config.Digest pins.
func (d *Device) Digest() string { s := d.Settings(); return hex.EncodeToString(sumDigest(s)) }

// IdentityPublic returns the public half of the device's identity key
// (nil without HelperTokens): the key the helper's operator enrolls
// (`crowdlog keys enroll`).
func (d *Device) IdentityPublic() ed25519.PublicKey {
	if d.identity == nil {
		return nil
	}
	return d.identity.Public().(ed25519.PublicKey)
}

// Search is one search of the user: the query as typed and when.
type Search struct {
	// Query is the query as the user typed it.
	Query string
	// Time is when the user searched (any zone; the day is taken in UTC).
	Time time.Time
}

// UploadSearches uploads the report of day (UTC) from the user's
// searches: each search of that day counts once for each monitored
// keyword among its normalized tokens (keywords.List.Counts; Blacklist
// applied); searches of other days are ignored. See Upload.
func (d *Device) UploadSearches(ctx context.Context, day keywords.Day, searches []Search) (Sent, error) {
	recs := make([]aol.Record, 0, len(searches))
	for i, s := range searches {
		recs = append(recs, aol.Record{Line: i + 1, AnonID: "device", Query: s.Query, QueryTime: s.Time.UTC()})
	}
	return d.Upload(ctx, day, d.cfg.Keywords.Counts(recs, d.cfg.Blacklist)[day])
}

// Upload uploads the report of day with the keyword counts counts (index
// = position in Config.Keywords; nil: an all-zero report, which still says
// the device was active), once: a second Upload of a day fails with
// ErrAlreadySent. Before it seals, it asks the leader for its settings
// again (one request, Config.SettingsTimeout): a verified announcement
// weaker than the floor is refused with ErrSettingsWeaker, one that no
// longer agrees with the Config with ErrSettingsMismatch (nothing sealed
// or sent; Stats counts both); no answer, or one that does not verify,
// leaves the settings verified last in force. A failure that may pass
// (issuer, NATS, JetStream) is retried under Config.Retry with the same
// report (Client.Upload); it returns once JetStream has stored the upload
// at relay a.
func (d *Device) Upload(ctx context.Context, day keywords.Day, counts keywords.Sparse) (Sent, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.recheck(ctx); err != nil {
		return Sent{}, err
	}
	if d.client.Counts == nil {
		d.client.Counts = map[keywords.Day]keywords.Sparse{}
	}
	d.client.Counts[day] = counts
	var s Sent
	err := d.cfg.Retry.run(ctx, d.log, "upload of "+day.String(), func() error {
		var err error
		if s, err = d.client.Upload(ctx, d.tr, d.vdaf, day); err != nil {
			if permanentUpload(err) {
				return backoff.Permanent(err)
			}
			return err
		}
		if err := d.pub.Flush(ctx); err != nil {
			return backoff.Permanent(fmt.Errorf("prio3: relay a did not store the upload of %s: %w", day, err))
		}
		return nil
	})
	if err == nil {
		d.count(func(st *Stats) { st.Uploaded++ })
	}
	return s, err
}

// recheck asks the leader for its settings once more before an upload:
// refused (and counted) when a verified answer disagrees with the Config
// or is weaker than the floor; an unanswered or unverified request keeps
// the settings verified last.
func (d *Device) recheck(ctx context.Context) error {
	cfg := d.cfg
	cfg.Retry = Retry{MaxTries: 1}
	s, err := verifySettings(ctx, d.conn, d.signPub, cfg, d.leaderPK, d.log)
	if err == nil {
		err = d.cfg.CheckFloor(&s)
	}
	switch {
	case err == nil:
		d.smu.Lock()
		d.settings = s
		d.smu.Unlock()
		return nil
	case errors.Is(err, ErrSettingsWeaker):
		d.count(func(st *Stats) { st.SettingsWeaker++ })
	case errors.Is(err, ErrSettingsMismatch):
		d.count(func(st *Stats) { st.SettingsChanged++ })
	default:
		d.count(func(st *Stats) { st.SettingsUnverified++ })
		d.log.Warn("prio3 device: the leader's settings not verified again; uploading under those verified last", "err", err)
		return nil
	}
	d.log.Error("prio3 device: upload refused: the leader's announcement changed", "err", err)
	return err
}

func (d *Device) count(f func(*Stats)) {
	d.smu.Lock()
	defer d.smu.Unlock()
	f(&d.stats)
}

// Stats returns a copy of the device's counters.
func (d *Device) Stats() Stats {
	d.smu.Lock()
	defer d.smu.Unlock()
	return d.stats
}

// permanentUpload reports whether an upload error cannot pass by retrying.
func permanentUpload(err error) bool {
	return errors.Is(err, ErrAlreadySent) || errors.Is(err, p3.ErrConfig) || errors.Is(err, tokenclient.ErrBudget) ||
		errors.Is(err, tokenclient.ErrNotEnrolled) || errors.Is(err, tokenclient.ErrKeyChanged) || errors.Is(err, token.ErrBudget)
}

// Close waits (bounded by ctx) for uploads JetStream has not acknowledged,
// closes the connection New opened and releases the state directory.
func (d *Device) Close(ctx context.Context) error {
	var err error
	if d.pub != nil {
		err = d.pub.Close(ctx)
	}
	d.release()
	return err
}

func (d *Device) release() {
	if d.nc != nil {
		d.nc.Close()
		d.nc = nil
	}
	if d.lock != nil {
		_ = d.lock.Unlock()
		d.lock = nil
	}
}

// EnsureIdentity creates (or keeps) the identity key of the device whose
// state directory is dir — StateDir/identity.key, Ed25519 PKCS #8 PEM,
// mode 0600 — and returns the path of its public half (identity.key.pub),
// the file the helper's operator enrolls (`crowdlog keys enroll --keys
// HELPER-KEYS FILE`) before the device's first upload with HelperTokens.
// It needs no network.
func EnsureIdentity(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("prio3: device state %s: %w", dir, err)
	}
	path := filepath.Join(dir, stateIdentity)
	if _, err := keydir.EnsureIdentityKey(path); err != nil {
		return "", fmt.Errorf("prio3: identity key: %w", err)
	}
	return path + ".pub", nil
}
