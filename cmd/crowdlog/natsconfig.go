package main

import (
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsserver"
)

func natsConfigCmd() *cobra.Command {
	var o natsauth.ConfigOptions
	c := &cobra.Command{
		Use:   "nats-config --nkeys DIR [--tls-cert FILE --tls-key FILE --tls-ca FILE] [--listen HOST:PORT] [--store-dir DIR]",
		Short: "Print the NATS server configuration: one NKey user per role with its subject permissions",
		Long:  natsauth.ConfigHelp,
		Example: `  crowdlog nats-config nkey --role relay-a --dir keys
  crowdlog nats-config --nkeys nats-pub --tls-cert server.pem --tls-key server-key.pem --tls-ca ca.pem > nats.conf
  nats-server -c nats.conf`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return usageError(err)
			}
			return o.Write(cmd.OutOrStdout())
		},
	}
	o.AddFlags(c.Flags())
	c.AddCommand(natsNKeyCmd(), natsInitCmd(), natsRouteSecretCmd())
	return c
}

func natsInitCmd() *cobra.Command {
	var o natsauth.InitOptions
	c := &cobra.Command{
		Use:   "init --dir DIR [--tls-cert FILE --tls-key FILE --tls-ca FILE]",
		Short: "One host only: create every role's NKey in DIR and write DIR/nats-server.conf",
		Long:  natsauth.InitHelp(natsserver.ConfigFileName),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.Init(cmd.OutOrStdout(), natsserver.ConfigFileName)
		},
	}
	o.AddFlags(c.Flags())
	return c
}

func natsRouteSecretCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "route-secret --out FILE",
		Short: "Create the route password of a NATS cluster (32 random bytes, hex; mode 0600)",
		Long:  natsauth.RouteSecretHelp,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return natsauth.WriteRouteSecret(cmd.OutOrStdout(), out) },
	}
	c.Flags().StringVar(&out, "out", "nats-route.secret", "file to write the route password to")
	return c
}

func natsNKeyCmd() *cobra.Command {
	var role, dir string
	c := &cobra.Command{
		Use:   "nkey --role ROLE --dir DIR",
		Short: "Create a role's NATS credential: an NKey seed (secret) and its public key",
		Long:  natsauth.NKeyHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := natsauth.ParseRole(role)
			if err != nil {
				return usageError(err)
			}
			return natsauth.WriteNKey(cmd.OutOrStdout(), dir, r)
		},
	}
	c.Flags().StringVar(&role, "role", "", "the role: one of client, relay-a, relay-b, randomness, issuer, coordinator, aggregator, operator")
	c.Flags().StringVar(&dir, "dir", "keys", "directory to write the seed and public key to")
	_ = c.MarkFlagRequired("role")
	return c
}
