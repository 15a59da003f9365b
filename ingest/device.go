package ingest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gofrs/flock"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// ErrRandomnessKeyChanged is returned by Device.Submit when the randomness
// service shows another VOPRF public key for the epoch than the one the
// device pinned in its state (randomness.pins) on first use.
var ErrRandomnessKeyChanged = errors.New("the epoch's randomness (VOPRF) public key changed since this device pinned it")

// Config configures a Device (New). Zero fields take the defaults given.
type Config struct {
	// StateDir is the device's state directory (created 0700 when
	// missing): one user secret per epoch, the route's public keys, the
	// pinned VOPRF key of each epoch and the record of what was sent
	// (layout in state.go). Required unless Memory. One process at a time.
	StateDir string
	// Memory keeps the state in memory instead: a restarted device is a
	// new user (FT_u counts it again). For log replays and tests.
	Memory bool

	// NATS is the deployment's NATS URL, or comma-separated URLs of a
	// cluster; New connects and Close disconnects. Conn, when set, is used
	// instead and left open by Close.
	NATS string
	Conn *nats.Conn
	// NATSSecurity is the client's NATS credential (the clients' shared
	// NKey seed) and TLS files; the zero value: neither.
	NATSSecurity NATSSecurity

	// Randomness evaluates ω for the epoch's artifacts and verifies the
	// service's proofs. When nil, NewRandomness is called with the device's
	// NATS connection; when both are nil, the device uses an
	// oprfclient.Client on that connection (the usual choice).
	Randomness    Randomness
	NewRandomness func(nc *nats.Conn) Randomness

	// KeysDir holds the route's public keys (relay-a.key.pub,
	// relay-b.key.pub, aggregator.key.pub, `crowdlog keys generate`)
	// and, with App, the aggregator operator's aggregator-sign.key.pub
	// (AggregatorSignKeyFile, pinned in StateDir/keys).
	// New copies them into StateDir/keys; later runs may leave KeysDir
	// empty and use the copy. New keys in KeysDir (a rotation) replace the
	// copy once the relays hold them.
	KeysDir string
	// Fingerprints are the operators' published fingerprints of public
	// key files: file name (relay-a.key.pub, relay-b.key.pub,
	// aggregator.key.pub, aggregator-sign.key.pub) → lowercase hex
	// SHA-256 of the file's bytes (what `sha256sum FILE` prints). Get them
	// out of band (the deployment's web page, the operators' signed
	// release notes) and compile them into the app: a key file in KeysDir
	// whose SHA-256 differs is refused (ErrKeyFingerprint), and a vouched
	// aggregator-sign.key.pub replaces the pinned one (a rotation). Empty:
	// trust on first use (StateDir/keys).
	Fingerprints map[string]string
	// SkipRouteCheck skips asking relays a and b whether they hold the
	// route's key ids (CheckRelayKeys) in New. RelayKeys, when set,
	// replaces the NATS request for each relay's announcement.
	SkipRouteCheck bool
	RelayKeys      RelayKeysFunc

	// Epoch is the epoch the device sends in: 1–64 of [A-Za-z0-9._-],
	// opened by the operator at the randomness service and the aggregator.
	// A device sends in one epoch; New another for the next (same
	// StateDir).
	Epoch string
	// Policy is the threshold policy reports are sealed for (star.FTu,
	// the default, or star.FTa; the DP policies seal as one of these, see
	// release/policy Sealing) and K its Shamir threshold (required, 1..
	// vss.MaxK). The release must use the same.
	Policy star.Policy
	K      int
	// Pipelines are the digests of the pipeline definitions the device
	// seals for, by application name (Client.Pipeline;
	// pipelines/pipeline.Digest): the aggregator and the release stage
	// refuse reports of any other definition. An application without one
	// seals without a digest.
	Pipelines map[string][32]byte
	// App, when set, is the application the device sends (apps.Apps(),
	// e.g. apps.QueryAppName): New asks the aggregators which pipelines
	// they serve (protocol.PipelineSubject; `crowdlog aggregate --nats`),
	// keeps only the answers signed by the aggregator operator's key for
	// this request (pipelinespec.SignedAnswer over a fresh nonce, under
	// aggregator-sign.key.pub from KeysDir, pinned in StateDir/keys on
	// first use or vouched by Fingerprints; none: ErrAnnouncementSignature,
	// or ErrAnnouncementStale when only answers signed for other requests
	// came: replays), and fails with ErrPipelineMismatch, naming the value and the field
	// to set, unless exactly one pipeline of App agrees with K, Policy,
	// AppOptions and, when given, Pipelines[App]; the device then seals
	// App's reports for that pipeline's digest, and Downstream counts
	// them. Aggregators that serve every definition (no --pipeline) are
	// not checked against (logged). "": nothing is checked, and reports
	// an aggregator does not serve are dropped there without a word here.
	App string
	// PipelineWait bounds how long New and Downstream wait for the
	// aggregators' answers; 0 = DefaultPipelineWait (10 s).
	PipelineWait time.Duration
	// Limit and LimitDistinct cap what the device sends per epoch and
	// application: at most Limit artifact instances, or with
	// LimitDistinct at most Limit distinct artifacts, one report each
	// (DP policies, release/policy Limit). 0 = no cap.
	Limit         int
	LimitDistinct bool
	// Window is dp-su's candidate window (Client.Window, release/policy
	// Window): the Limit artifacts are the most frequent of the Window most
	// recent distinct ones among what this Submit has not sent yet. 0 = the
	// Limit most recent.
	Window int
	// Pad makes the device send exactly Limit reports per epoch and
	// application (Client.Pad, dp-gsu): its first Submit of the epoch pads
	// with dummy artifacts, later ones send nothing.
	Pad bool
	// NoOriginal seals no original form (Client.NoOriginal): set it for a
	// DP policy, whose release publishes the normalized item only.
	NoOriginal bool
	// AppOptions configure the applications Submit names (apps.LookupWith).
	AppOptions apps.Options
	// Spread is the window over which one Submit's reports leave
	// (Client.Spread); 0 sends them back to back.
	Spread time.Duration
	// MaxPending bounds the reports accepted but not yet stored by
	// JetStream (publish.Publisher.MaxPending); 0 means 4096.
	MaxPending int

	// Tokens turns on Privacy Pass tokens, which a deployment
	// with an issuer requires: the device fetches, with its identity key,
	// one randomness token per OPRF element and one report token per
	// report (bound to the report), and under FT_u one ARC credential per
	// epoch (kept in StateDir) whose presentation per artifact decides the
	// share's x, so this device counts once per artifact whatever its
	// secrets. When the identity's budget of the epoch is spent, Submit
	// fails with an error wrapping tokenclient.ErrBudget; nothing is sent.
	Tokens bool
	// Identity is the device's Ed25519 identity key, enrolled at the
	// issuer (`crowdlog keys enroll`). nil: the key in StateDir/identity.key,
	// created on first use (required with Memory and Tokens).
	Identity ed25519.PrivateKey
	// Issuer, when set, replaces the issuer client New builds
	// (a tokenclient.Client on the device's connection, signing with
	// Identity).
	Issuer Issuer
	// IssuerTimeout bounds each issuer request (tokenclient.Client.Timeout);
	// 0 = tokenclient's default. A request and its re-sends (no issuer
	// subscribed, the issuer temporarily unavailable, a timeout) take at
	// most tokenclient.IssueAttempts × IssuerTimeout (90 s by default).
	IssuerTimeout time.Duration
	// RandomnessRetryFor bounds how long a randomness request that timed
	// out or found no responder is re-sent with backoff
	// (oprfclient.Client.RetryFor): 0 = oprfclient.DefaultRetryFor (5
	// minutes), negative = never (one try). Used only when the device
	// builds its own oprfclient.Client (Randomness and NewRandomness nil).
	RandomnessRetryFor time.Duration

	// Logger receives the device's logs (no artifacts, secrets or keys);
	// nil: slog.Default().
	Logger *slog.Logger
}

// Device is one client device, as in CrowdLogging §3 a user's machine: it
// seals the artifacts it is given (STAR, CCS 2022 §4), wraps them in three
// onion layers and publishes them to relay a with flow control
// (ingest/publish), and keeps per-device state so that it never sends an
// artifact instance of an epoch twice, across restarts too: its user
// secret of the epoch (FT_u's share x = HashToScalar(secret ‖ tag), so a
// new secret would count the device twice) and the record of sent
// instances live in Config.StateDir, fsync'd before any report leaves.
//
// A Device is safe for concurrent use: Submits choose, seal and record
// one at a time (about 2,400 artifacts/s on one core, BenchmarkDeviceSubmit),
// then publish concurrently; a program sending for many users uses one
// Device per user, as Replay does, to use more cores.
type Device struct {
	epoch  string
	policy star.Policy
	k      int
	st     store
	log    *slog.Logger

	// newClient builds the sealer of an application (nil: only the
	// clients given).
	newClient func(app string) (*Client, error)
	// pinKey checks and pins the epoch's VOPRF key once (nil: not pinned
	// by the device).
	pinKey func(ctx context.Context) error

	mu      sync.Mutex // serializes Submit
	clients map[string]*Client
	pinned  bool
	id      *identity // tokens on; nil = off

	pub *publish.Publisher // owned
	nc  *nats.Conn         // owned
	// conn is the connection Downstream asks on (owned or given; nil for
	// a replay's device), pipelines the digests sealed for by app, wait
	// Config.PipelineWait.
	conn      *nats.Conn
	pipelines map[string][32]byte
	wait      time.Duration
	signPub   ed25519.PublicKey // the pinned aggregator signing key (Config.App); nil: answers unverified
	lock      *flock.Flock      // the state directory's lock, held until Close
}

// keyPinner is the optional part of Randomness that lets a device pin the
// epoch's public key (satisfied by *oprfclient.Client).
type keyPinner interface {
	PublicKey(ctx context.Context, epoch string) ([]byte, error)
}

// New opens a device: its state (created on first use), the route's keys,
// a NATS connection and a publisher to relay a. Unless SkipRouteCheck, it
// asks relays a and b whether they hold the route's key ids and fails with
// ErrRelayKeyUnknown when one does not. Errors say which field to fix.
func New(ctx context.Context, cfg Config) (*Device, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Policy == 0 {
		cfg.Policy = star.FTu
	}
	if err := checkContext(cfg.Epoch, cfg.Policy, cfg.K); err != nil {
		return nil, err
	}
	var st store
	var lock *flock.Flock
	switch {
	case cfg.Memory:
		st = newMemStore()
	case cfg.StateDir == "":
		return nil, errors.New("ingest: Config.StateDir is empty: give the device a directory for its state (or Memory for a replay)")
	default:
		ds, err := openDiskStore(cfg.StateDir)
		if err != nil {
			return nil, err
		}
		st = ds
		// one process at a time per state directory: two devices on one
		// state would each send what the other already sent
		if lock, err = lockStateDir(cfg.StateDir); err != nil {
			return nil, err
		}
	}
	if err := checkFingerprintNames(cfg.Fingerprints); err != nil {
		unlockStateDir(lock)
		return nil, err
	}
	route, err := loadRoute(cfg, log)
	if err != nil {
		unlockStateDir(lock)
		return nil, err
	}
	d := &Device{epoch: cfg.Epoch, policy: cfg.Policy, k: cfg.K, st: st, log: log, clients: map[string]*Client{}, lock: lock}
	fail := func(err error) (*Device, error) {
		d.closeConn()
		return nil, err
	}
	nc := cfg.Conn
	if nc == nil {
		if cfg.NATS == "" {
			return fail(errors.New("ingest: no NATS: set Config.NATS to the deployment's NATS URL (or Config.Conn)"))
		}
		if nc, err = natsconn.ConnectAs(cfg.NATS, "crowdlog-client", cfg.NATSSecurity.security()); err != nil {
			return fail(fmt.Errorf("ingest: connect to NATS %s: %w (is the deployment's NATS reachable?)", cfg.NATS, err))
		}
		d.nc = nc
	}
	d.conn, d.wait, d.pipelines = nc, cfg.PipelineWait, map[string][32]byte{}
	for app, dg := range cfg.Pipelines {
		d.pipelines[app] = dg
	}
	if cfg.App != "" {
		if d.signPub, err = pinSignKey(cfg, log); err != nil {
			return fail(err)
		}
		dg, err := verifyPipeline(ctx, nc, cfg, d.signPub, log)
		if err != nil {
			return fail(err)
		}
		d.pipelines[cfg.App] = dg
	}
	var iss Issuer
	if cfg.Tokens {
		if iss, err = deviceIssuer(cfg, nc, log); err != nil {
			return fail(err)
		}
	}
	rnd := cfg.Randomness
	if rnd == nil && cfg.NewRandomness != nil {
		rnd = cfg.NewRandomness(nc)
	}
	if rnd == nil {
		oc := &oprfclient.Client{NC: nc, RetryFor: cfg.RandomnessRetryFor}
		if iss != nil {
			oc.Tokens = IssuerTokens{iss}
		}
		rnd = oc
	}
	if !cfg.SkipRouteCheck {
		fetch := cfg.RelayKeys
		if fetch == nil {
			fetch = NATSRelayKeys(nc)
		}
		if err := CheckRelayKeys(ctx, fetch, []RelayHop{{Name: "a", Key: route.RelayA}, {Name: "b", Key: route.RelayB}}, log); err != nil {
			return fail(err)
		}
	}
	if !cfg.Memory && cfg.KeysDir != "" {
		// pin the keys the relays were just asked about
		if err := pinRoute(cfg.KeysDir, filepath.Join(cfg.StateDir, stateKeys), log); err != nil {
			return fail(err)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(fmt.Errorf("ingest: JetStream: %w", err))
	}
	d.pub = &publish.Publisher{JS: js, Subject: protocol.RelaySubject("a"), MaxPending: cfg.MaxPending, Logger: log}
	if kp, ok := rnd.(keyPinner); ok && !cfg.Memory {
		d.pinKey = func(ctx context.Context) error { return pinRandomnessKey(ctx, kp, st, cfg.Epoch) }
	}
	d.newClient = func(name string) (*Client, error) {
		a, err := apps.LookupWith(name, cfg.AppOptions)
		if err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
		return &Client{App: a, Epoch: cfg.Epoch, Policy: cfg.Policy, K: cfg.K, Pipeline: d.pipelines[name], Randomness: rnd, Route: route,
			Publish: d.pub.Publish, Limit: cfg.Limit, LimitDistinct: cfg.LimitDistinct, Window: cfg.Window, Pad: cfg.Pad, NoOriginal: cfg.NoOriginal, Spread: cfg.Spread}, nil
	}
	if iss != nil {
		d.id = &identity{issuer: iss, st: st, epoch: cfg.Epoch} // rnd spends its randomness tokens
	}
	return d, nil
}

// deviceIssuer is the issuer client of a device with tokens on:
// cfg.Issuer, or a tokenclient.Client on nc signing with the identity key
// (cfg.Identity, or the one in the state directory).
func deviceIssuer(cfg Config, nc *nats.Conn, log *slog.Logger) (Issuer, error) {
	if cfg.Issuer != nil {
		return cfg.Issuer, nil
	}
	key := cfg.Identity
	if key == nil {
		if cfg.Memory {
			return nil, errors.New("ingest: Config.Tokens with Memory needs Config.Identity (the enrolled Ed25519 identity key) or Config.Issuer")
		}
		var err error
		if key, err = keydir.EnsureIdentityKey(filepath.Join(cfg.StateDir, stateIdentity)); err != nil {
			return nil, fmt.Errorf("ingest: identity key in the device state: %w", err)
		}
	}
	c := &tokenclient.Client{NC: nc, Identity: key, Timeout: cfg.IssuerTimeout, Logger: log}
	if !cfg.Memory {
		c.PinFile = filepath.Join(cfg.StateDir, stateIssuerPins) // the issuer's keys, pinned across restarts
	}
	return c, nil
}

// newClientDevice is a device in front of one existing Client (a replay's
// user): state st, no connection of its own, tokens off.
func newClientDevice(c *Client, st store) *Device {
	return &Device{epoch: c.Epoch, policy: c.Policy, k: c.K, st: st, log: slog.Default(),
		clients: map[string]*Client{c.App.Name(): c}}
}

// newTokenDevice is newClientDevice with tokens on: the user's identity
// at the issuer is iss (nil: tokens off).
func newTokenDevice(c *Client, st store, iss Issuer) *Device {
	d := newClientDevice(c, st)
	if iss != nil {
		d.id = newIdentity(c, iss, st)
	}
	return d
}

func checkContext(epoch string, pol star.Policy, k int) error {
	if !epochName.MatchString(epoch) {
		return fmt.Errorf("ingest: Config.Epoch %q: use 1-64 letters, digits, '.', '_' or '-' (the epoch the operator opened)", epoch)
	}
	if pol != star.FTu && pol != star.FTa {
		return fmt.Errorf("ingest: Config.Policy %s: use star.FTu or star.FTa (DP policies seal as one of them, see release/policy)", pol)
	}
	if k < 1 || k > vss.MaxK {
		return fmt.Errorf("ingest: Config.K %d outside 1..%d: use the k the release uses", k, vss.MaxK)
	}
	return nil
}

// loadRoute reads the route from cfg.KeysDir, or from the copy in the
// state when no KeysDir is given.
func loadRoute(cfg Config, log *slog.Logger) (Route, error) {
	dir := cfg.KeysDir
	if dir == "" {
		if cfg.Memory {
			return Route{}, errors.New("ingest: Config.KeysDir is empty: give the directory with relay-a.key.pub, relay-b.key.pub and aggregator.key.pub")
		}
		dir = filepath.Join(cfg.StateDir, stateKeys)
		if _, err := os.Stat(filepath.Join(dir, keydir.RelayAKey+".pub")); err != nil {
			return Route{}, fmt.Errorf("ingest: no route keys in the device state %s and Config.KeysDir is empty: give KeysDir (relay-a.key.pub, relay-b.key.pub, aggregator.key.pub) once", dir)
		}
	}
	if err := checkRouteFingerprints(dir, cfg.Fingerprints); err != nil {
		return Route{}, err
	}
	a, b, ag, err := loadRouteKeys(dir)
	if err != nil {
		return Route{}, fmt.Errorf("ingest: route keys: %w (give Config.KeysDir the deployment's public keys relay-a.key.pub, relay-b.key.pub, aggregator.key.pub, fetched from its operators and checked against their fingerprints)", err)
	}
	return Route{RelayA: a, RelayB: b, Aggregator: ag, SubjectB: protocol.RelaySubject("b")}, nil
}

// pinRoute copies the route's public key files from src into the state's
// dst when they differ (first use, or a rotation).
func pinRoute(src, dst string, log *slog.Logger) error {
	for _, name := range []string{keydir.RelayAKey, keydir.RelayBKey, keydir.AggregatorKey} {
		b, err := os.ReadFile(filepath.Join(src, name+".pub"))
		if err != nil {
			return fmt.Errorf("ingest: route keys: %w", err)
		}
		old, err := os.ReadFile(filepath.Join(dst, name+".pub"))
		if err == nil && bytes.Equal(old, b) {
			continue
		}
		if err == nil {
			log.Info("device: route key changed (rotation); pinning the new one", "key", name+".pub")
		}
		if err := writeFileSync(filepath.Join(dst, name+".pub"), b); err != nil {
			return fmt.Errorf("ingest: pin route key in the device state: %w", err)
		}
	}
	return nil
}

// pinRandomnessKey asks the service for epoch's VOPRF public key and
// compares it with the device's pin, pinning it on first use.
func pinRandomnessKey(ctx context.Context, kp keyPinner, st store, epoch string) error {
	key, err := kp.PublicKey(ctx, epoch)
	if err != nil {
		return fmt.Errorf("ingest: randomness public key of epoch %s: %w", epoch, err)
	}
	pinned, err := st.pin(epoch)
	if err != nil {
		return err
	}
	if pinned == nil {
		return st.setPin(epoch, key)
	}
	if !bytes.Equal(pinned, key) {
		return fmt.Errorf("%w: epoch %s, pinned %x…, service now shows %x…: stop and compare the key with other clients out of band (a service showing different keys can link reports)",
			ErrRandomnessKeyChanged, epoch, pinned[:min(4, len(pinned))], key[:min(4, len(key))])
	}
	return nil
}

// Submit seals and publishes artifacts of application app (a name of
// apps.Apps(), e.g. "query"; Artifact.Primary as that application mines it)
// in the device's epoch, and returns how many reports it published.
//
// Each artifact is one instance (one impression). An instance is
// identified by (Primary, Secondary, Time) and its occurrence among equal
// ones in the call: Submit skips the instances this device already sent in
// the epoch, so submitting the same artifacts again — after a restart
// too — adds nothing (FT_u count unchanged); to count a repeat, give it
// its own Time. Config.Limit caps the epoch's total.
//
// The instances are recorded (fsync'd) after ω is obtained and before
// any report is published: a crash or ctx ending after that loses the
// unpublished ones rather than ever sending one twice. Publishing waits
// when the relays fall behind; Flush or Close waits until JetStream has
// stored every report. Errors: the randomness service's (epoch not open or
// closed, failed proof, ErrRandomnessKeyChanged), the issuer's with
// Config.Tokens (errors.Is tokenclient.ErrBudget: the identity's budget of
// the epoch is spent, nothing of the call was sent; ErrNotEnrolled; an
// issuer away for longer than IssuerTimeout's bound: nats.ErrNoResponders
// or tokenclient.ErrUnavailable, nothing of the call sent or recorded, so
// a later Submit of the same artifacts sends them), an unknown app, the
// state directory's, ctx's.
func (d *Device) Submit(ctx context.Context, app string, arts ...apps.Artifact) (int, error) {
	c, onions, err := d.prepare(ctx, app, arts)
	if err != nil || len(onions) == 0 {
		return 0, err
	}
	// recorded: other Submits may go on while these reports are spread
	return c.send(ctx, onions)
}

// prepare is Submit up to publishing, under the device's lock: it picks the
// instances not sent yet, seals them and records them.
func (d *Device) prepare(ctx context.Context, app string, arts []apps.Artifact) (*Client, [][]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.clients[app]
	if c == nil {
		if d.newClient == nil {
			return nil, nil, fmt.Errorf("ingest: this device sends application %q only, not %q", d.only(), app)
		}
		var err error
		if c, err = d.newClient(app); err != nil {
			return nil, nil, err
		}
		d.clients[app] = c
	}
	if len(arts) == 0 && !c.Pad {
		return nil, nil, nil
	}
	if d.pinKey != nil && !d.pinned {
		if err := d.pinKey(ctx); err != nil {
			return nil, nil, err
		}
		d.pinned = true
	}
	secret, err := d.st.secret(d.epoch)
	if err != nil {
		return nil, nil, err
	}
	key := sendKey{App: c.App.Name(), Epoch: d.epoch, Policy: d.policy, K: d.k}
	rec, err := d.st.sent(key)
	if err != nil {
		return nil, nil, err
	}
	ids := instanceIDs(secret, key, arts)
	var fresh []int
	for i := range arts {
		if rec.instances[ids[i]] > 0 {
			continue
		}
		if c.LimitDistinct && rec.primaries[primaryID(secret, key, arts[i].Primary)] {
			continue // one report per distinct artifact, sent before
		}
		fresh = append(fresh, i)
	}
	pad := 0
	if c.Limit > 0 {
		room := c.Limit - rec.total
		if c.LimitDistinct {
			room = c.Limit - len(rec.primaries)
		}
		sub := make([]apps.Artifact, len(fresh))
		for j, i := range fresh {
			sub[j] = arts[i]
		}
		var keep []int
		if c.Window > 0 {
			keep = frequentIndex(sub, room, c.Window)
		} else {
			keep = limitIndex(sub, room, c.LimitDistinct)
		}
		for j, i := range keep {
			keep[j] = fresh[i]
		}
		fresh = keep
		if c.Pad && c.LimitDistinct && room > len(fresh) {
			pad = room - len(fresh) // dp-gsu: the epoch's m reports, in this Submit
		}
	}
	if len(fresh) == 0 && pad == 0 {
		return nil, nil, nil
	}
	send := make([]apps.Artifact, len(fresh))
	inst := make([][16]byte, len(fresh))
	prim := make([][16]byte, 0, len(fresh))
	seenPrim := map[[16]byte]bool{}
	for j, i := range fresh {
		send[j], inst[j] = arts[i], ids[i]
		if p := primaryID(secret, key, arts[i].Primary); !seenPrim[p] && !rec.primaries[p] {
			seenPrim[p] = true
			prim = append(prim, p)
		}
	}
	if pad > 0 {
		dummies := DummyArtifacts(send, pad)
		send = append(send, dummies...)
		inst = append(inst, instanceIDs(secret, key, dummies)...)
		for _, a := range dummies {
			prim = append(prim, primaryID(secret, key, a.Primary))
		}
	}
	onions, err := c.seal(ctx, &user{secret: secret, id: d.id}, send)
	if err != nil {
		return nil, nil, err
	}
	if err := d.st.record(key, inst, prim); err != nil {
		return nil, nil, err
	}
	return c, onions, nil
}

func (d *Device) only() string {
	for name := range d.clients {
		return name
	}
	return ""
}

// Flush waits until JetStream has stored every report published so far
// (publish.Publisher.Flush), or ctx ends.
func (d *Device) Flush(ctx context.Context) error {
	if d.pub == nil {
		return nil
	}
	if err := d.pub.Flush(ctx); err != nil {
		return fmt.Errorf("ingest: reports not yet stored by relay a's inbox: %w (call Flush or Close again while NATS is up)", err)
	}
	return nil
}

// Close flushes (Flush), stops the publisher and closes the NATS
// connection New opened. Reports still unacknowledged when ctx ends are
// abandoned (the error says how many); they are recorded as sent.
func (d *Device) Close(ctx context.Context) error {
	var err error
	if d.pub != nil {
		if err = d.pub.Close(ctx); err != nil {
			err = fmt.Errorf("ingest: close: %w", err)
		}
	}
	d.closeConn()
	return err
}

func (d *Device) closeConn() {
	if d.nc != nil {
		d.nc.Close()
		d.nc = nil
	}
	unlockStateDir(d.lock)
	d.lock = nil
}
