package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/pipelines/streams"
	"github.com/crowdlog/crowdlog/randomness"
)

func streamsCmd() *cobra.Command {
	var natsURL string
	var natsSec natsconn.Security
	var o streams.Options
	var timeout, epochLength, keyGrace time.Duration
	c := &cobra.Command{
		Use:   "streams --nats URL --nats-nkey ADMIN.nk [--relay-max-msgs N] [--epoch-length D [--key-grace D] | --spend-ttl D] [--pdd-retention D]",
		Short: "Create the NATS JetStream streams and key-value buckets of a deployment (the admin step, before the roles start)",
		Long: `streams creates every JetStream stream and key-value bucket the roles use,
or brings an existing one to its configuration: the relay stream (each
relay inbox holds at most --relay-max-msgs), the counters buckets of both
issuers, the spent-token bucket (entries kept --spend-ttl, 0 = forever;
with --epoch-length, the schedule's 2 × (epoch length + --key-grace +
skew), what a randomness service with that schedule needs: it refuses to
start on a bucket that forgets spends sooner)
and the PDD coordinator's buckets and active index (kept --pdd-retention).
Run it once per NATS cluster before the roles start, and again to change
a setting; it is idempotent. An existing stream keeps its replica count.

Give it the admin NATS credential (--nats-nkey with the NKey seed of
role "admin", crowdlog nats-config nkey --role admin): with the permission
table on no other role may create or update a stream, because an update
can add Sources or RePublish and copy another role's bucket into a stream
its updater reads. The roles only look their streams up and fail with an
error naming this command when one is missing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if epochLength > 0 {
				if cmd.Flags().Changed("spend-ttl") {
					return usageError(errors.New("give --epoch-length (the TTL follows from the schedule) or --spend-ttl, not both"))
				}
				o.SpendTTL = 2 * (epochLength + keyGrace + randomness.DefaultSkew)
			}
			nc, err := natsconn.ConnectAs(natsURL, "crowdlog-streams", as(natsSec, natsauth.Admin))
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return fmt.Errorf("NATS JetStream: %w", err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if err := streams.Ensure(ctx, js, o); err != nil {
				return err
			}
			for _, name := range streams.Names() {
				st, err := js.Stream(ctx, name)
				if err != nil {
					return fmt.Errorf("stream %s after creating it: %w", name, err)
				}
				cfg := st.CachedInfo().Config
				fmt.Fprintf(cmd.OutOrStdout(), "stream %s: subjects %v, replicas %d, max age %v\n", name, cfg.Subjects, cfg.Replicas, cfg.MaxAge)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&natsURL, "nats", defaultNATS, "NATS server URL (comma-separated for a cluster)")
	addNATSSecurityFlags(f, &natsSec)
	f.Int64Var(&o.RelayMaxMsgs, "relay-max-msgs", 0, "most messages each relay inbox holds (0 = 1,000,000)")
	f.DurationVar(&o.SpendTTL, "spend-ttl", 0, "how long a spent token is remembered: 0 = forever; with a scheduled randomness service at most 2 × (epoch length + grace + skew) is needed (it refuses to start on a bucket that keeps spends for less than it needs)")
	f.DurationVar(&epochLength, "epoch-length", 0, "the randomness service's schedule (its --epoch-length): the spent tokens' TTL becomes 2 × (length + --key-grace + skew)")
	f.DurationVar(&keyGrace, "key-grace", randomness.DefaultGrace, "with --epoch-length: the randomness service's --key-grace")
	f.DurationVar(&o.PDDRetention, "pdd-retention", 0, "how long the PDD coordinator keeps round state and its active index (0 = 30 days)")
	f.DurationVar(&timeout, "timeout", time.Minute, "give up after this long (a NATS node starting is waited for)")
	return c
}
