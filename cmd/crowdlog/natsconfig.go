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
	var cluster natsauth.Cluster
	var routeSecret string
	c := &cobra.Command{
		Use:   "nats-config --nkeys DIR [--tls-cert FILE --tls-key FILE --tls-ca FILE] [--listen HOST:PORT] [--store-dir DIR]",
		Short: "Print the NATS server configuration: one NKey user per role with its subject permissions",
		Long: `nats-config prints the nats-server configuration file (nats-server -c FILE)
generated from crowdlog's permission table (infra/natsauth): JetStream on,
one account "` + natsauth.Account + `" with JetStream, and one NKey user per role whose
public key is in --nkeys DIR (nats-ROLE.pub), allowed to publish and
subscribe only to the subjects its role uses; responders may answer the
requests they receive (allow_responses). A role without a public key in DIR
is left out and cannot connect. The client credential gets an account of
its own, "` + natsauth.ClientAccount + `", which imports only relay a's inbox
and the client request subjects. With --tls-cert, --tls-key and --tls-ca the
server requires TLS and a client certificate signed by the CA. For a
cluster give --cluster-name, --cluster-listen, --routes and --route-secret
(the same file on every server, from 'crowdlog nats-config route-secret'):
every route must authenticate with it, since a route is not subject to the
permission table. The printed file then holds the route password: keep it
as secret as the route secret (mode 0600; on Kubernetes a Secret, not a
ConfigMap).

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
			if cluster.Name != "" || cluster.Listen != "" || len(cluster.Routes) > 0 || routeSecret != "" {
				if routeSecret == "" {
					return usageError(fmt.Errorf("--route-secret is required with a cluster: the file of the route password (crowdlog nats-config route-secret --out FILE)"))
				}
				if cluster.Password, err = natsauth.ReadRouteSecret(routeSecret); err != nil {
					return err
				}
				sc.Cluster = &cluster
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
	f.StringVar(&cluster.Name, "cluster-name", "", "NATS cluster name (a cluster needs --cluster-listen, --routes and --route-secret too)")
	f.StringVar(&cluster.Listen, "cluster-listen", "", "route listen address HOST:PORT (e.g. 0.0.0.0:6222)")
	f.StringSliceVar(&cluster.Routes, "routes", nil, "HOST:PORT of every server's route port, comma-separated")
	f.StringVar(&routeSecret, "route-secret", "", "file with the route password every server of the cluster shares (crowdlog nats-config route-secret)")
	c.AddCommand(natsNKeyCmd(), natsInitCmd(), natsRouteSecretCmd())
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

func natsRouteSecretCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "route-secret --out FILE",
		Short: "Create the route password of a NATS cluster (32 random bytes, hex; mode 0600)",
		Long: `route-secret writes a new route password to FILE (mode 0600; it refuses
to overwrite one). Give the same file to 'crowdlog nats-config
--route-secret' for every server of the cluster: each server then accepts
only routes that authenticate as user "` + natsauth.RouteUser + `" with it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := natsauth.GenerateRouteSecret(out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "route password in %s (secret; the same file for every server of the cluster)\n", out)
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "nats-route.secret", "file to write the route password to")
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
