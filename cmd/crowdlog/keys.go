package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// Key files in a keys directory (issue 3 item 5): ROLE.key is a role's
// current HPKE key pair (mode 0600) and ROLE.key.pub its public half for
// clients; `keys rotate` keeps the previous pair as ROLE.ID.key (+ .pub) so
// relays and the aggregator can accept both (--key twice) until `keys
// retire` removes it. Roles: relay-a, relay-b, aggregator.
var keyRoles = []string{"relay-a", "relay-b", "aggregator"}

var oldKeyName = regexp.MustCompile(`^(relay-a|relay-b|aggregator)\.([0-9]+)\.key$`)

func keysCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "keys",
		Short: "Generate, list, rotate and retire relay and aggregator HPKE keys",
		Long: `keys manages the X25519 HPKE key pairs (RFC 9180) of relay a, relay b and the
aggregator in a keys directory. Each layer of an onion names the key id it was
sealed for; a relay or aggregator started with two --key files accepts both,
which is how a rotation works:

  crowdlog keys rotate --role relay-a     # relay-a.key is new (id+1); the old one is relay-a.ID.key
  crowdlog relay --name a --key keys/relay-a.key --key keys/relay-a.1.key   # restart: both valid
  # clients pick up keys/relay-a.key.pub; once old onions drained:
  crowdlog keys retire --role relay-a --id 1

Private keys are written with mode 0600 and never printed or logged.`,
	}
	var dir string
	gen := &cobra.Command{
		Use:   "generate --dir DIR",
		Short: "Create relay-a, relay-b and aggregator key pairs in DIR (existing keys are kept)",
		Long: `generate writes X25519 HPKE key pairs relay-a.key, relay-b.key and
aggregator.key (mode 0600, private) with key id 1 and their public halves
*.key.pub, which clients need. Existing files are never overwritten.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := runner.EnsureKeys(dir); err != nil {
				return err
			}
			fmt.Println("keys in", dir)
			return nil
		},
	}
	list := &cobra.Command{
		Use:   "list --dir DIR",
		Short: "List keys by role with ids, status and fingerprints (public information only)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ks, err := listKeys(dir)
			if err != nil {
				return err
			}
			fmt.Printf("%-10s %-4s %-8s %-16s %-24s %s\n", "ROLE", "ID", "STATUS", "FINGERPRINT", "FILE", "PRIVATE")
			for _, k := range ks {
				fmt.Printf("%-10s %-4d %-8s %-16s %-24s %s\n", k.role, k.id, k.status, k.fingerprint, filepath.Base(k.pub), k.private)
			}
			return nil
		},
	}
	var role string
	rotate := &cobra.Command{
		Use:   "rotate --dir DIR --role relay-a|relay-b|aggregator",
		Short: "Make a new current key pair for a role with the next key id, keeping the old one valid",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			oldID, newID, err := rotateKey(dir, role)
			if err != nil {
				return err
			}
			name := role
			fmt.Printf("%s: new key id %d in %s (public %s.pub); previous key id %d kept as %s\n",
				role, newID, filepath.Join(dir, name+".key"), filepath.Join(dir, name+".key"), oldID, filepath.Join(dir, fmt.Sprintf("%s.%d.key", name, oldID)))
			fmt.Printf("restart the %s with both keys: --key %s --key %s\n", role,
				filepath.Join(dir, name+".key"), filepath.Join(dir, fmt.Sprintf("%s.%d.key", name, oldID)))
			fmt.Printf("then give clients %s.pub; retire id %d once its onions drained\n", filepath.Join(dir, name+".key"), oldID)
			return nil
		},
	}
	var id int
	retire := &cobra.Command{
		Use:   "retire --dir DIR --role ROLE --id ID",
		Short: "Delete a rotated-out key pair (ROLE.ID.key and its .pub); the current key cannot be retired",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !validRole(role) {
				return fmt.Errorf("--role %q: use one of %v", role, keyRoles)
			}
			path := filepath.Join(dir, fmt.Sprintf("%s.%d.key", role, id))
			if _, err := os.Stat(path); err != nil {
				return fmt.Errorf("no rotated-out key %s: %w (see `crowdlog keys list`)", path, err)
			}
			if err := os.Remove(path); err != nil {
				return err
			}
			_ = os.Remove(path + ".pub")
			fmt.Printf("%s: key id %d retired; restart the %s without --key %s\n", role, id, role, path)
			return nil
		},
	}
	for _, sc := range []*cobra.Command{gen, list, rotate, retire} {
		sc.Flags().StringVar(&dir, "dir", "keys", "keys directory")
	}
	for _, sc := range []*cobra.Command{rotate, retire} {
		sc.Flags().StringVar(&role, "role", "", "role: relay-a, relay-b or aggregator")
	}
	retire.Flags().IntVar(&id, "id", 0, "key id to retire")
	c.AddCommand(gen, list, rotate, retire)
	return c
}

func validRole(r string) bool {
	for _, k := range keyRoles {
		if k == r {
			return true
		}
	}
	return false
}

type keyInfo struct {
	role, status, fingerprint, pub, private string
	id                                      int
}

// listKeys reads every public key file of the directory. Fingerprint: the
// first 8 bytes of SHA-256 of the public key, hex. private says whether the
// private file exists and its mode is 0600.
func listKeys(dir string) ([]keyInfo, error) {
	var out []keyInfo
	for _, role := range keyRoles {
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
			k := keyInfo{role: role, id: int(pk.ID), pub: p + ".pub", fingerprint: fmt.Sprintf("%x", fp[:8]), status: "current"}
			if i > 0 {
				k.status = "old"
			}
			switch st, err := os.Stat(p); {
			case err != nil:
				k.private = "absent (client copy)"
			case st.Mode().Perm()&0o077 != 0:
				k.private = fmt.Sprintf("MODE %o: run chmod 600 %s", st.Mode().Perm(), p)
			default:
				k.private = "0600"
			}
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no keys in %s (run `crowdlog keys generate --dir %s`)", dir, dir)
	}
	return out, nil
}

// rotateKey renames ROLE.key (+ .pub) to ROLE.OLDID.key and writes a new
// ROLE.key with id = the largest id of the role + 1 (1..255).
func rotateKey(dir, role string) (oldID, newID int, err error) {
	if !validRole(role) {
		return 0, 0, fmt.Errorf("--role %q: use one of %v", role, keyRoles)
	}
	cur := filepath.Join(dir, role+".key")
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
	if err := onion.SaveKeyPair(tmp, role, nk); err != nil {
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
