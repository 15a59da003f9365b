package keydir

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/token"
)

// wantPrivate is, per role, exactly the private files GenerateRole writes
// and the public files ExportPublic hands to the others.
var wantPrivate = map[string][]string{
	RoleRelayA:     {"relay-a.key"},
	RoleRelayB:     {"relay-b.key"},
	RoleAggregator: {"aggregator-sign.key", "aggregator.key"},
	RoleRandomness: nil,
	RoleAttester:   nil,
	RoleOperator:   {"control-sign.key", "operator-sign.key"},
	RoleCoord:      {"coordinator-sign.key"},
	RoleClient:     nil,
	// Prio3 mode
	RolePrio3Leader:    {"prio3-leader-sign.key", "prio3-leader-token.key", "prio3-leader.key"},
	RolePrio3Helper:    {"prio3-helper-token.key", "prio3-helper.key"},
	RolePrio3Collector: {"prio3-collector.key"},
}

var wantPublic = map[string][]string{
	RoleRelayA:     {"relay-a.key.pub"},
	RoleRelayB:     {"relay-b.key.pub"},
	RoleAggregator: {"aggregator-sign.key.pub", "aggregator.key.pub"},
	RoleRandomness: nil,
	RoleAttester:   {EnrollmentFile},
	RoleOperator:   {"control-sign.key.pub", "operator-sign.key.pub"},
	RoleCoord:      {"coordinator-sign.key.pub"},
	RoleClient:     nil,
	// Prio3 mode
	RolePrio3Leader:    {"prio3-leader-sign.key.pub", "prio3-leader.key.pub"},
	RolePrio3Helper:    {"prio3-helper.key.pub"},
	RolePrio3Collector: {"prio3-collector.key.pub"},
}

// TestGenerateRole: each role's directory holds exactly that role's
// private files (0600) and its export exactly the public parts, with no
// private key in any bundle.
func TestGenerateRole(t *testing.T) {
	if len(wantPrivate) != len(Custody) {
		t.Fatalf("test covers %d roles, custody table has %d", len(wantPrivate), len(Custody))
	}
	for _, role := range CustodyRoles() {
		dir := filepath.Join(t.TempDir(), role)
		if err := GenerateRole(dir, role); err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		if err := GenerateRole(dir, role); err != nil { // idempotent
			t.Fatalf("%s again: %v", role, err)
		}
		priv, err := PrivateFiles(dir)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(priv)
		if !slices.Equal(priv, wantPrivate[role]) {
			t.Errorf("%s: private files %v, want %v", role, priv, wantPrivate[role])
		}
		for _, f := range priv {
			if st, _ := os.Stat(filepath.Join(dir, f)); st.Mode().Perm() != 0o600 {
				t.Errorf("%s: %s mode %o, want 0600", role, f, st.Mode().Perm())
			}
		}
		out := filepath.Join(t.TempDir(), "bundle")
		pub, err := ExportPublic(dir, out)
		if err != nil {
			t.Fatalf("%s export: %v", role, err)
		}
		slices.Sort(pub)
		if !slices.Equal(pub, wantPublic[role]) {
			t.Errorf("%s: public exports %v, want %v", role, pub, wantPublic[role])
		}
		entries, _ := os.ReadDir(out)
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(out, e.Name()))
			if strings.Contains(string(b), "PRIVATE") || (strings.HasSuffix(e.Name(), ".key")) {
				t.Errorf("%s: bundle holds private %s", role, e.Name())
			}
		}
		if got, _ := DirRole(dir); got != role {
			t.Errorf("%s: custody marker says %q", role, got)
		}
	}
}

// operators builds one directory per role and installs in each the
// public bundles of the roles it imports; it returns role → directory.
func operators(t *testing.T) map[string]string {
	t.Helper()
	root := t.TempDir()
	dirs := map[string]string{}
	bundles := map[string]string{}
	for _, role := range CustodyRoles() {
		dirs[role] = filepath.Join(root, role)
		if err := GenerateRole(dirs[role], role); err != nil {
			t.Fatal(err)
		}
	}
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	if err := EnrollIdentity(dirs[RoleAttester], pub); err != nil {
		t.Fatal(err)
	}
	for _, role := range CustodyRoles() {
		bundles[role] = filepath.Join(root, role+".public")
		if _, err := ExportPublic(dirs[role], bundles[role]); err != nil {
			t.Fatal(err)
		}
	}
	for _, rk := range Custody {
		for _, from := range Custody {
			needs := false
			for _, f := range rk.Imports {
				needs = needs || slices.Contains(from.Public, f)
			}
			if !needs || from.Role == rk.Role {
				continue
			}
			if _, _, err := ImportPublic(dirs[rk.Role], bundles[from.Role]); err != nil {
				t.Fatalf("%s imports %s: %v", rk.Role, from.Role, err)
			}
		}
		for _, f := range rk.Imports {
			if _, err := os.Stat(filepath.Join(dirs[rk.Role], f)); err != nil {
				t.Errorf("%s: import %s missing: %v", rk.Role, f, err)
			}
		}
	}
	return dirs
}

// TestRoleLoads: a role started with its own directory and the imported
// public parts loads what it needs; every other role's private key is
// refused with ErrNotCustodian and a message naming its holder.
func TestRoleLoads(t *testing.T) {
	dirs := operators(t)
	const epoch = "e1"
	agg, rnd := dirs[RoleAggregator], dirs[RoleRandomness]

	// the aggregator: onion key, signing key, report and ARC issuer keys,
	// the operator's control key (public) and the attester's list
	if _, err := LoadKeyPairs([]string{filepath.Join(agg, AggregatorKey)}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSigningKey(filepath.Join(agg, AggregatorSignKey)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSigningPublic(filepath.Join(agg, ControlSignKey+".pub")); err != nil {
		t.Fatal(err)
	}
	if ids, err := LoadEnrollment(agg); err != nil || len(ids) != 1 {
		t.Fatalf("aggregator enrollment: %d, %v", len(ids), err)
	}
	if err := EnsureIssuerKeys(agg, epoch); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokenKey(agg, token.KindReport, epoch); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadARCKey(agg, epoch); err != nil {
		t.Fatal(err)
	}
	// the randomness operator: its randomness-token key only
	if err := EnsureIssuerKeys(rnd, epoch); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokenKey(rnd, token.KindRandomness, epoch); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{agg, rnd} {
		priv, _ := PrivateFiles(d)
		slices.Sort(priv)
		t.Logf("%s: %v", filepath.Base(d), priv)
	}
	if _, err := os.Stat(TokenKeyPath(agg, token.KindRandomness, epoch)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the aggregator's directory got a randomness-token key: %v", err)
	}
	for _, k := range []token.Kind{token.KindReport} {
		if _, err := os.Stat(TokenKeyPath(rnd, k, epoch)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the randomness directory got a %s key: %v", k, err)
		}
	}
	// the coordinator: the public halves of both signers
	for _, f := range []string{AggregatorSignKey + ".pub", OperatorSignKey + ".pub"} {
		if _, err := LoadSigningPublic(filepath.Join(dirs[RoleCoord], f)); err != nil {
			t.Fatal(err)
		}
	}

	// a client: the route of public keys
	if _, _, _, err := LoadRoute(dirs[RoleClient]); err != nil {
		t.Fatal(err)
	}

	// refusals: another role's private key, even when a copy is present
	copyFile(t, TokenKeyPath(rnd, token.KindRandomness, epoch), TokenKeyPath(agg, token.KindRandomness, epoch))
	refused := []struct {
		name string
		err  error
		want string
	}{
		{"aggregator loads randomness-token key", second(LoadTokenKey(agg, token.KindRandomness, epoch)), "randomness operator"},
		{"randomness loads report key", second(LoadTokenKey(rnd, token.KindReport, epoch)), "held by the aggregator operator"},
		{"randomness loads ARC key", second(LoadARCKey(rnd, epoch)), "held by the aggregator operator"},
		{"relay a loads the aggregator's key", second(LoadKeyPairs([]string{filepath.Join(dirs[RoleRelayA], AggregatorKey)})), "aggregator's private key"},
		{"aggregator loads the control key", second(LoadSigningKey(filepath.Join(agg, ControlSignKey))), "pipeline-operator's private key"},
		{"operator loads the aggregator's signing key", second(EnsureSigningKey(filepath.Join(dirs[RoleOperator], AggregatorSignKey))), "aggregator's private key"},
		{"coordinator creates issuer keys", EnsureIssuerKeys(dirs[RoleCoord], epoch), "issues no tokens"},
	}
	for _, r := range refused {
		if !errors.Is(r.err, ErrNotCustodian) || !strings.Contains(r.err.Error(), r.want) {
			t.Errorf("%s: %v, want ErrNotCustodian mentioning %q", r.name, r.err, r.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dirs[RoleOperator], AggregatorSignKey)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the operator's directory got the aggregator's signing key: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestBundleRefusals: a bundle holding a private key, listing a file its
// role does not export, or exported by the importer's own role is refused;
// a role directory is not made over another role's keys; the single-host
// layout (no marker) still loads every key.
func TestBundleRefusals(t *testing.T) {
	root := t.TempDir()
	agg := filepath.Join(root, "agg")
	if err := GenerateRole(agg, RoleAggregator); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(root, "bundle")
	if _, err := ExportPublic(agg, bundle); err != nil {
		t.Fatal(err)
	}
	relay := filepath.Join(root, "relay")
	if err := GenerateRole(relay, RoleRelayA); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ImportPublic(agg, bundle); err == nil {
		t.Error("a role imported its own bundle")
	}
	copyFile(t, filepath.Join(agg, AggregatorKey), filepath.Join(bundle, AggregatorKey))
	if _, _, err := ImportPublic(relay, bundle); !errors.Is(err, ErrPrivateInBundle) {
		t.Errorf("bundle with a private key: %v, want ErrPrivateInBundle", err)
	}
	if _, err := os.Stat(filepath.Join(relay, AggregatorKey+".pub")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a refused bundle installed files")
	}
	os.Remove(filepath.Join(bundle, AggregatorKey))
	// a private key disguised under a public name
	copyFile(t, filepath.Join(agg, AggregatorSignKey), filepath.Join(bundle, AggregatorSignKey+".pub"))
	if _, _, err := ImportPublic(relay, bundle); !errors.Is(err, ErrPrivateInBundle) {
		t.Errorf("bundle with a disguised private key: %v, want ErrPrivateInBundle", err)
	}
	copyFile(t, filepath.Join(agg, AggregatorSignKey+".pub"), filepath.Join(bundle, AggregatorSignKey+".pub"))
	os.WriteFile(filepath.Join(bundle, BundleFile), []byte("role aggregator\nrelay-b.key.pub\n"), 0o644)
	if _, _, err := ImportPublic(relay, bundle); err == nil || !strings.Contains(err.Error(), "not a public part") {
		t.Errorf("bundle listing another role's file: %v", err)
	}
	os.WriteFile(filepath.Join(bundle, "relay-b.1.key.pub"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(bundle, BundleFile), []byte("role aggregator\nrelay-b.1.key.pub\n"), 0o644)
	if _, _, err := ImportPublic(relay, bundle); err == nil || !strings.Contains(err.Error(), "not a public part") {
		t.Errorf("bundle listing another role's rotated-out key: %v", err)
	}
	os.Remove(filepath.Join(bundle, "relay-b.1.key.pub"))
	if from, files, err := func() (string, []string, error) {
		ExportPublic(agg, bundle)
		return ImportPublic(relay, bundle)
	}(); err != nil || from != RoleAggregator || len(files) != 2 {
		t.Errorf("clean bundle: %s %v %v", from, files, err)
	}
	if err := EnsureKeys(agg); !errors.Is(err, ErrNotCustodian) {
		t.Errorf("single-host keys made in a role directory: %v", err)
	}
	if err := GenerateRole(agg, RoleRelayB); err == nil {
		t.Error("a directory of one role was generated for another")
	}
	single := filepath.Join(root, "single")
	if err := EnsureKeys(single); err != nil {
		t.Fatal(err)
	}
	if err := GenerateRole(single, RoleRelayA); !errors.Is(err, ErrNotCustodian) {
		t.Errorf("role generated over the single-host layout: %v", err)
	}
	if err := EnsureIssuerKeys(single, "e1"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []token.Kind{token.KindRandomness, token.KindReport} {
		if _, err := LoadTokenKey(single, k, "e1"); err != nil {
			t.Errorf("single host %s: %v", k, err)
		}
	}
	if _, err := LoadKeyPairs([]string{filepath.Join(single, RelayAKey), filepath.Join(single, AggregatorKey)}); err != nil {
		t.Errorf("single host: %v", err)
	}
	if _, err := ExportPublic(single, filepath.Join(root, "x")); err == nil {
		t.Error("exported from a directory without a custody marker")
	}
	if err := GenerateRole(filepath.Join(root, "y"), "nobody"); err == nil || !strings.Contains(err.Error(), "use one of") {
		t.Errorf("unknown role: %v", err)
	}
	if err := GenerateRole(filepath.Join(root, "y"), "issuer"); err == nil || !strings.Contains(err.Error(), "--role aggregator") {
		t.Errorf("issuer role: %v", err)
	}
}

// TestRotatedExport: after a rotation in relay a's directory the bundle
// carries both public halves and a client directory takes them.
func TestRotatedExport(t *testing.T) {
	root := t.TempDir()
	relay, client := filepath.Join(root, "relay-a"), filepath.Join(root, "client")
	if err := GenerateRole(relay, RoleRelayA); err != nil {
		t.Fatal(err)
	}
	if err := GenerateRole(client, RoleClient); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Rotate(relay, RoleRelayA); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Rotate(relay, RoleRelayB); err == nil {
		t.Errorf("rotated relay b's key in relay a's directory: %v", err)
	}
	files, err := ExportPublic(relay, filepath.Join(root, "b"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	if want := []string{"relay-a.1.key.pub", "relay-a.key.pub"}; !slices.Equal(files, want) {
		t.Fatalf("exported %v, want %v", files, want)
	}
	if _, got, err := ImportPublic(client, filepath.Join(root, "b")); err != nil || len(got) != 2 {
		t.Fatalf("client import: %v %v", got, err)
	}
	if priv, _ := PrivateFiles(client); len(priv) != 0 {
		t.Errorf("client holds private files %v", priv)
	}
}

// TestMarkIssuerRole: a fresh volume marked for the aggregator's issuer
// gets only its kinds' keys and refuses a randomness-token key; marking
// again is idempotent; another role, a role without issuer kinds, a volume
// with another kind's issuer key or another role's private key are
// refused with ErrNotCustodian (or an error naming the roles).
func TestMarkIssuerRole(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "pvc")
	for range 2 {
		if err := MarkIssuerRole(vol, RoleAggregator); err != nil {
			t.Fatal(err)
		}
	}
	if role, err := DirRole(vol); err != nil || role != RoleAggregator {
		t.Fatalf("marked %q, %v", role, err)
	}
	if err := EnsureIssuerKeys(vol, "e1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(TokenKeyPath(vol, token.KindRandomness, "e1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("randomness-token key on the aggregator's volume: %v", err)
	}
	if _, err := LoadTokenKey(vol, token.KindReport, "e1"); err != nil {
		t.Errorf("report-token key: %v", err)
	}
	if err := MarkIssuerRole(vol, RoleRandomness); !errors.Is(err, ErrNotCustodian) {
		t.Errorf("--role randomness on the aggregator's volume: %v", err)
	}
	if err := MarkIssuerRole(t.TempDir(), RoleRelayA); err == nil || !strings.Contains(err.Error(), RoleAggregator) {
		t.Errorf("relay-a as an issuer role: %v", err)
	}

	single := t.TempDir() // a single-host issuer's volume: all three kinds
	if err := EnsureIssuerKeys(single, "e1"); err != nil {
		t.Fatal(err)
	}
	if err := MarkIssuerRole(single, RoleRandomness); !errors.Is(err, ErrNotCustodian) {
		t.Errorf("a volume with report and ARC keys marked for randomness: %v", err)
	}
	if role, _ := DirRole(single); role != "" {
		t.Errorf("refused volume marked %q", role)
	}
	withKey := t.TempDir()
	if err := os.WriteFile(filepath.Join(withKey, AggregatorKey), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := MarkIssuerRole(withKey, RoleRandomness); !errors.Is(err, ErrNotCustodian) {
		t.Errorf("a volume holding aggregator.key marked for randomness: %v", err)
	}
}
