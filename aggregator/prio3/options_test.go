package prio3

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/infra/keydir"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// TestClockFile: the clock reads the file at every call, keeps the last
// good time when the file becomes unreadable, and refuses a file that does
// not hold an RFC 3339 time at the start.
func TestClockFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	if _, err := ClockFile(path, nil); err == nil {
		t.Fatal("a missing clock file was accepted")
	}
	os.WriteFile(path, []byte("yesterday\n"), 0o644)
	if _, err := ClockFile(path, nil); err == nil {
		t.Fatal("a clock file without an RFC 3339 time was accepted")
	}
	t1 := time.Date(2006, 3, 7, 12, 0, 0, 0, time.UTC)
	os.WriteFile(path, []byte(t1.Format(time.RFC3339)+"\n"), 0o644)
	now, err := ClockFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := now(); !got.Equal(t1) {
		t.Fatalf("clock %s, want %s", got, t1)
	}
	t2 := t1.Add(50 * time.Hour)
	os.WriteFile(path, []byte(t2.Format(time.RFC3339)), 0o644)
	if got := now(); !got.Equal(t2) {
		t.Fatalf("clock after the rewrite %s, want %s", got, t2)
	}
	os.WriteFile(path, []byte("garbage"), 0o644)
	if got := now(); !got.Equal(t2) {
		t.Fatalf("clock on a bad file %s, want the last good %s", got, t2)
	}
}

// TestOptionsConfig: flags without files are validated (usage errors);
// Config loads the role's key from its custody directory, the collector's
// public key and the verify keys (newest epoch by default); the leader
// refuses the helper's directory and an epoch the file lacks.
func TestOptionsConfig(t *testing.T) {
	root := t.TempDir()
	dirs := map[string]string{}
	for _, r := range []string{keydir.RolePrio3Leader, keydir.RolePrio3Helper, keydir.RolePrio3Collector} {
		dirs[r] = filepath.Join(root, r)
		if err := keydir.GenerateRole(dirs[r], r); err != nil {
			t.Fatal(err)
		}
	}
	bundle := filepath.Join(root, "collector.public")
	if _, err := keydir.ExportPublic(dirs[keydir.RolePrio3Collector], bundle); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{keydir.RolePrio3Leader, keydir.RolePrio3Helper} {
		if _, _, err := keydir.ImportPublic(dirs[r], bundle); err != nil {
			t.Fatal(err)
		}
	}
	vk := filepath.Join(root, "verify")
	for range 2 {
		if _, err := keydir.AddVerifyKeyEpoch(vk); err != nil {
			t.Fatal(err)
		}
	}
	words := filepath.Join(root, "words")
	os.WriteFile(words, []byte("flu\nfever\ncough\n"), 0o644)
	base := DefaultOptions()
	base.Role, base.Campaign, base.Keywords, base.VerifyKey, base.StateDir = RoleLeader, "kw", words, vk, filepath.Join(root, "state")
	base.KeysDir = dirs[keydir.RolePrio3Leader]

	for name, mut := range map[string]func(o *Options){
		"role":               func(o *Options) { o.Role = "boss" },
		"kind":               func(o *Options) { o.Kind = "histogram" },
		"bits":               func(o *Options) { o.Bits = 17 },
		"min batch":          func(o *Options) { o.MinBatchSize = 0 },
		"state dir":          func(o *Options) { o.StateDir = "" },
		"verify key":         func(o *Options) { o.VerifyKey = "" },
		"campaign":           func(o *Options) { o.Campaign = "a/b" },
		"epsilon":            func(o *Options) { o.Epsilon = -1 },
		"epsilon inf":        func(o *Options) { o.Epsilon = math.Inf(1) },
		"partition refresh":  func(o *Options) { o.PartitionRefresh = 0 },
		"status epsilon NaN": func(o *Options) { o.StatusEpsilon = math.NaN() },
		"status delta 0":     func(o *Options) { o.StatusDelta = 0 },
		"status delta ½":     func(o *Options) { o.StatusDelta = 0.5 },
		"campaign start":     func(o *Options) { o.CampaignStart = "2006-13-01" },
		// exact shares only when asked for by name
		"epsilon 0 without --exact-shares": func(o *Options) { o.Epsilon = 0 },
		"--exact-shares with epsilon 1":    func(o *Options) { o.ExactShares = true },
	} {
		o := base
		mut(&o)
		if err := o.Validate(); !errors.As(err, new(config.UsageError)) {
			t.Errorf("%s: %v, want a usage error", name, err)
		}
	}
	if base.Epsilon != DefaultEpsilon || !(DefaultEpsilon > 0) || base.ExactShares {
		t.Errorf("default epsilon %v, exact shares %v: want a finite ε > 0 by default", base.Epsilon, base.ExactShares)
	}
	o := base
	o.Epsilon, o.ExactShares = 0, true
	if cfg, err := o.Config(); err != nil || cfg.Epsilon != 0 {
		t.Errorf("--epsilon 0 --exact-shares: %v, epsilon %v", err, cfg.Epsilon)
	}
	o = base
	o.Epsilon = 0.5
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	// the day's status: 0.1 × ε by default, δ 10⁻⁶; an explicit ε_c wins
	if cfg.StatusEpsilon != 0.05 || cfg.StatusDelta != 1e-6 {
		t.Errorf("default status (ε_c, δ) = (%v, %v), want (0.05, 1e-06)", cfg.StatusEpsilon, cfg.StatusDelta)
	}
	if o2 := o; true {
		o2.StatusEpsilon = 0
		if c2, err := o2.Config(); err != nil || c2.StatusEpsilon != 0 {
			t.Errorf("--status-epsilon 0: %v, ε_c %v", err, c2.StatusEpsilon)
		}
	}
	if cfg.Epsilon != 0.5 {
		t.Errorf("epsilon %v, want 0.5", cfg.Epsilon)
	}
	if cfg.Measurement.Length != 3 || cfg.Measurement.Kind != p3.KindSumVec || cfg.Measurement.Bits != p3.DefaultBits || cfg.Measurement.L1 != p3.DefaultL1 {
		t.Errorf("measurement %+v", cfg.Measurement)
	}
	if cfg.KeyEpoch != 2 || len(cfg.VerifyKeys) != 2 || len(cfg.Keys) != 1 {
		t.Errorf("key epoch %d, %d verify keys, %d HPKE keys; want 2, 2, 1", cfg.KeyEpoch, len(cfg.VerifyKeys), len(cfg.Keys))
	}
	if _, err := NewLeader(cfg); err != nil {
		t.Errorf("leader from Config: %v", err)
	}
	o.KeysDir = dirs[keydir.RolePrio3Helper]
	if _, err := o.Config(); !errors.Is(err, keydir.ErrNotCustodian) {
		t.Errorf("leader on the helper's directory: %v, want ErrNotCustodian", err)
	}
	o = base
	o.KeyEpoch = 9
	if _, err := o.Config(); err == nil || !strings.Contains(err.Error(), "--key-epoch 9") {
		t.Errorf("leader with an unknown epoch: %v", err)
	}
	o = base
	o.Role, o.KeysDir = RoleHelper, dirs[keydir.RolePrio3Helper]
	if cfg, err := o.Config(); err != nil {
		t.Errorf("helper: %v", err)
	} else if _, err := NewHelper(cfg); err != nil {
		t.Errorf("helper from Config: %v", err)
	}
	// the helper needs the leader's public signing key (its bundle), the
	// leader its private one; both are read before NATS is dialled
	noNATS := func() (*nats.Conn, error) { return nil, errors.New("no NATS in this test") }
	if _, _, err := o.Helper(noNATS, nil); err == nil || !strings.Contains(err.Error(), "--leader-pub") {
		t.Errorf("helper without the leader's public key: %v, want a --leader-pub error", err)
	}
	lb := filepath.Join(root, "leader.public")
	if _, err := keydir.ExportPublic(dirs[keydir.RolePrio3Leader], lb); err != nil {
		t.Fatal(err)
	}
	if _, _, err := keydir.ImportPublic(dirs[keydir.RolePrio3Helper], lb); err != nil {
		t.Fatal(err)
	}
	if _, _, err := o.Helper(noNATS, nil); err == nil || !strings.Contains(err.Error(), "no NATS in this test") {
		t.Errorf("helper with the leader's public key: %v, want the NATS error", err)
	}
	o = base
	if _, _, err := o.Leader(noNATS, nil); err == nil || !strings.Contains(err.Error(), "no NATS in this test") {
		t.Errorf("leader with its signing key: %v, want the NATS error", err)
	}
	o.SignKey = filepath.Join(root, "missing.key")
	if _, _, err := o.Leader(noNATS, nil); err == nil || !strings.Contains(err.Error(), "--sign-key") {
		t.Errorf("leader without its signing key: %v, want a --sign-key error", err)
	}
}

// TestPartitionRefreshFlag: --partition-refresh defaults to
// DefaultPartitionRefresh and sets Options.PartitionRefresh (Options.Leader
// hands it to LeaderService.PartitionRefresh).
func TestPartitionRefreshFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{{nil, DefaultPartitionRefresh}, {[]string{"--partition-refresh", "5s"}, 5 * time.Second}} {
		o := DefaultOptions()
		f := pflag.NewFlagSet("aggregate-prio3", pflag.ContinueOnError)
		o.AddFlags(f)
		if err := f.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if o.PartitionRefresh != tc.want {
			t.Errorf("%v: PartitionRefresh %s, want %s", tc.args, o.PartitionRefresh, tc.want)
		}
	}
}
