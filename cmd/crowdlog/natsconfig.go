package main

import (
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsserver"
)

func natsConfigCmd() *cobra.Command {
	var o natsauth.ConfigOptions
	c := &cobra.Command{
		Use:     "nats-config --nkeys DIR [--tls-cert FILE --tls-key FILE --tls-ca FILE] [--listen HOST:PORT] [--store-dir DIR] [--out FILE]",
		Short:   "Write the NATS server configuration (one NKey user per role with its subject permissions) to --out or stdout; never a route password to stdout",
		Long:    natsauth.ConfigHelp,
		Example: natsauth.ConfigExample,
		Args:    cobra.NoArgs,
		RunE:    usageChecked(o.Validate, func(cmd *cobra.Command) error { return o.Write(cmd.OutOrStdout()) }),
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
	var o natsauth.NKeyOptions
	c := &cobra.Command{
		Use:   "nkey --role ROLE --dir DIR",
		Short: "Create a role's NATS credential: an NKey seed (secret) and its public key",
		Long:  natsauth.NKeyHelp,
		Args:  cobra.NoArgs,
		RunE:  usageChecked(o.Validate, func(cmd *cobra.Command) error { return o.Write(cmd.OutOrStdout()) }),
	}
	o.AddFlags(c.Flags())
	_ = c.MarkFlagRequired("role")
	return c
}

// usageChecked is a RunE that runs validate, whose error is a usage error
// (exit status 2), then run.
func usageChecked(validate func() error, run func(*cobra.Command) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := validate(); err != nil {
			return usageError(err)
		}
		return run(cmd)
	}
}
