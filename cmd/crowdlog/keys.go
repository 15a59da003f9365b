package main

import (
	"errors"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/keydir"
)

func keysCmd() *cobra.Command {
	c := &cobra.Command{Use: "keys", Short: "Generate, list, rotate and retire relay and aggregator HPKE keys", Long: keydir.KeysHelp}
	c.AddCommand(keysGenerateCmd(), keysListCmd(), keysRotateCmd(), keysRetireCmd(), keysExportCmd(), keysImportCmd(), keysEnrollCmd())
	return c
}

// keysDirFlag adds --keys (formerly --dir) to c, filling dir, with usage.
func keysDirFlag(c *cobra.Command, dir *string, usage string) *pflag.FlagSet {
	c.Flags().StringVar(dir, "keys", "keys", usage)
	respell(c, map[string]string{"dir": "keys"})
	return c.Flags()
}

func keysGenerateCmd() *cobra.Command {
	var dir, role string
	c := &cobra.Command{
		Use:   "generate --keys DIR [--role ROLE]",
		Short: "Create one operator's private keys (--role) or, on a single host, every role's keys in DIR (existing keys are kept)",
		Long:  keydir.GenerateHelp(),
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return keydir.Generate(os.Stdout, dir, role) },
	}
	keysDirFlag(c, &dir, "keys directory (--dir: the former spelling)").StringVar(&role, "role", "", "create only this operator's keys: "+strings.Join(keydir.CustodyRoles(), ", ")+"; empty: every role's (single host)")
	return c
}

func keysListCmd() *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:   "list --keys DIR",
		Short: "List keys by role with ids, status and fingerprints (public information only)",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return keydir.WriteList(os.Stdout, dir) },
	}
	keysDirFlag(c, &dir, "keys directory (--dir: the former spelling)")
	return c
}

func keysRotateCmd() *cobra.Command {
	var dir, role string
	c := &cobra.Command{
		Use:   "rotate --keys DIR --role relay-a|relay-b|aggregator",
		Short: "Make a new current key pair for a role with the next key id, keeping the old one valid",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return keydir.RotateAndReport(os.Stdout, dir, role) },
	}
	keysDirFlag(c, &dir, "keys directory (--dir: the former spelling)").StringVar(&role, "role", "", "role: relay-a, relay-b or aggregator")
	return c
}

func keysRetireCmd() *cobra.Command {
	var dir, role string
	var id int
	c := &cobra.Command{
		Use:   "retire --keys DIR --role ROLE --id ID",
		Short: "Delete a rotated-out key pair (ROLE.ID.key and its .pub); the current key cannot be retired",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return keydir.RetireAndReport(os.Stdout, dir, role, id) },
	}
	f := keysDirFlag(c, &dir, "keys directory (--dir: the former spelling)")
	f.StringVar(&role, "role", "", "role: relay-a, relay-b or aggregator")
	f.IntVar(&id, "id", 0, "key id to retire")
	return c
}

func keysExportCmd() *cobra.Command {
	var dir, out string
	c := &cobra.Command{
		Use:   "export-public --keys DIR --out BUNDLE",
		Short: "Write the public parts of DIR's role into the directory BUNDLE for the other operators",
		Long:  keydir.ExportHelp(),
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return keydir.ExportAndReport(os.Stdout, dir, out) },
	}
	c.Flags().StringVar(&out, "out", "", "bundle directory to write (created)")
	_ = c.MarkFlagRequired("out")
	keysDirFlag(c, &dir, "keys directory (--dir: the former spelling)")
	return c
}

func keysImportCmd() *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:   "import-public --keys DIR BUNDLE...",
		Short: "Install other operators' public bundles into DIR (refuses bundles holding a private key)",
		Args:  cobra.MinimumNArgs(1),
		RunE:  func(_ *cobra.Command, args []string) error { return keydir.ImportAndReport(os.Stdout, dir, args) },
	}
	keysDirFlag(c, &dir, "keys directory (--dir: the former spelling)")
	return c
}

func keysEnrollCmd() *cobra.Command {
	var dir, out string
	var generate bool
	c := &cobra.Command{
		Use:   "enroll --keys DIR (PUBKEY-FILE... | --generate [--out FILE])",
		Short: "Enroll a client identity key at the issuer (its enrollment list)",
		Long:  keydir.EnrollHelp,
		Args: func(_ *cobra.Command, args []string) error {
			if generate == (len(args) > 0) {
				return errors.New("give PUBKEY-FILE (one or more) or --generate, not both")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error { return keydir.Enroll(os.Stdout, dir, args, out, generate) },
	}
	f := keysDirFlag(c, &dir, "keys directory of the issuer (--dir: the former spelling)")
	f.BoolVar(&generate, "generate", false, "generate a new identity key (written to --out) and enroll it")
	f.StringVar(&out, "out", "", "with --generate: the new identity key file")
	return c
}
