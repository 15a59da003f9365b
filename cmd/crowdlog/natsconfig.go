package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsserver"
)

func natsConfigCmd() *cobra.Command {
	var nkeys, listen, storeDir string
	var tls natsauth.TLSFiles
	var table bool
	c := &cobra.Command{
		Use:   "nats-config --nkeys DIR [--tls-cert FILE --tls-key FILE --tls-ca FILE] [--listen HOST:PORT] [--store-dir DIR]",
		Short: "Print the NATS server configuration: one NKey user per role with its subject permissions",
		Long: `nats-config prints the nats-server configuration file (nats-server -c FILE)
generated from crowdlog's permission table (infra/natsauth): JetStream on,
one account "` + natsauth.Account + `" with JetStream, and one NKey user per role whose
public key is in --nkeys DIR (nats-ROLE.pub), allowed to publish and
subscribe only to the subjects its role uses; responders may answer the
requests they receive (allow_responses). A role without a public key in DIR
is left out and cannot connect. With --tls-cert, --tls-key and --tls-ca the
server requires TLS and a client certificate signed by the CA.

Each operator creates its role's key with 'crowdlog nats-config nkey --role
ROLE --dir DIR', keeps the seed (nats-ROLE.nk; the role's --nats-nkey) and
sends the public key (nats-ROLE.pub) to whoever runs NATS, who collects them
in one directory and runs this command. --table prints the permission table
(Markdown) instead. Roles: ` + fmt.Sprint(natsauth.Roles) + `.`,
		Example: `  crowdlog nats-config nkey --role relay-a --dir keys
  crowdlog nats-config --nkeys nats-pub --tls-cert server.pem --tls-key server-key.pem --tls-ca ca.pem > nats.conf
  nats-server -c nats.conf`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if table {
				fmt.Fprint(cmd.OutOrStdout(), natsauth.Markdown())
				return nil
			}
			if nkeys == "" {
				return usageError(fmt.Errorf("--nkeys is required: the directory of the roles' nats-ROLE.pub files"))
			}
			keys, err := natsauth.PublicKeys(nkeys)
			if err != nil {
				return err
			}
			sc := natsauth.ServerConfig{Users: keys, Listen: listen, StoreDir: storeDir}
			if tls != (natsauth.TLSFiles{}) {
				sc.TLS = &tls
			}
			text, err := sc.Text()
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), text)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&nkeys, "nkeys", "", "directory with the public keys nats-ROLE.pub of the roles that may connect")
	f.StringVar(&listen, "listen", "", "client listen address HOST:PORT (default: nats-server's 0.0.0.0:4222)")
	f.StringVar(&storeDir, "store-dir", "", "JetStream store directory (default: nats-server's)")
	f.StringVar(&tls.Cert, "tls-cert", "", "the server's PEM certificate (TLS on with --tls-key and --tls-ca)")
	f.StringVar(&tls.Key, "tls-key", "", "the server's PEM private key")
	f.StringVar(&tls.CA, "tls-ca", "", "PEM CA bundle that signs the clients' certificates (verified)")
	f.BoolVar(&table, "table", false, "print the permission table (Markdown) instead of the configuration")
	c.AddCommand(natsNKeyCmd(), natsInitCmd())
	return c
}

func natsInitCmd() *cobra.Command {
	var dir string
	var tls natsauth.TLSFiles
	c := &cobra.Command{
		Use:   "init --dir DIR [--tls-cert FILE --tls-key FILE --tls-ca FILE]",
		Short: "One host only: create every role's NKey in DIR and write DIR/nats-server.conf",
		Long: `init is for trying crowdlog on one host, where one operator plays every role
(infra/deploy/compose.yaml): it creates the NKey of every role that has none
in DIR yet (nats-ROLE.nk, mode 0600, and nats-ROLE.pub; existing keys are
kept) and writes DIR/` + natsserver.ConfigFileName + ` from the permission table, as
'crowdlog nats-config --nkeys DIR' prints it. Give nats-server the file with
-c and each role its seed with --nats-nkey. On a real deployment each
operator creates only its own role's key ('crowdlog nats-config nkey').`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			keys, err := natsauth.EnsureAll(dir)
			if err != nil {
				return err
			}
			sc := natsauth.ServerConfig{Users: keys}
			if tls != (natsauth.TLSFiles{}) {
				sc.TLS = &tls
			}
			text, err := sc.Text()
			if err != nil {
				return err
			}
			path := filepath.Join(dir, natsserver.ConfigFileName)
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				return fmt.Errorf("write the NATS server config: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d role credentials in %s; server config %s\n", len(keys), dir, path)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dir, "dir", "nats-auth", "directory for the role NKeys and the server config")
	f.StringVar(&tls.Cert, "tls-cert", "", "the server's PEM certificate (TLS on with --tls-key and --tls-ca)")
	f.StringVar(&tls.Key, "tls-key", "", "the server's PEM private key")
	f.StringVar(&tls.CA, "tls-ca", "", "PEM CA bundle that signs the clients' certificates (verified)")
	return c
}

func natsNKeyCmd() *cobra.Command {
	var role, dir string
	c := &cobra.Command{
		Use:   "nkey --role ROLE --dir DIR",
		Short: "Create a role's NATS credential: an NKey seed (secret) and its public key",
		Long: `nkey creates a new user NKey (Ed25519) for ROLE in DIR: the seed
nats-ROLE.nk (mode 0600: the role's credential, given to it with
--nats-nkey or CROWDLOG_NATS_NKEY; it never leaves its operator) and the
public key nats-ROLE.pub (for 'crowdlog nats-config --nkeys'). It refuses
to overwrite an existing seed. Roles: ` + fmt.Sprint(natsauth.Roles) + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := natsauth.ParseRole(role)
			if err != nil {
				return usageError(err)
			}
			pub, err := natsauth.GenerateNKey(dir, r)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: seed %s (secret), public key %s: %s\n", r,
				filepath.Join(dir, natsauth.SeedFile(r)), filepath.Join(dir, natsauth.PublicFile(r)), pub)
			return nil
		},
	}
	c.Flags().StringVar(&role, "role", "", "the role: one of client, relay-a, relay-b, randomness, issuer, coordinator, aggregator, operator")
	c.Flags().StringVar(&dir, "dir", "keys", "directory to write the seed and public key to")
	_ = c.MarkFlagRequired("role")
	return c
}
