package keydir

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// The operator's commands on a keys directory (`crowdlog keys …`): their
// long help and the steps each runs, writing its report to w.

// KeysHelp is the long help of `crowdlog keys`.
const KeysHelp = `keys manages the X25519 HPKE key pairs (RFC 9180) of relay a, relay b and the
aggregator in a keys directory. Each layer of an onion names the key id it was
sealed for; a relay or aggregator started with two --key files accepts both,
which is how a rotation works:

  crowdlog keys rotate --role relay-a     # relay-a.key is new (id+1); the old one is relay-a.ID.key
  crowdlog relay --name a --key keys/relay-a.key --key keys/relay-a.1.key   # restart: both valid
  # clients pick up keys/relay-a.key.pub; once old onions drained:
  crowdlog keys retire --role relay-a --id 1

Private keys are written with mode 0600 and never printed or logged.`

// GenerateHelp is the long help of `crowdlog keys generate`.
func GenerateHelp() string {
	return `With --role ROLE (` + strings.Join(CustodyRoles(), ", ") + `),
generate creates only that operator's private keys in DIR (mode 0600) and
marks DIR as that role's (file ` + CustodyFile + `): loading another role's private
key from DIR then fails. Hand the others only the public parts
('crowdlog keys export-public') and install theirs ('crowdlog keys
import-public'). Per role:

` + CustodyHelp() + `
Without --role (single-host mode: 'crowdlog run', the demo and tests, where
one person runs every role), generate writes X25519 HPKE key pairs relay-a.key, relay-b.key and
aggregator.key (mode 0600, private) with key id 1 and their public halves
*.key.pub, which clients need, and the Ed25519 credentials of PDD mode:
aggregator-sign.key (aggregate-vectors --sign-key signs unmasking requests)
and operator-sign.key (crowdlog coordinator advance), with their public
halves *.pub for the coordinator's --aggregator-key and --operator-key,
and control-sign.key, the pipeline operator's key that signs epoch open and
close records (open-epoch/close-epoch --control-key; aggregators verify with
control-sign.key.pub, --control-pub), and coordinator-sign.key, the PDD
coordinator's key that signs rosters, ticks and commitments on "vectors"
(coordinator --sign-key; aggregate-vectors verifies with
coordinator-sign.key.pub, --coordinator-pub).
Existing files are never overwritten.`
}

// ExportHelp is the long help of `crowdlog keys export-public`.
func ExportHelp() string {
	return `export-public copies the public parts of the role of DIR (made by 'keys
generate --role') into BUNDLE with a list of them (` + BundleFile + `); no private file is
read. Give BUNDLE to the operators that import it:

` + CustodyHelp()
}

// EnrollHelp is the long help of `crowdlog keys enroll`.
const EnrollHelp = `enroll adds a client's Ed25519 identity public key to DIR/` + EnrollmentFile + `, the
issuer's default attester (a running issuer picks it up without restart).
Each PUBKEY-FILE is a PEM public key (the identity key's .pub) or a PEM
private key whose public half is taken; several are enrolled in one write
(a batch of devices), and none when one does not parse. With --generate, a new identity key is
written to --out (mode 0600, public half in --out.pub) and enrolled; give
it to the client (ingest --state DIR keeps its own identity key, whose .pub
is what to enroll).`

// CustodyHelp renders the custody table (Custody) for help texts: per
// role, the private keys it keeps, what it exports and imports.
func CustodyHelp() string {
	var b strings.Builder
	list := func(xs []string) string {
		if len(xs) == 0 {
			return "-"
		}
		return strings.Join(xs, " ")
	}
	for _, r := range Custody {
		priv := append([]string{}, r.Private...)
		for _, k := range r.IssuerKinds {
			priv = append(priv, IssuerKeys+"/EPOCH."+k+".key")
		}
		if r.Randomness {
			priv = append(priv, RandomnessKeys+"/EPOCH.key")
		}
		fmt.Fprintf(&b, "  %-18s keeps %s\n  %-18s exports %s; imports %s\n", r.Role, list(priv), "", list(r.Public), list(r.Imports))
	}
	return b.String()
}

// Generate creates role's private keys in dir (GenerateRole) or, with
// role "", every role's keys of a single host (EnsureKeys and the
// aggregator's, operator's and control signing keys); existing files are
// kept. It writes what it made to w.
func Generate(w io.Writer, dir, role string) error {
	if role != "" {
		if err := GenerateRole(dir, role); err != nil {
			return err
		}
		priv, err := PrivateFiles(dir)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s keys in %s (private, stay here: %s); export the public parts with: crowdlog keys export-public --keys %s --out %s.public\n",
			role, dir, strings.Join(priv, " "), dir, role)
		return nil
	}
	if err := EnsureKeys(dir); err != nil {
		return err
	}
	for _, name := range []string{AggregatorSignKey, OperatorSignKey, ControlSignKey, CoordinatorSignKey} {
		if _, err := EnsureSigningKey(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "keys in", dir)
	return nil
}

// WriteList writes the keys of dir (List) as a table to w: role, id,
// status, fingerprint, public file and private file.
func WriteList(w io.Writer, dir string) error {
	ks, err := List(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%-10s %-4s %-8s %-16s %-24s %s\n", "ROLE", "ID", "STATUS", "FINGERPRINT", "FILE", "PRIVATE")
	for _, k := range ks {
		fmt.Fprintf(w, "%-10s %-4d %-8s %-16s %-24s %s\n", k.Role, k.ID, k.Status, k.Fingerprint, filepath.Base(k.Pub), k.Private)
	}
	return nil
}

// RotateAndReport rotates role's key in dir (Rotate) and writes the new
// and kept files to w, with the restart and retire steps that follow.
func RotateAndReport(w io.Writer, dir, role string) error {
	oldID, newID, err := Rotate(dir, role)
	if err != nil {
		return err
	}
	cur, old := filepath.Join(dir, role+".key"), filepath.Join(dir, fmt.Sprintf("%s.%d.key", role, oldID))
	fmt.Fprintf(w, "%s: new key id %d in %s (public %s.pub); previous key id %d kept as %s\n", role, newID, cur, cur, oldID, old)
	fmt.Fprintf(w, "restart the %s with both keys: --key %s --key %s\n", role, cur, old)
	fmt.Fprintf(w, "then give clients %s.pub; retire id %d once its onions drained\n", cur, oldID)
	return nil
}

// RetireAndReport retires role's key id in dir (Retire) and writes the
// restart step to w.
func RetireAndReport(w io.Writer, dir, role string, id int) error {
	path, err := Retire(dir, role, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: key id %d retired; restart the %s without --key %s\n", role, id, role, path)
	return nil
}

// ExportAndReport writes dir's public parts to bundle out (ExportPublic)
// and their names to w.
func ExportAndReport(w io.Writer, dir, out string) error {
	files, err := ExportPublic(dir, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "public parts in %s: %s\n", out, strings.Join(files, " "))
	return nil
}

// ImportAndReport installs each bundle into dir (ImportPublic) and writes
// what came from whom to w.
func ImportAndReport(w io.Writer, dir string, bundles []string) error {
	for _, b := range bundles {
		from, files, err := ImportPublic(dir, b)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "imported from %s (%s): %s\n", from, b, strings.Join(files, " "))
	}
	return nil
}

// EnrollArgs errors unless enroll got either PUBKEY-FILE arguments (n > 0)
// or generate, not both.
func EnrollArgs(generate bool, n int) error {
	if generate == (n > 0) {
		return errors.New("give PUBKEY-FILE (one or more) or --generate, not both")
	}
	return nil
}

// Enroll adds identity public keys to dir's enrollment list
// (EnrollIdentities): those of files (PEM public keys, or private keys
// whose public half is taken) and, with generateOut set, of a new identity
// key written there. Nothing is enrolled when a file does not parse. It
// writes each enrolled key (hex) to w.
func Enroll(w io.Writer, dir string, files []string, generateOut string, generate bool) error {
	if err := RequireRole(dir, "keys enroll", RoleAttester); err != nil {
		return err
	}
	var pubs []ed25519.PublicKey
	if generate {
		if generateOut == "" {
			return errors.New("--generate needs --out FILE for the new identity key")
		}
		k, err := EnsureIdentityKey(generateOut)
		if err != nil {
			return err
		}
		pubs = append(pubs, k.Public().(ed25519.PublicKey))
	}
	for _, a := range files {
		pub, err := LoadSigningPublic(a)
		if err != nil {
			return fmt.Errorf("%s: %w (nothing enrolled)", a, err)
		}
		pubs = append(pubs, pub)
	}
	if err := EnrollIdentities(dir, pubs); err != nil {
		return err
	}
	for _, pub := range pubs {
		fmt.Fprintf(w, "enrolled %s in %s\n", hex.EncodeToString(pub), filepath.Join(dir, EnrollmentFile))
	}
	return nil
}
