package keydir

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"

	"github.com/crowdlog/crowdlog/protocol/onion"
)

// ValidRole reports whether r is a rotatable key role (one of Roles).
func ValidRole(r string) bool {
	for _, k := range Roles {
		if k == r {
			return true
		}
	}
	return false
}

// KeyInfo describes one HPKE key file of a keys directory: its Role (one of
// Roles), ID (the onion key id), Status ("current" or "old"), Fingerprint
// (first 8 bytes of SHA-256 of the public key, hex), the public file Pub and
// Private (whether the private file exists with mode 0600).
type KeyInfo struct {
	Role, Status, Fingerprint, Pub, Private string
	ID                                      int
}

// List reads every public key file of the directory. Fingerprint: the
// first 8 bytes of SHA-256 of the public key, hex. private says whether the
// private file exists and its mode is 0600.
func List(dir string) ([]KeyInfo, error) {
	var out []KeyInfo
	for _, role := range Roles {
		paths := []string{filepath.Join(dir, role+".key")}
		old, _ := filepath.Glob(filepath.Join(dir, role+".*.key"))
		sort.Strings(old)
		paths = append(paths, old...)
		for i, p := range paths {
			pk, err := onion.LoadPublicKey(p + ".pub")
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			raw, _ := pk.Key.MarshalBinary()
			fp := sha256.Sum256(raw)
			k := KeyInfo{Role: role, ID: int(pk.ID), Pub: p + ".pub", Fingerprint: fmt.Sprintf("%x", fp[:8]), Status: "current"}
			if i > 0 {
				k.Status = "old"
			}
			switch st, err := os.Stat(p); {
			case err != nil:
				k.Private = "absent (client copy)"
			case st.Mode().Perm()&0o077 != 0:
				k.Private = fmt.Sprintf("MODE %o: run chmod 600 %s", st.Mode().Perm(), p)
			default:
				k.Private = "0600"
			}
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no keys in %s (run `crowdlog keys generate --keys %s`)", dir, dir)
	}
	return out, nil
}

// Rotate renames ROLE.key (+ .pub) to ROLE.OLDID.key and writes a new
// ROLE.key with id = the largest id of the role + 1 (1..255). In a role
// directory it rotates only that role's key (ErrNotCustodian otherwise).
func Rotate(dir, role string) (oldID, newID int, err error) {
	if !ValidRole(role) {
		return 0, 0, fmt.Errorf("--role %q: use one of %v", role, Roles)
	}
	cur := filepath.Join(dir, role+".key")
	if err := CheckPrivate(cur); err != nil {
		return 0, 0, err
	}
	k, err := onion.LoadKeyPair(cur)
	if err != nil {
		return 0, 0, fmt.Errorf("rotate %s: %w", role, err)
	}
	oldID, maxID := int(k.ID), int(k.ID)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if m := oldKeyName.FindStringSubmatch(e.Name()); m != nil && m[1] == role {
			n, _ := strconv.Atoi(m[2])
			maxID = max(maxID, n)
		}
	}
	if maxID >= 255 {
		return 0, 0, fmt.Errorf("rotate %s: key ids exhausted (largest is %d); retire old keys and regenerate", role, maxID)
	}
	newID = maxID + 1
	old := filepath.Join(dir, fmt.Sprintf("%s.%d.key", role, oldID))
	if _, err := os.Stat(old); err == nil {
		return 0, 0, fmt.Errorf("rotate %s: %s exists; retire it first", role, old)
	}
	nk, err := onion.GenerateKeyPair(byte(newID))
	if err != nil {
		return 0, 0, err
	}
	tmp := filepath.Join(dir, "."+role+".new.key")
	if err := SaveKeyPair(tmp, role, nk); err != nil {
		return 0, 0, err
	}
	if err := os.Rename(cur, old); err != nil {
		return 0, 0, err
	}
	if err := os.Rename(cur+".pub", old+".pub"); err != nil {
		return 0, 0, err
	}
	if err := os.Rename(tmp, cur); err != nil {
		return 0, 0, err
	}
	return oldID, newID, os.Rename(tmp+".pub", cur+".pub")
}

// Key files in a keys directory: ROLE.key is a role's
// current HPKE key pair (mode 0600) and ROLE.key.pub its public half for
// clients; `keys rotate` keeps the previous pair as ROLE.ID.key (+ .pub) so
// relays and the aggregator can accept both (--key twice) until `keys
// retire` removes it. Roles: relay-a, relay-b, aggregator, and Prio3
// mode's prio3-leader, prio3-helper and prio3-collector.
var Roles = []string{"relay-a", "relay-b", "aggregator", RolePrio3Leader, RolePrio3Helper, RolePrio3Collector}
var oldKeyName = regexp.MustCompile(`^(relay-a|relay-b|aggregator|prio3-leader|prio3-helper|prio3-collector)\.([0-9]+)\.key$`)

// Retire deletes the rotated-out key pair ROLE.ID.key of dir and its .pub
// and returns the private key's path. The current key (ROLE.key) cannot be
// retired this way; it errors for an unknown role or a missing file.
func Retire(dir, role string, id int) (string, error) {
	if !ValidRole(role) {
		return "", fmt.Errorf("--role %q: use one of %v", role, Roles)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s.%d.key", role, id))
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no rotated-out key %s: %w (see `crowdlog keys list`)", path, err)
	}
	if err := os.Remove(path); err != nil {
		return "", err
	}
	_ = os.Remove(path + ".pub")
	return path, nil
}
