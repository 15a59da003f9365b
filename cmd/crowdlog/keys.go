package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/keydir"
)

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
	var dir, genRole string
	gen := &cobra.Command{
		Use:   "generate --keys DIR [--role ROLE]",
		Short: "Create one operator's private keys (--role) or, on a single host, every role's keys in DIR (existing keys are kept)",
		Long: `With --role ROLE (` + strings.Join(keydir.CustodyRoles(), ", ") + `),
generate creates only that operator's private keys in DIR (mode 0600) and
marks DIR as that role's (file ` + keydir.CustodyFile + `): loading another role's private
key from DIR then fails. Hand the others only the public parts
('crowdlog keys export-public') and install theirs ('crowdlog keys
import-public'). Per role:

` + custodyHelp() + `
Without --role (single-host mode: 'crowdlog run', the demo and tests, where
one person runs every role), generate writes X25519 HPKE key pairs relay-a.key, relay-b.key and
aggregator.key (mode 0600, private) with key id 1 and their public halves
*.key.pub, which clients need, and the Ed25519 credentials of PDD mode:
aggregator-sign.key (aggregate-vectors --sign-key signs unmasking requests)
and operator-sign.key (crowdlog coordinator advance), with their public
halves *.pub for the coordinator's --aggregator-key and --operator-key,
and control-sign.key, the pipeline operator's key that signs epoch open and
close records (open-epoch/close-epoch --control-key; aggregators verify with
control-sign.key.pub, --control-pub).
Existing files are never overwritten.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if genRole != "" {
				if err := keydir.GenerateRole(dir, genRole); err != nil {
					return err
				}
				priv, err := keydir.PrivateFiles(dir)
				if err != nil {
					return err
				}
				fmt.Printf("%s keys in %s (private, stay here: %s); export the public parts with: crowdlog keys export-public --keys %s --out %s.public\n",
					genRole, dir, strings.Join(priv, " "), dir, genRole)
				return nil
			}
			if err := keydir.EnsureKeys(dir); err != nil {
				return err
			}
			for _, name := range []string{keydir.AggregatorSignKey, keydir.OperatorSignKey, keydir.ControlSignKey} {
				if _, err := keydir.EnsureSigningKey(filepath.Join(dir, name)); err != nil {
					return err
				}
			}
			fmt.Println("keys in", dir)
			return nil
		},
	}
	list := &cobra.Command{
		Use:   "list --keys DIR",
		Short: "List keys by role with ids, status and fingerprints (public information only)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ks, err := keydir.List(dir)
			if err != nil {
				return err
			}
			fmt.Printf("%-10s %-4s %-8s %-16s %-24s %s\n", "ROLE", "ID", "STATUS", "FINGERPRINT", "FILE", "PRIVATE")
			for _, k := range ks {
				fmt.Printf("%-10s %-4d %-8s %-16s %-24s %s\n", k.Role, k.ID, k.Status, k.Fingerprint, filepath.Base(k.Pub), k.Private)
			}
			return nil
		},
	}
	var role string
	rotate := &cobra.Command{
		Use:   "rotate --keys DIR --role relay-a|relay-b|aggregator",
		Short: "Make a new current key pair for a role with the next key id, keeping the old one valid",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			oldID, newID, err := keydir.Rotate(dir, role)
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
		Use:   "retire --keys DIR --role ROLE --id ID",
		Short: "Delete a rotated-out key pair (ROLE.ID.key and its .pub); the current key cannot be retired",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := keydir.Retire(dir, role, id)
			if err != nil {
				return err
			}
			fmt.Printf("%s: key id %d retired; restart the %s without --key %s\n", role, id, role, path)
			return nil
		},
	}
	var out string
	export := &cobra.Command{
		Use:   "export-public --keys DIR --out BUNDLE",
		Short: "Write the public parts of DIR's role into the directory BUNDLE for the other operators",
		Long: `export-public copies the public parts of the role of DIR (made by 'keys
generate --role') into BUNDLE with a list of them (` + keydir.BundleFile + `); no private file is
read. Give BUNDLE to the operators that import it:

` + custodyHelp(),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			files, err := keydir.ExportPublic(dir, out)
			if err != nil {
				return err
			}
			fmt.Printf("public parts in %s: %s\n", out, strings.Join(files, " "))
			return nil
		},
	}
	export.Flags().StringVar(&out, "out", "", "bundle directory to write (created)")
	_ = export.MarkFlagRequired("out")
	imp := &cobra.Command{
		Use:   "import-public --keys DIR BUNDLE...",
		Short: "Install other operators' public bundles into DIR (refuses bundles holding a private key)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, b := range args {
				from, files, err := keydir.ImportPublic(dir, b)
				if err != nil {
					return err
				}
				fmt.Printf("imported from %s (%s): %s\n", from, b, strings.Join(files, " "))
			}
			return nil
		},
	}
	for _, sc := range []*cobra.Command{gen, list, rotate, retire, export, imp} {
		sc.Flags().StringVar(&dir, "keys", "keys", "keys directory (--dir: the former spelling)")
		respell(sc, map[string]string{"dir": "keys"})
	}
	for _, sc := range []*cobra.Command{rotate, retire} {
		sc.Flags().StringVar(&role, "role", "", "role: relay-a, relay-b or aggregator")
	}
	retire.Flags().IntVar(&id, "id", 0, "key id to retire")
	gen.Flags().StringVar(&genRole, "role", "", "create only this operator's keys: "+strings.Join(keydir.CustodyRoles(), ", ")+"; empty: every role's (single host)")
	c.AddCommand(gen, list, rotate, retire, export, imp)
	c.AddCommand(keysEnrollCmd())
	return c
}

// custodyHelp renders the custody table (keydir.Custody) for help texts:
// per role, the private keys it keeps, what it exports and imports.
func custodyHelp() string {
	var b strings.Builder
	list := func(xs []string) string {
		if len(xs) == 0 {
			return "-"
		}
		return strings.Join(xs, " ")
	}
	for _, r := range keydir.Custody {
		priv := append([]string{}, r.Private...)
		for _, k := range r.IssuerKinds {
			priv = append(priv, keydir.IssuerKeys+"/EPOCH."+k+".key")
		}
		if r.Randomness {
			priv = append(priv, keydir.RandomnessKeys+"/EPOCH.key")
		}
		fmt.Fprintf(&b, "  %-18s keeps %s\n  %-18s exports %s; imports %s\n", r.Role, list(priv), "", list(r.Public), list(r.Imports))
	}
	return b.String()
}
