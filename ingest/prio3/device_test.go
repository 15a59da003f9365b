package prio3

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// deviceWorld is an embedded NATS server, the operators' key files (the
// public ones in pub) and an answer on protocol.Prio3SettingsSubject
// signed with the leader's real signing key (the leader service's own
// answer is run by tests/TestPrio3Device; here the settings vary).
type deviceWorld struct {
	url, pub, leaderDir string
	list                *keywords.List
	settings            atomic.Pointer[p3.Settings]
	requests            atomic.Int64
}

func newDeviceWorld(t *testing.T) *deviceWorld {
	t.Helper()
	dir := t.TempDir()
	ns, err := natsserver.Start(context.Background(), filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	w := &deviceWorld{url: ns.URL, pub: filepath.Join(dir, "pub"), leaderDir: filepath.Join(dir, "leader")}
	relays, helper := filepath.Join(dir, "relays"), filepath.Join(dir, "helper")
	for _, err := range []error{keydir.EnsureKeys(relays), keydir.GenerateRole(w.leaderDir, keydir.RolePrio3Leader),
		keydir.GenerateRole(helper, keydir.RolePrio3Helper), os.MkdirAll(w.pub, 0o755)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for name, src := range map[string]string{keydir.RelayAKey: relays, keydir.RelayBKey: relays, keydir.Prio3LeaderKey: w.leaderDir,
		keydir.Prio3HelperKey: helper, keydir.Prio3LeaderSignKey: w.leaderDir} {
		b, err := os.ReadFile(filepath.Join(src, name+".pub"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(w.pub, name+".pub"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w.list, err = keywords.Parse(strings.NewReader("weather\nnews\nrecipe\n"))
	if err != nil {
		t.Fatal(err)
	}
	kps, err := keydir.LoadKeyPairs([]string{filepath.Join(w.leaderDir, keydir.Prio3LeaderKey)})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := kps[0].Public.MarshalBinary()
	lk := p3.LeaderKey{ID: kps[0].ID}
	copy(lk.Key[:], raw)
	w.settings.Store(&p3.Settings{Campaign: "c1", Measurement: p3.Config{Kind: p3.KindSumVec, Length: 3, Bits: 4, L1: 20},
		ListHash: w.list.Hash(), MinBatchSize: 10, Epsilon: 1, LeaderKeys: []p3.LeaderKey{lk},
		StatusEpsilon: 0.1, StatusDelta: p3.DefaultStatusDelta})
	sign, err := keydir.LoadSigningKey(filepath.Join(w.leaderDir, keydir.Prio3LeaderSignKey))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natsconn.Connect(ns.URL, "leader-settings")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe(protocol.Prio3SettingsSubject, func(m *nats.Msg) {
		w.requests.Add(1)
		b, err := p3.SignSettings(sign, w.settings.Load())
		if err == nil {
			_ = m.Respond(b)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return w
}

// config is a device configuration that agrees with the world's settings.
func (w *deviceWorld) config(t *testing.T, state string) Config {
	return Config{StateDir: state, NATS: w.url, KeysDir: w.pub, SkipRouteCheck: true, Campaign: "c1", Keywords: w.list,
		Measurement: p3.Config{Kind: p3.KindSumVec, Bits: 4, L1: 20}, Retry: Retry{MaxTries: 1}}
}

// TestDeviceSettings: a device whose settings agree with the leader's
// opens, pins the settings' digest and reports it; each disagreeing value
// is refused with an error naming the value and the Config field; a
// leader that later announces other settings is refused
// (ErrSettingsChanged).
func TestDeviceSettings(t *testing.T) {
	w := newDeviceWorld(t)
	ctx := context.Background()
	other, _ := keywords.Parse(strings.NewReader("weather\nnews\njazz\n"))
	cases := []struct {
		name, value, field string
		mod                func(*Config)
	}{
		{"campaign", "campaign", "Config.Campaign", func(c *Config) { c.Campaign = "c2" }},
		{"kind", "kind", "Config.Measurement.Kind", func(c *Config) { c.Measurement = p3.Config{Kind: p3.KindPresence, MaxWeight: 2} }},
		{"bits", "bits", "Config.Measurement.Bits", func(c *Config) { c.Measurement.Bits = 3 }},
		{"chunk", "chunk", "Config.Measurement.Chunk", func(c *Config) { c.Measurement.Chunk = 1 }},
		{"l1", "L1 bound S", "Config.Measurement.L1", func(c *Config) { c.Measurement.L1 = 0 }},
		{"list", "keyword list hash", "Config.Keywords", func(c *Config) { c.Keywords = other }},
		{"digest", "campaign digest", "Config.Digest", func(c *Config) { c.Digest = strings.Repeat("ab", 32) }},
	}
	for _, c := range cases {
		cfg := w.config(t, t.TempDir())
		c.mod(&cfg)
		d, err := New(ctx, cfg)
		var me *SettingsMismatchError
		if err == nil {
			d.Close(ctx)
			t.Fatalf("%s: the device opened", c.name)
		}
		if !errors.Is(err, ErrSettingsMismatch) || !errors.As(err, &me) || me.Value != c.value || me.Field != c.field ||
			!strings.Contains(err.Error(), c.field) {
			t.Fatalf("%s: %v, want a mismatch on %s naming %s", c.name, err, c.value, c.field)
		}
	}
	state := t.TempDir()
	cfg := w.config(t, state)
	st := *w.settings.Load()
	cfg.Digest = hex.EncodeToString(sumDigest(st))
	d, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d.Digest() != cfg.Digest || d.Settings().MinBatchSize != 10 {
		t.Fatalf("digest %s, settings %+v", d.Digest(), d.Settings())
	}
	// a second process on the same state directory is refused
	if _, err := New(ctx, cfg); !errors.Is(err, ingest.ErrStateInUse) {
		t.Fatalf("second device on one state directory: %v", err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// the leader now runs with S = 15, and the device is told the same:
	// the pinned digest differs
	st.Measurement.L1 = 15
	w.settings.Store(&st)
	cfg.Measurement.L1, cfg.Digest = 15, ""
	if _, err := New(ctx, cfg); !errors.Is(err, ErrSettingsChanged) {
		t.Fatalf("settings changed after pinning: %v, want ErrSettingsChanged", err)
	}
}

// TestDeviceSettingsSignature: an answer not signed by the pinned leader
// signing key is refused before anything is compared.
func TestDeviceSettingsSignature(t *testing.T) {
	w := newDeviceWorld(t)
	pub := filepath.Join(t.TempDir(), "other-sign.key")
	if _, err := keydir.EnsureSigningKey(pub); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pub + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.pub, keydir.Prio3LeaderSignKey+".pub"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), w.config(t, t.TempDir())); !errors.Is(err, p3.ErrSettings) {
		t.Fatalf("settings under another signing key: %v, want p3.ErrSettings", err)
	}
}

// TestDeviceKeyPinning: the key files are pinned on first use; a changed
// file is refused (ErrKeyChanged) unless Config.Fingerprints vouches for
// it; a file whose SHA-256 differs from its fingerprint is refused
// (ErrKeyFingerprint); a later run needs no KeysDir.
func TestDeviceKeyPinning(t *testing.T) {
	w := newDeviceWorld(t)
	ctx := context.Background()
	state := t.TempDir()
	cfg := w.config(t, state)
	d, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Close(ctx)
	for _, f := range KeyFiles {
		if _, err := os.Stat(filepath.Join(state, "keys", f)); err != nil {
			t.Fatalf("not pinned: %v", err)
		}
	}
	noKeys := cfg
	noKeys.KeysDir = ""
	if d, err = New(ctx, noKeys); err != nil {
		t.Fatalf("a run from the pinned keys: %v", err)
	}
	d.Close(ctx)
	// the helper's key file is replaced (the leader's announcement does
	// not vouch for the helper's key: only the pin does)
	kp, err := onion.GenerateKeyPair(1)
	if err != nil {
		t.Fatal(err)
	}
	helperPub := filepath.Join(w.pub, keydir.Prio3HelperKey+".pub")
	tmp := filepath.Join(t.TempDir(), "h.key")
	if err := keydir.SaveKeyPair(tmp, "prio3-helper", kp); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(tmp + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(helperPub, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, cfg); !errors.Is(err, ErrKeyChanged) || !strings.Contains(err.Error(), "Config.Fingerprints") {
		t.Fatalf("changed helper key: %v, want ErrKeyChanged", err)
	}
	sum := sha256.Sum256(b)
	vouched := cfg
	vouched.Fingerprints = map[string]string{keydir.Prio3HelperKey + ".pub": hex.EncodeToString(sum[:])}
	if d, err = New(ctx, vouched); err != nil {
		t.Fatalf("rotation vouched by a fingerprint: %v", err)
	}
	d.Close(ctx)
	wrong := cfg
	wrong.Fingerprints = map[string]string{keydir.Prio3HelperKey + ".pub": strings.Repeat("00", 32)}
	if _, err := New(ctx, wrong); !errors.Is(err, ErrKeyFingerprint) {
		t.Fatalf("wrong fingerprint: %v, want ErrKeyFingerprint", err)
	}
	bad := cfg
	bad.Fingerprints = map[string]string{"aggregator.key.pub": strings.Repeat("00", 32)}
	if _, err := New(ctx, bad); err == nil || !strings.Contains(err.Error(), "Config.Fingerprints") {
		t.Fatalf("fingerprint of an unknown file: %v", err)
	}
}

// TestDeviceConfigErrors: every missing field is named.
func TestDeviceConfigErrors(t *testing.T) {
	list, _ := keywords.Parse(strings.NewReader("a\nb\n"))
	ok := Config{StateDir: t.TempDir(), NATS: "nats://127.0.0.1:1", Campaign: "c", Keywords: list, Measurement: p3.Config{Kind: p3.KindSumVec, Bits: 4}}
	for field, mod := range map[string]func(*Config){
		"Config.StateDir":           func(c *Config) { c.StateDir = "" },
		"Config.NATS":               func(c *Config) { c.NATS = "" },
		"Config.Campaign":           func(c *Config) { c.Campaign = "" },
		"Config.Keywords":           func(c *Config) { c.Keywords = nil },
		"Config.Measurement.Length": func(c *Config) { c.Measurement.Length = 5 },
		"Config.Measurement":        func(c *Config) { c.Measurement.Bits = 0 },
	} {
		c := ok
		mod(&c)
		if _, err := New(context.Background(), c); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
}

// TestDeviceNATSSecurityHints: a NATS credential file that cannot be read
// is refused naming the Config field (ingest.NATSSecurity, the type every
// client mode takes), not a command-line flag.
func TestDeviceNATSSecurityHints(t *testing.T) {
	w := newDeviceWorld(t)
	cfg := w.config(t, t.TempDir())
	cfg.NATSSecurity.NKeyFile = filepath.Join(t.TempDir(), "nats-client.nk")
	_, err := New(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "Config.NATSSecurity.NKeyFile") || strings.Contains(err.Error(), "--nats-nkey") {
		t.Fatalf("a missing NKey file: %v, want an error naming Config.NATSSecurity.NKeyFile", err)
	}
	t.Logf("missing NKey file: %v", err)
}

// TestDeviceSettingsFloor: a leader announcement weaker than the floor —
// ε above Config.MaxEpsilon, exact shares without AllowExactShares, a
// minimum batch below Config.MinBatchFloor, the exact status rule without
// AllowExactStatus, a status ε_c above Config.MaxStatusEpsilon or δ above
// Config.MaxStatusDelta — is refused by New (and VerifySettings) with a
// *SettingsWeakerError naming the parameter and the Config field; the
// floor's defaults accept the aggregators' defaults; a floor the app
// lowers accepts what it allows. An announcement that weakens after New
// is refused by Upload before anything is sealed, and counted.
func TestDeviceSettingsFloor(t *testing.T) {
	w := newDeviceWorld(t)
	ctx := context.Background()
	good := *w.settings.Load()
	cases := []struct {
		name, param, field string
		mod                func(*p3.Settings)
		cfg                func(*Config)
		ok                 bool
	}{
		{"shipped defaults", "", "", func(s *p3.Settings) { s.Epsilon, s.MinBatchSize = 1, 100 }, nil, true},
		{"epsilon 50", "epsilon", "Config.MaxEpsilon", func(s *p3.Settings) { s.Epsilon = 50 }, nil, false},
		{"epsilon 1.5", "epsilon", "Config.MaxEpsilon", func(s *p3.Settings) { s.Epsilon = 1.5 }, nil, false},
		{"epsilon 2 allowed", "", "", func(s *p3.Settings) { s.Epsilon = 2 }, func(c *Config) { c.MaxEpsilon = 2 }, true},
		{"exact shares", "noise", "Config.AllowExactShares", func(s *p3.Settings) { s.Epsilon = 0 }, nil, false},
		{"exact shares allowed", "", "", func(s *p3.Settings) { s.Epsilon = 0 }, func(c *Config) { c.AllowExactShares = true }, true},
		{"min batch 1", "min batch size", "Config.MinBatchFloor", func(s *p3.Settings) { s.MinBatchSize = 1 }, nil, false},
		{"min batch 9", "min batch size", "Config.MinBatchFloor", func(s *p3.Settings) { s.MinBatchSize = 9 }, nil, false},
		{"min batch 3 allowed", "", "", func(s *p3.Settings) { s.MinBatchSize = 3 }, func(c *Config) { c.MinBatchFloor = 3 }, true},
		{"exact status", "status noise", "Config.AllowExactStatus", func(s *p3.Settings) { s.StatusEpsilon, s.StatusDelta = 0, 0 }, nil, false},
		{"exact status allowed", "", "", func(s *p3.Settings) { s.StatusEpsilon, s.StatusDelta = 0, 0 }, func(c *Config) { c.AllowExactStatus = true }, true},
		{"exact shares and status", "status noise", "Config.AllowExactStatus", func(s *p3.Settings) { s.Epsilon, s.StatusEpsilon, s.StatusDelta = 0, 0, 0 },
			func(c *Config) { c.AllowExactShares = true }, false},
		{"status epsilon 50", "status epsilon", "Config.MaxStatusEpsilon", func(s *p3.Settings) { s.StatusEpsilon = 50 }, nil, false},
		{"status epsilon 1", "", "", func(s *p3.Settings) { s.StatusEpsilon = 1 }, nil, true},
		{"status epsilon 1.01", "status epsilon", "Config.MaxStatusEpsilon", func(s *p3.Settings) { s.StatusEpsilon = 1.01 }, nil, false},
		{"status epsilon 3 allowed", "", "", func(s *p3.Settings) { s.StatusEpsilon = 3 }, func(c *Config) { c.MaxStatusEpsilon = 3 }, true},
		{"status delta 1e-3", "status delta", "Config.MaxStatusDelta", func(s *p3.Settings) { s.StatusDelta = 1e-3 }, nil, false},
		{"status delta 1e-5", "", "", func(s *p3.Settings) { s.StatusDelta = 1e-5 }, nil, true},
		{"status delta 1e-3 allowed", "", "", func(s *p3.Settings) { s.StatusDelta = 1e-3 }, func(c *Config) { c.MaxStatusDelta = 1e-3 }, true},
	}
	for _, c := range cases {
		st := good
		c.mod(&st)
		w.settings.Store(&st)
		cfg := w.config(t, t.TempDir())
		if c.cfg != nil {
			c.cfg(&cfg)
		}
		d, err := New(ctx, cfg)
		if c.ok {
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			d.Close(ctx)
			continue
		}
		var we *SettingsWeakerError
		if err == nil {
			d.Close(ctx)
			t.Fatalf("%s: the device opened", c.name)
		}
		if !errors.Is(err, ErrSettingsWeaker) || !errors.As(err, &we) || we.Param != c.param || we.Field != c.field ||
			!strings.Contains(err.Error(), c.field) {
			t.Fatalf("%s: %v, want ErrSettingsWeaker on %s naming %s", c.name, err, c.param, c.field)
		}
		t.Logf("%s: %v", c.name, err)
	}
	bad := w.config(t, t.TempDir())
	bad.MaxEpsilon = -1
	if _, err := New(ctx, bad); err == nil || !strings.Contains(err.Error(), "Config.MaxEpsilon") {
		t.Fatalf("negative MaxEpsilon: %v", err)
	}
	bad = w.config(t, t.TempDir())
	bad.MaxStatusDelta = 0.5
	if _, err := New(ctx, bad); err == nil || !strings.Contains(err.Error(), "Config.MaxStatusDelta") {
		t.Fatalf("MaxStatusDelta 0.5: %v", err)
	}

	// VerifySettings (a program driving Clients itself) applies the same
	// floor
	sign, err := keydir.LoadSigningPublic(filepath.Join(w.pub, keydir.Prio3LeaderSignKey+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	lk, err := onion.LoadPublicKey(filepath.Join(w.pub, keydir.Prio3LeaderKey+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natsconn.Connect(w.url, "verify-settings")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	exact := good
	exact.StatusEpsilon, exact.StatusDelta = 0, 0
	w.settings.Store(&exact)
	var we *SettingsWeakerError
	if _, err := VerifySettings(ctx, nc, sign, w.config(t, ""), lk); !errors.As(err, &we) || we.Field != "Config.AllowExactStatus" {
		t.Fatalf("VerifySettings of the exact status rule: %v, want a *SettingsWeakerError naming Config.AllowExactStatus", err)
	}
	allow := w.config(t, "")
	allow.AllowExactStatus = true
	if _, err := VerifySettings(ctx, nc, sign, allow, lk); err != nil {
		t.Fatalf("VerifySettings with AllowExactStatus: %v", err)
	}

	// opened under good settings; the leader then announces ε = 50
	w.settings.Store(&good)
	d, err := New(ctx, w.config(t, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	weak := good
	weak.Epsilon = 50
	w.settings.Store(&weak)
	asked := w.requests.Load()
	if _, err := d.Upload(ctx, 20000, keywords.Sparse{0: 1}); !errors.Is(err, ErrSettingsWeaker) {
		t.Fatalf("upload after the leader weakened its settings: %v, want ErrSettingsWeaker", err)
	}
	if w.requests.Load() != asked+1 {
		t.Fatalf("the upload asked the leader %d times, want once", w.requests.Load()-asked)
	}
	// the leader now announces another S: a mismatch
	changed := good
	changed.Measurement.L1 = 15
	w.settings.Store(&changed)
	if _, err := d.Upload(ctx, 20000, keywords.Sparse{0: 1}); !errors.Is(err, ErrSettingsMismatch) {
		t.Fatalf("upload after the leader changed S: %v, want ErrSettingsMismatch", err)
	}
	if st := d.Stats(); st.SettingsWeaker != 1 || st.SettingsChanged != 1 || st.Uploaded != 0 {
		t.Fatalf("stats %+v, want 1 weaker, 1 changed, 0 uploaded", st)
	}
	if d.Settings().Epsilon != good.Epsilon {
		t.Fatalf("the refused settings replaced the verified ones: %+v", d.Settings())
	}
}
