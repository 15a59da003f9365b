package keydir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// Key custody: each operator generates its own private keys in its own keys
// directory (GenerateRole), hands the others only public parts
// (ExportPublic), and installs theirs (ImportPublic). A directory made this
// way carries a custody marker, CustodyFile, naming its role; the loaders of
// this package then refuse any private key that belongs to another role
// (ErrNotCustodian), so a misplaced copy fails loudly instead of quietly
// widening what an operator can do. A directory without the marker is the
// single-host layout of `crowdlog keys generate` without --role (every key in
// one place: `crowdlog run`, the demo, tests) and loads anything.
//
// Privately verifiable tokens (VOPRF tokens, RFC 9578 §5; ARC,
// draft-ietf-privacypass-arc-crypto) are verified with the issuance key, so
// each is issued where it is verified (RFC 9576 §4.3, "Joint Origin and
// Issuer"): the aggregator's operator holds the report-token and ARC keys
// and runs the issuer for those kinds; the randomness operator holds the
// randomness-token key and runs the issuer for that kind. Attestation
// (which identities are enrolled, RFC 9576 §4.4 "Split Origin, Attester,
// Issuer") is the attester's role: it keeps the enrollment list, which holds
// public keys only and is imported by both issuers.

// CustodyFile is the custody marker inside a role's keys directory: one
// line, the role name (mode 0644, public).
const CustodyFile = "custody"

// BundleFile lists, inside a public bundle, the files of the bundle and the
// role that exported them (one "role ROLE" line, then one file name a line).
const BundleFile = "bundle"

// Custody roles: the operators that hold private keys or public inputs in
// a keys directory.
const (
	RoleRelayA     = "relay-a"
	RoleRelayB     = "relay-b"
	RoleAggregator = "aggregator"
	RoleRandomness = "randomness"
	RoleAttester   = "attester"
	RoleOperator   = "pipeline-operator"
	RoleCoord      = "coordinator"
	// RoleClient: a reporting device's directory, which holds the route's
	// public keys (LoadRoute); its identity key is its own (ingest --state,
	// EnsureIdentityKey) and enrolled at the attester by its public half.
	RoleClient = "client"
)

// RoleKeys is one row of the custody table: what a role generates and keeps
// (Private: file names in its keys directory; IssuerKinds: the per-epoch
// issuer keys it creates and holds in IssuerKeys/, with ARC for the ARC
// key), what it exports (Public: file names, each a public half or a public
// list) and which public files it needs from other roles (Imports).
type RoleKeys struct {
	Role        string
	Private     []string
	IssuerKinds []string // "randomness", "report", "arc"
	Randomness  bool     // holds the OPRF epoch keys in RandomnessKeys/
	Public      []string
	Imports     []string
}

// Custody is the key-custody table (docs/threat-model.md, "Key custody").
var Custody = []RoleKeys{
	{Role: RoleRelayA, Private: []string{RelayAKey}, Public: []string{RelayAKey + ".pub"}},
	{Role: RoleRelayB, Private: []string{RelayBKey}, Public: []string{RelayBKey + ".pub"}},
	{Role: RoleAggregator, Private: []string{AggregatorKey, AggregatorSignKey},
		IssuerKinds: []string{token.KindReport.String(), "arc"},
		Public:      []string{AggregatorKey + ".pub", AggregatorSignKey + ".pub"},
		Imports:     []string{ControlSignKey + ".pub", CoordinatorSignKey + ".pub", EnrollmentFile}},
	{Role: RoleRandomness, IssuerKinds: []string{token.KindRandomness.String()}, Randomness: true,
		Imports: []string{EnrollmentFile}},
	{Role: RoleAttester, Public: []string{EnrollmentFile}},
	{Role: RoleOperator, Private: []string{ControlSignKey, OperatorSignKey},
		Public: []string{ControlSignKey + ".pub", OperatorSignKey + ".pub"}},
	{Role: RoleCoord, Private: []string{CoordinatorSignKey}, Public: []string{CoordinatorSignKey + ".pub"},
		Imports: []string{AggregatorSignKey + ".pub", OperatorSignKey + ".pub"}},
	{Role: RoleClient, Imports: []string{RelayAKey + ".pub", RelayBKey + ".pub", AggregatorKey + ".pub", AggregatorSignKey + ".pub", CoordinatorSignKey + ".pub",
		Prio3LeaderKey + ".pub", Prio3HelperKey + ".pub"}},
	// Prio3 mode: the leader and the helper each keep their own HPKE key
	// and import the collector's public key (aggregate shares are sealed
	// to it); the shared verify key is not a custody file (it lives where
	// --verify-key says, in both operators' hands: keys prio3-verify);
	// the leader signs its requests to the helper with its own Ed25519
	// key, whose public half the helper imports
	// the leader's operator keeps the seed of its own leader tokens and
	// runs their issuer (IssuerKinds "prio3-leader"), as the helper's does
	{Role: RolePrio3Leader, Private: []string{Prio3LeaderKey, Prio3LeaderSignKey, Prio3LeaderTokenSeed},
		IssuerKinds: []string{token.KindPrio3Leader.String()},
		Public:      []string{Prio3LeaderKey + ".pub", Prio3LeaderSignKey + ".pub"},
		Imports:     []string{Prio3CollectorKey + ".pub"}},
	// the helper's operator also keeps the token seed of its helper
	// tokens and runs their issuer (IssuerKinds "prio3-helper": derived
	// per campaign-day from the seed, no per-epoch files)
	{Role: RolePrio3Helper, Private: []string{Prio3HelperKey, Prio3HelperTokenSeed},
		IssuerKinds: []string{token.KindPrio3Helper.String()},
		Public:      []string{Prio3HelperKey + ".pub"},
		Imports:     []string{Prio3CollectorKey + ".pub", Prio3LeaderSignKey + ".pub"}},
	{Role: RolePrio3Collector, Private: []string{Prio3CollectorKey}, Public: []string{Prio3CollectorKey + ".pub"}},
}

// CustodyRoles lists the role names of Custody in order.
func CustodyRoles() []string {
	out := make([]string, len(Custody))
	for i, r := range Custody {
		out[i] = r.Role
	}
	return out
}

// RoleOf returns the custody row of role; ok is false for an unknown role.
func RoleOf(role string) (RoleKeys, bool) {
	for _, r := range Custody {
		if r.Role == role {
			return r, true
		}
	}
	return RoleKeys{}, false
}

// ErrNotCustodian is wrapped when a role's keys directory is asked for a
// private key that another role holds.
var ErrNotCustodian = errors.New("private key held by another operator")

// ErrPrivateInBundle is wrapped when a public bundle holds a private key.
var ErrPrivateInBundle = errors.New("public bundle holds a private key")

// GenerateRole creates role's private keys in dir when missing (HPKE key
// pairs with key id 1, Ed25519 signing keys; mode 0600, public halves
// 0644), its empty per-epoch key directories (0700) and the custody marker.
// Existing keys are kept. It errors for an unknown role, for a directory
// marked for another role, and for a directory holding another role's
// private keys (the single-host layout cannot be turned into a role
// directory: generate each role in its own directory).
func GenerateRole(dir, role string) error {
	rk, ok := RoleOf(role)
	if role == "issuer" {
		return fmt.Errorf("--role issuer: the issuer runs at each verifier, with no keys of its own: use --role aggregator (report tokens, ARC credentials) or --role randomness (randomness tokens), and --role attester for the enrollment list")
	}
	if !ok {
		return fmt.Errorf("--role %q: use one of %s", role, strings.Join(CustodyRoles(), ", "))
	}
	if have, err := DirRole(dir); err != nil {
		return err
	} else if have != "" && have != role {
		return fmt.Errorf("keys directory %s belongs to role %s, not %s: give each operator its own directory", dir, have, role)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("keys dir: %w", err)
	}
	for _, other := range Custody {
		if other.Role == role {
			continue
		}
		for _, f := range other.Private {
			if slices.Contains(rk.Private, f) {
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				return fmt.Errorf("keys directory %s holds %s, the %s's private key: %w; generate role %s in a fresh directory",
					dir, f, other.Role, ErrNotCustodian, role)
			}
		}
	}
	for _, f := range rk.Private {
		path := filepath.Join(dir, f)
		switch f {
		case RelayAKey, RelayBKey, AggregatorKey, Prio3LeaderKey, Prio3HelperKey, Prio3CollectorKey:
			if _, err := os.Stat(path); err == nil {
				continue
			}
			k, err := onion.GenerateKeyPair(1)
			if err != nil {
				return err
			}
			if err := SaveKeyPair(path, strings.TrimSuffix(f, ".key"), k); err != nil {
				return err
			}
		case Prio3HelperTokenSeed, Prio3LeaderTokenSeed:
			if _, err := EnsurePrio3TokenSeed(path); err != nil {
				return err
			}
		default:
			if _, err := EnsureSigningKey(path); err != nil {
				return err
			}
		}
	}
	if len(rk.IssuerKinds) > 0 {
		if err := os.MkdirAll(filepath.Join(dir, IssuerKeys), 0o700); err != nil {
			return fmt.Errorf("issuer keys dir: %w", err)
		}
	}
	if rk.Randomness {
		if err := os.MkdirAll(filepath.Join(dir, RandomnessKeys), 0o700); err != nil {
			return fmt.Errorf("randomness keys dir: %w", err)
		}
	}
	if role == RoleAttester {
		f, err := os.OpenFile(EnrollmentPath(dir), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("enrollment list: %w", err)
		}
		f.Close()
	}
	return writeMarker(dir, role)
}

// writeMarker writes dir's custody marker naming role (0644), atomically
// and only when it does not already name role: a verifier sharing the
// volume reads it at any time (DirRole), and must see the whole marker or
// none (infra/atomicfile).
func writeMarker(dir, role string) error {
	if err := atomicfile.WriteFile(filepath.Join(dir, CustodyFile), []byte(role+"\n"), 0o644); err != nil {
		return fmt.Errorf("custody marker: %w", err)
	}
	return nil
}

// DirRole returns the role named by dir's custody marker, or "" when dir
// has none (the single-host layout, or no directory yet).
func DirRole(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, CustodyFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("custody marker: %w", err)
	}
	role := strings.TrimSpace(string(b))
	if _, ok := RoleOf(role); !ok {
		return "", fmt.Errorf("custody marker %s names unknown role %q: fix it or regenerate with `crowdlog keys generate --role`", filepath.Join(dir, CustodyFile), role)
	}
	return role, nil
}

// RequireRole errors (wrapping ErrNotCustodian) when dir is a role
// directory of a role not in roles: a service started on another
// operator's directory would create or load keys that operator holds (the
// randomness service's OPRF keys in the aggregator's directory, say). A
// directory without a custody marker (single host) passes. what names the
// service in the error.
func RequireRole(dir, what string, roles ...string) error {
	role, err := DirRole(dir)
	if err != nil || role == "" || slices.Contains(roles, role) {
		return err
	}
	return fmt.Errorf("%s: the keys directory %s belongs to %s, and %s runs at the %s operator: %w (give it that operator's directory)",
		what, dir, role, what, strings.Join(roles, " or "), ErrNotCustodian)
}

// owner returns the role whose private file is name, "" for none.
func owner(name string) string {
	for _, r := range Custody {
		if slices.Contains(r.Private, name) {
			return r.Role
		}
	}
	return ""
}

// CheckPrivate errors (wrapping ErrNotCustodian) when path is a private
// key file of a role directory whose role does not hold it: a relay's,
// aggregator's or operator's key (by file name), or a per-epoch issuer key
// of a kind ("randomness", "report", "arc") the role does not issue. It
// returns nil in a directory without a custody marker (single host).
func CheckPrivate(path string) error {
	dir, name := filepath.Split(filepath.Clean(path))
	dir = filepath.Clean(dir)
	kind := ""
	if filepath.Base(dir) == IssuerKeys {
		dir = filepath.Dir(dir)
		parts := strings.Split(strings.TrimSuffix(name, ".key"), ".")
		kind = parts[len(parts)-1]
	}
	role, err := DirRole(dir)
	if err != nil || role == "" {
		return err
	}
	rk, _ := RoleOf(role)
	if kind != "" {
		if slices.Contains(rk.IssuerKinds, kind) {
			return nil
		}
		return fmt.Errorf("%s: the %s issuer key is held by the %s operator, and this directory belongs to %s: %w (run the issuer for %s tokens at that operator)",
			path, kind, issuerOf(kind), role, ErrNotCustodian, kind)
	}
	base := name
	if m := oldKeyName.FindStringSubmatch(name); m != nil {
		base = m[1] + ".key"
	}
	if o := owner(base); o != "" && o != role {
		return fmt.Errorf("%s is the %s's private key and this directory belongs to %s: %w (that operator keeps it; import only its .pub with `crowdlog keys import-public`)",
			path, o, role, ErrNotCustodian)
	}
	return nil
}

// issuerOf returns the role that issues tokens of kind.
func issuerOf(kind string) string {
	for _, r := range Custody {
		if slices.Contains(r.IssuerKinds, kind) {
			return r.Role
		}
	}
	return "no"
}

// IssuerKindsOf returns the per-epoch issuer key kinds ("randomness",
// "report", "arc") that dir may hold: those of its role, or all three in a
// directory without a custody marker (single host).
func IssuerKindsOf(dir string) ([]string, error) {
	role, err := DirRole(dir)
	if err != nil {
		return nil, err
	}
	if role == "" {
		return []string{token.KindRandomness.String(), token.KindReport.String(), "arc"}, nil
	}
	rk, _ := RoleOf(role)
	return rk.IssuerKinds, nil
}

// ExportPublic copies the public parts of dir's role (its Public files,
// and the public halves of rotated-out HPKE keys) into out (created 0755,
// files 0644) with a BundleFile listing them, and returns the files
// written. It errors when dir has no custody marker (export from a role
// directory) or a public file is missing (run `crowdlog keys generate
// --role` first). Nothing private is ever read.
func ExportPublic(dir, out string) ([]string, error) {
	role, err := DirRole(dir)
	if err != nil {
		return nil, err
	}
	if role == "" {
		return nil, fmt.Errorf("keys directory %s has no custody marker: export from a role directory made by `crowdlog keys generate --role ROLE`", dir)
	}
	rk, _ := RoleOf(role)
	files := slices.Clone(rk.Public)
	for _, f := range rk.Private {
		if old, _ := filepath.Glob(filepath.Join(dir, strings.TrimSuffix(f, ".key")+".*.key.pub")); len(old) > 0 {
			for _, o := range old {
				files = append(files, filepath.Base(o))
			}
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("public bundle: %w", err)
	}
	var written []string
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, fmt.Errorf("public part %s of %s: %w (run `crowdlog keys generate --role %s --keys %s`)", f, role, err, role, dir)
		}
		if err := atomicfile.WriteFile(filepath.Join(out, f), b, 0o644); err != nil {
			return nil, fmt.Errorf("public bundle: %w", err)
		}
		written = append(written, f)
	}
	manifest := "role " + role + "\n" + strings.Join(written, "\n") + "\n"
	if err := atomicfile.WriteFile(filepath.Join(out, BundleFile), []byte(manifest), 0o644); err != nil {
		return nil, fmt.Errorf("public bundle: %w", err)
	}
	return written, nil
}

// ImportPublic installs the public bundle in bundle (written by
// ExportPublic at another operator) into dir (files 0644) and returns the
// exporting role and the files installed. It refuses, installing nothing, a
// bundle without BundleFile, one exported by dir's own role, one listing a
// file that is not a public part of its role, and one holding a private
// key (ErrPrivateInBundle: that key has left its operator; have it
// regenerated).
func ImportPublic(dir, bundle string) (string, []string, error) {
	b, err := os.ReadFile(filepath.Join(bundle, BundleFile))
	if err != nil {
		return "", nil, fmt.Errorf("public bundle %s: %w (export one with `crowdlog keys export-public`)", bundle, err)
	}
	lines := strings.Fields(strings.TrimSpace(string(b)))
	if len(lines) < 2 || lines[0] != "role" {
		return "", nil, fmt.Errorf("public bundle %s: %s does not start with \"role ROLE\"", bundle, BundleFile)
	}
	from, files := lines[1], lines[2:]
	rk, ok := RoleOf(from)
	if !ok {
		return "", nil, fmt.Errorf("public bundle %s: unknown role %q", bundle, from)
	}
	own, err := DirRole(dir)
	if err != nil {
		return "", nil, err
	}
	if own == from {
		return "", nil, fmt.Errorf("public bundle %s was exported by %s, this directory's own role: nothing to import", bundle, from)
	}
	entries, err := os.ReadDir(bundle)
	if err != nil {
		return "", nil, fmt.Errorf("public bundle: %w", err)
	}
	for _, e := range entries {
		if e.Name() == BundleFile {
			continue
		}
		if !strings.HasSuffix(e.Name(), ".pub") && e.Name() != EnrollmentFile || owner(e.Name()) != "" || e.IsDir() {
			return "", nil, fmt.Errorf("public bundle %s holds %s: %w; do not import it, have %s regenerate its keys", bundle, e.Name(), ErrPrivateInBundle, from)
		}
	}
	data := make(map[string][]byte, len(files))
	for _, f := range files {
		allowed := slices.Contains(rk.Public, f)
		if m := oldKeyName.FindStringSubmatch(strings.TrimSuffix(f, ".pub")); m != nil {
			allowed = slices.Contains(rk.Private, m[1]+".key") // a rotated-out key of this role
		}
		if !allowed || filepath.Base(f) != f {
			return "", nil, fmt.Errorf("public bundle %s lists %s, not a public part of %s", bundle, f, from)
		}
		if data[f], err = os.ReadFile(filepath.Join(bundle, f)); err != nil {
			return "", nil, fmt.Errorf("public bundle: %w", err)
		}
		if strings.Contains(string(data[f]), "PRIVATE KEY") {
			return "", nil, fmt.Errorf("public bundle %s: %s: %w; do not import it, have %s regenerate its keys", bundle, f, ErrPrivateInBundle, from)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("keys dir: %w", err)
	}
	for _, f := range files {
		if err := atomicfile.WriteFile(filepath.Join(dir, f), data[f], 0o644); err != nil {
			return "", nil, fmt.Errorf("import %s: %w", f, err)
		}
	}
	return from, files, nil
}

// PrivateFiles lists the private key files under dir (relative paths):
// HPKE and signing keys by name, and every file under IssuerKeys/ and
// RandomnessKeys/ except public lists. It is what a custody check or an
// operator's audit compares with the role's row of Custody.
func PrivateFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		name := d.Name()
		switch {
		case strings.HasSuffix(name, ".pub"), name == CustodyFile, name == EnrollmentFile, name == BundleFile:
		case strings.HasSuffix(name, ".key"):
			out = append(out, rel)
		}
		return nil
	})
	return out, err
}

// MarkIssuerRole marks dir, the volume of an issuer (and of the verifier
// that shares it), as role's keys directory, as GenerateRole would but
// creating no private key: the custody marker (0644) and IssuerKeys/
// (0700), so that the issuer creates and serves only role's kinds
// (IssuerKindsOf) and the verifier's loaders refuse the others. role is
// RoleAggregator (report tokens, ARC) or RoleRandomness (randomness
// tokens). It is idempotent. It errors for another role, for a dir marked
// for another role, and for a dir that holds issuer keys of a kind role
// does not issue or another role's private key (a volume a single-host
// issuer used: give the issuer a fresh one).
func MarkIssuerRole(dir, role string) error {
	rk, ok := RoleOf(role)
	if !ok || len(rk.IssuerKinds) == 0 {
		return fmt.Errorf("issuer role %q: use %s (report tokens, ARC credentials) or %s (randomness tokens)", role, RoleAggregator, RoleRandomness)
	}
	have, err := DirRole(dir)
	if err != nil {
		return err
	}
	if have == role {
		return os.MkdirAll(filepath.Join(dir, IssuerKeys), 0o700)
	}
	if have != "" {
		return fmt.Errorf("keys directory %s belongs to role %s, not %s: %w (give the %s's issuer its own volume)", dir, have, role, ErrNotCustodian, role)
	}
	priv, err := PrivateFiles(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("keys directory %s: %w", dir, err)
	}
	for _, p := range priv {
		name := filepath.Base(p)
		if filepath.Dir(p) == IssuerKeys {
			parts := strings.Split(strings.TrimSuffix(name, ".key"), ".")
			if kind := parts[len(parts)-1]; !slices.Contains(rk.IssuerKinds, kind) {
				return fmt.Errorf("keys directory %s holds %s, a %s issuer key the %s operator does not issue: %w; give its issuer a fresh volume", dir, p, kind, role, ErrNotCustodian)
			}
			continue
		}
		if o := owner(name); o != "" && o != role {
			return fmt.Errorf("keys directory %s holds %s, the %s's private key: %w; give the %s's issuer a fresh volume", dir, p, o, ErrNotCustodian, role)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, IssuerKeys), 0o700); err != nil {
		return fmt.Errorf("issuer keys dir: %w", err)
	}
	return writeMarker(dir, role)
}
