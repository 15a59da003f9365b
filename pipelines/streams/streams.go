// Package streams is the admin step of a crowdlog deployment's NATS
// JetStream state: Ensure creates (or brings to its configuration) every
// stream and key-value bucket the roles use, before the roles start, with
// the admin credential (natsauth.Admin). The runtime roles (relays,
// randomness, issuers, coordinator, operator) hold only
// $JS.API.STREAM.INFO on them and bind the existing stream
// (natsconn.OpenStream, OpenKeyValue): none may create, update, delete or
// purge a stream, because an update can add Sources or RePublish and so
// copy any stream of the account (another role's bucket) into one the
// updater reads.
//
// Each configuration is defined once, by the package that uses it:
// relays.StreamConfig, issuer.CountersConfig, spent.BucketConfig,
// coordinator.BucketConfigs and coordinator.ActiveIndexConfig.
package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/coordinator"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/spent"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/relays"
)

// Config holds the deployment's choices the configurations depend on
// (Options.Config builds it from flags).
type Config struct {
	// RelayMaxMsgs is each relay inbox's message limit (<= 0:
	// relays.DefaultMaxMsgs).
	RelayMaxMsgs int64
	// RelayAckWait is the ack wait of the relays' consumers, made here
	// with one account per role (<= 0: relays.DefaultAckWait); at least
	// twice the relays' --pool-timeout.
	RelayAckWait time.Duration
	// SpendTTL is how long a spent token is remembered: 2 × (epoch length
	// + grace + skew) of a scheduled randomness service
	// (randomness.Keys.SpendTTL), 0 (forever) with named epochs.
	SpendTTL time.Duration
	// PDDRetention is how long the PDD coordinator keeps round state and
	// the active index (<= 0: 30 days).
	PDDRetention time.Duration
}

// Names are the names of the streams Ensure creates, in its order:
// exactly natsauth.AdminStreams (with one account per role, the relay
// stream once in each relay's account: natsauth.Streams).
func Names() []string { return natsauth.AdminStreams }

// Ensure creates every stream and key-value bucket of a deployment whose
// roles share one account (a server without the permission table: tests,
// `crowdlog run` without keys) on js: the relay stream (every relay's
// inbox; each relay creates its own consumer there), the issuers'
// counters buckets (report/ARC issuer and randomness issuer), the
// spent-token bucket, the PDD coordinator's two buckets and its active
// index. EnsureAccounts is the same for a server running natsauth's
// generated configuration. Existing streams are brought to the
// configuration (their replica count kept); a bucket's configuration is
// applied through CreateOrUpdateKeyValue. It is idempotent. With a
// deadline on ctx each stream and bucket is retried until it (a NATS node
// starting, a cluster electing its JetStream leader). Errors wrap the
// JetStream error of the first stream that failed.
func Ensure(ctx context.Context, js jetstream.JetStream, o Config) error {
	if js == nil {
		return errors.New("streams: nil JetStream")
	}
	return ensure(ctx, func(natsauth.Role) jetstream.JetStream { return js }, false, o)
}

// EnsureAccounts is Ensure on a server running natsauth's generated
// configuration (one account per role), through nc, the admin's
// connection (natsauth.Admin): each stream and bucket is created in its
// owner's account (natsauth.Streams) through the admin's imports of
// natsauth.AdminAPI, each relay's stream captures only its own inbox
// (relays.AccountStreamConfig), and each relay's durable consumer is made
// here (relays.EnsureConsumer): with the table on a relay may not create
// one.
func EnsureAccounts(ctx context.Context, nc *nats.Conn, o Config) error {
	if nc == nil {
		return errors.New("streams: nil NATS connection")
	}
	jss := map[natsauth.Role]jetstream.JetStream{}
	for _, r := range natsauth.JetStreamRoles {
		js, err := natsconn.AccountJetStream(nc, r, true)
		if err != nil {
			return fmt.Errorf("streams: JetStream of %s's account: %w", r, err)
		}
		jss[r] = js
	}
	return ensure(ctx, func(r natsauth.Role) jetstream.JetStream { return jss[r] }, true, o)
}

// ensure creates every stream, bucket and relay consumer, each on
// jsOf(owner); accounts says whether each relay has its own stream.
func ensure(ctx context.Context, jsOf func(natsauth.Role) jetstream.JetStream, accounts bool, o Config) error {
	for _, r := range []natsauth.Role{natsauth.RelayA, natsauth.RelayB} {
		name, _ := natsauth.RelayName(r)
		js := jsOf(r)
		if accounts {
			cfg := relays.AccountStreamConfig(name, o.RelayMaxMsgs, natsconn.StreamReplicas(ctx, js, relays.Stream))
			if err := natsconn.EnsureStream(ctx, js, cfg); err != nil {
				return fmt.Errorf("streams: relay %s: %w", name, err)
			}
		} else if r == natsauth.RelayA {
			if err := relays.EnsureStream(ctx, js, o.RelayMaxMsgs); err != nil {
				return fmt.Errorf("streams: %w", err)
			}
		}
		if !accounts {
			// one account, no permission table: each relay creates its
			// own consumer with its options (--ack-wait) as before
			continue
		}
		if err := relays.EnsureConsumer(ctx, js, name, o.RelayAckWait); err != nil {
			return fmt.Errorf("streams: %w", err)
		}
	}
	for _, b := range []struct {
		owner  natsauth.Role
		bucket string
	}{{natsauth.Issuer, protocol.IssuerCountersBucket}, {natsauth.Randomness, protocol.IssuerRandomnessCountersBucket},
		{natsauth.Prio3Helper, protocol.IssuerPrio3HelperCountersBucket}, {natsauth.Prio3Leader, protocol.IssuerPrio3LeaderCountersBucket}} {
		js := jsOf(b.owner)
		if err := ensureKV(ctx, js, issuer.CountersConfig(b.bucket, natsconn.Replicas(js.Conn()))); err != nil {
			return err
		}
	}
	js := jsOf(natsauth.Randomness)
	if err := ensureKV(ctx, js, spent.BucketConfig(spent.Options{TTL: o.SpendTTL, Replicas: natsconn.Replicas(js.Conn())})); err != nil {
		return err
	}
	js = jsOf(natsauth.Coordinator)
	for _, cfg := range coordinator.BucketConfigs(o.PDDRetention, natsconn.Replicas(js.Conn())) {
		if err := ensureKV(ctx, js, cfg); err != nil {
			return err
		}
	}
	if err := coordinator.EnsureActiveIndex(ctx, js, o.PDDRetention); err != nil {
		return fmt.Errorf("streams: %w", err)
	}
	return nil
}

// ensureKV creates bucket cfg or updates it to cfg, keeping an existing
// bucket's replica count. With a deadline on ctx it retries until it
// (backoff 10 ms growing to 1 s: a NATS cluster electing its JetStream
// leader); without one it tries once.
func ensureKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) error {
	_, untilDeadline := ctx.Deadline()
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, natsconn.StreamAttemptTimeout)
		if kv, err := js.KeyValue(actx, cfg.Bucket); err == nil {
			if st, err := kv.Status(actx); err == nil && st.Config().Replicas > 0 {
				cfg.Replicas = st.Config().Replicas
			}
		}
		_, err := js.CreateOrUpdateKeyValue(actx, cfg)
		cancel()
		if err == nil {
			return nil
		}
		if !untilDeadline || ctx.Err() != nil {
			return fmt.Errorf("streams: key-value bucket %s (is JetStream enabled, and is this the admin credential?): %w", cfg.Bucket, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(10*attempt)*time.Millisecond, time.Second)):
		}
	}
}
