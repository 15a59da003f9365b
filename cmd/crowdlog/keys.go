package main

import (
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/keydir"
)

const keysDirUsage = "keys directory (--dir: the former spelling)"

func keysCmd() *cobra.Command {
	c := &cobra.Command{Use: "keys", Short: "Generate, list, rotate and retire relay and aggregator HPKE keys", Long: keydir.KeysHelp}
	c.AddCommand(keysGenerateCmd(), keysListCmd(), keysRotateCmd(), keysRetireCmd(), keysExportCmd(), keysImportCmd(), keysEnrollCmd(), keysPrio3VerifyCmd())
	return c
}

// keysSub completes c, a keys subcommand: --keys DIR (--dir, the former
// spelling) fills dir, run runs it, and it takes no arguments unless c.Args
// says otherwise.
func keysSub(c *cobra.Command, dir *string, usage string, run func(args []string) error) *cobra.Command {
	if c.Args == nil {
		c.Args = cobra.NoArgs
	}
	c.RunE = func(_ *cobra.Command, args []string) error { return run(args) }
	c.Flags().StringVar(dir, "keys", "keys", usage)
	respell(c, map[string]string{"dir": "keys"})
	return c
}

func keysGenerateCmd() *cobra.Command {
	var dir, role string
	c := keysSub(&cobra.Command{Use: "generate --keys DIR [--role ROLE]", Long: keydir.GenerateHelp(),
		Short: "Create one operator's private keys (--role) or, on a single host, every role's keys in DIR (existing keys are kept)"},
		&dir, keysDirUsage, func([]string) error { return keydir.Generate(os.Stdout, dir, role) })
	c.Flags().StringVar(&role, "role", "", "create only this operator's keys: "+strings.Join(keydir.CustodyRoles(), ", ")+"; empty: every role's (single host)")
	return c
}

func keysListCmd() *cobra.Command {
	var dir string
	return keysSub(&cobra.Command{Use: "list --keys DIR", Short: "List keys by role with ids, status and fingerprints (public information only)"},
		&dir, keysDirUsage, func([]string) error { return keydir.WriteList(os.Stdout, dir) })
}

func keysRotateCmd() *cobra.Command {
	var dir, role string
	c := keysSub(&cobra.Command{Use: "rotate --keys DIR --role relay-a|relay-b|aggregator", Short: "Make a new current key pair for a role with the next key id, keeping the old one valid"},
		&dir, keysDirUsage, func([]string) error { return keydir.RotateAndReport(os.Stdout, dir, role) })
	c.Flags().StringVar(&role, "role", "", "role: relay-a, relay-b or aggregator")
	return c
}

func keysRetireCmd() *cobra.Command {
	var dir, role string
	var id int
	c := keysSub(&cobra.Command{Use: "retire --keys DIR --role ROLE --id ID", Short: "Delete a rotated-out key pair (ROLE.ID.key and its .pub); the current key cannot be retired"},
		&dir, keysDirUsage, func([]string) error { return keydir.RetireAndReport(os.Stdout, dir, role, id) })
	c.Flags().StringVar(&role, "role", "", "role: relay-a, relay-b or aggregator")
	c.Flags().IntVar(&id, "id", 0, "key id to retire")
	return c
}

func keysExportCmd() *cobra.Command {
	var dir, out string
	c := keysSub(&cobra.Command{Use: "export-public --keys DIR --out BUNDLE", Long: keydir.ExportHelp(),
		Short: "Write the public parts of DIR's role into the directory BUNDLE for the other operators"},
		&dir, keysDirUsage, func([]string) error { return keydir.ExportAndReport(os.Stdout, dir, out) })
	c.Flags().StringVar(&out, "out", "", "bundle directory to write (created)")
	_ = c.MarkFlagRequired("out")
	return c
}

func keysImportCmd() *cobra.Command {
	var dir string
	return keysSub(&cobra.Command{Use: "import-public --keys DIR BUNDLE...", Args: cobra.MinimumNArgs(1),
		Short: "Install other operators' public bundles into DIR (refuses bundles holding a private key)"},
		&dir, keysDirUsage, func(args []string) error { return keydir.ImportAndReport(os.Stdout, dir, args) })
}

func keysEnrollCmd() *cobra.Command {
	var dir, out string
	var generate bool
	c := keysSub(&cobra.Command{Use: "enroll --keys DIR (PUBKEY-FILE... | --generate [--out FILE])", Long: keydir.EnrollHelp,
		Short: "Enroll a client identity key at the issuer (its enrollment list)",
		Args:  func(_ *cobra.Command, args []string) error { return keydir.EnrollArgs(generate, len(args)) }}, &dir, "keys directory of the issuer (--dir: the former spelling)", func(args []string) error { return keydir.Enroll(os.Stdout, dir, args, out, generate) })
	c.Flags().BoolVar(&generate, "generate", false, "generate a new identity key (written to --out) and enroll it")
	c.Flags().StringVar(&out, "out", "", "with --generate: the new identity key file")
	return c
}
