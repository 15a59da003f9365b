package streams

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/randomness"
)

// Help is the long help of `crowdlog streams`.
const Help = `streams creates every JetStream stream and key-value bucket the roles use,
or brings an existing one to its configuration: each relay's inbox stream
(at most --relay-max-msgs messages) and its durable consumer, which the
relay only binds, the counters buckets of both
issuers, the spent-token bucket (entries kept --spend-ttl, 0 = forever;
with --epoch-length, the schedule's 2 × (epoch length + --key-grace +
skew), what a randomness service with that schedule needs: it refuses to
start on a bucket that forgets spends sooner)
and the PDD coordinator's buckets and active index (kept --pdd-retention).
Run it once per NATS cluster before the roles start, and again to change
a setting; it is idempotent. An existing stream keeps its replica count.

Give it the admin NATS credential (--nats-nkey with the NKey seed of
role "admin", crowdlog nats-config nkey --role admin): with it, each stream
is made in its owner's account of the generated configuration (one
account per role), through the admin account's imports. With the
permission table on no other role may create or update a stream, because an update
can add Sources or RePublish and copy another role's bucket into a stream
its updater reads. The roles only look their streams up and fail with an
error naming this command when one is missing.`

// Options are the flags of `crowdlog streams`, the admin step.
type Options struct {
	NATS    natsconn.Options
	Streams Config
	// EpochLength > 0 is the randomness service's schedule: the spent
	// tokens' TTL becomes 2 × (EpochLength + KeyGrace + randomness.DefaultSkew).
	EpochLength, KeyGrace time.Duration
	// Timeout bounds the whole step (a NATS node starting is waited for).
	Timeout time.Duration
	// spendTTLSet records that --spend-ttl was given (Validate).
	spendTTLSet func() bool
}

// NewOptions returns the defaults: randomness.DefaultGrace, a minute's
// timeout.
func NewOptions() *Options {
	return &Options{KeyGrace: randomness.DefaultGrace, Timeout: time.Minute}
}

// AddFlags adds the step's flags to f, with o's values as defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.NATS.AddFlags(f, "NATS server URL (comma-separated for a cluster)")
	f.Int64Var(&o.Streams.RelayMaxMsgs, "relay-max-msgs", o.Streams.RelayMaxMsgs, "most messages each relay inbox holds (0 = 1,000,000)")
	f.DurationVar(&o.Streams.RelayAckWait, "relay-ack-wait", o.Streams.RelayAckWait, "with the admin credential: how long the relays' consumers wait for an acknowledgement before redelivering (0 = 30s; at least twice the relays' --pool-timeout); a relay may not change its consumer")
	f.DurationVar(&o.Streams.SpendTTL, "spend-ttl", o.Streams.SpendTTL, "how long a spent token is remembered: 0 = forever; with a scheduled randomness service at most 2 × (epoch length + grace + skew) is needed (it refuses to start on a bucket that keeps spends for less than it needs)")
	f.DurationVar(&o.EpochLength, "epoch-length", o.EpochLength, "the randomness service's schedule (its --epoch-length): the spent tokens' TTL becomes 2 × (length + --key-grace + skew)")
	f.DurationVar(&o.KeyGrace, "key-grace", o.KeyGrace, "with --epoch-length: the randomness service's --key-grace")
	f.DurationVar(&o.Streams.PDDRetention, "pdd-retention", o.Streams.PDDRetention, "how long the PDD coordinator keeps round state and its active index (0 = 30 days)")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long (a NATS node starting is waited for)")
	o.spendTTLSet = func() bool { return f.Changed("spend-ttl") }
}

// Validate errors when both --epoch-length and --spend-ttl are given.
func (o *Options) Validate() error {
	if o.EpochLength > 0 && o.spendTTLSet != nil && o.spendTTLSet() {
		return errors.New("give --epoch-length (the TTL follows from the schedule) or --spend-ttl, not both")
	}
	return nil
}

// Config validates o and returns the Config for Ensure, the spent
// tokens' TTL following the epoch schedule when one is given.
func (o *Options) Config() (Config, error) {
	if err := o.Validate(); err != nil {
		return Config{}, err
	}
	c := o.Streams
	if o.EpochLength > 0 {
		c.SpendTTL = 2 * (o.EpochLength + o.KeyGrace + randomness.DefaultSkew)
	}
	return c, nil
}

// Run connects as the admin role, ensures every stream and bucket
// (EnsureAccounts with an NKey credential, whose server runs natsauth's
// generated configuration of one account per role; Ensure without one)
// within o.Timeout and writes each stream's subjects, replicas and max
// age (and account) to w. Errors from Validate are returned as they are.
func (o *Options) Run(ctx context.Context, w io.Writer) error {
	c, err := o.Config()
	if err != nil {
		return err
	}
	nc, err := o.NATS.Connect("crowdlog-streams", natsauth.Admin)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	return RunOn(ctx, nc, o.NATS.NKeyFile != "", c, w)
}

// RunOn ensures every stream and bucket through nc, the admin's
// connection (EnsureAccounts when accounts, else Ensure), and writes each
// stream's subjects, replicas and max age (and, with accounts, its
// account) to w.
func RunOn(ctx context.Context, nc *nats.Conn, accounts bool, c Config, w io.Writer) error {
	if accounts {
		if err := EnsureAccounts(ctx, nc, c); err != nil {
			return err
		}
	} else {
		js, err := jetstream.New(nc)
		if err != nil {
			return fmt.Errorf("NATS JetStream: %w", err)
		}
		if err := Ensure(ctx, js, c); err != nil {
			return err
		}
	}
	for _, name := range Names() {
		owners := []natsauth.Role{""}
		if accounts {
			owners = nil
			for _, r := range natsauth.JetStreamRoles {
				if slices.Contains(natsauth.Streams(r), name) {
					owners = append(owners, r)
				}
			}
		}
		for _, r := range owners {
			js, err := natsconn.AccountJetStream(nc, r, accounts)
			if err != nil {
				return fmt.Errorf("NATS JetStream: %w", err)
			}
			st, err := js.Stream(ctx, name)
			if err != nil {
				return fmt.Errorf("stream %s after creating it: %w", name, err)
			}
			cfg := st.CachedInfo().Config
			fmt.Fprintf(w, "stream %s: subjects %v, replicas %d, max age %v", name, cfg.Subjects, cfg.Replicas, cfg.MaxAge)
			if accounts {
				fmt.Fprintf(w, " (account %s)", natsauth.AccountOf(r))
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}
