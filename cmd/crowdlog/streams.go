package main

import (
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/pipelines/streams"
)

func streamsCmd() *cobra.Command {
	o := streams.NewOptions()
	c := &cobra.Command{
		Use:   "streams --nats URL --nats-nkey ADMIN.nk [--relay-max-msgs N] [--epoch-length D [--key-grace D] | --spend-ttl D] [--pdd-retention D]",
		Short: "Create the NATS JetStream streams and key-value buckets of a deployment (the admin step, before the roles start)",
		Long:  streams.Help,
		Args:  cobra.NoArgs,
		RunE:  usageChecked(o.Validate, func(cmd *cobra.Command) error { return o.Run(cmd.Context(), cmd.OutOrStdout()) }),
	}
	o.AddFlags(c.Flags())
	return c
}
