package main

import (
	"context"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/ready"
	"github.com/crowdlog/crowdlog/relays"
)

// The readiness checks of each role (/readyz with --metrics; see
// docs/operations.md, "Readiness"). A role is ready while every check of
// its list passes.

// natsChecks: the connection is up, and with js its JetStream answers.
func natsChecks(nc *nats.Conn, withJetStream bool) []ready.Check {
	checks := []ready.Check{ready.NATS(nc)}
	if withJetStream {
		var js jetstream.JetStream // nil (the check fails) without a connection
		if nc != nil {
			js, _ = jetstream.New(nc)
		}
		checks = append(checks, ready.JetStream(js))
	}
	return checks
}

// randomnessChecks: NATS, JetStream when tokens are required (spent
// tokens live in a key-value bucket), and the epoch key directory.
func randomnessChecks(nc *nats.Conn, keys string, requireTokens bool) []ready.Check {
	return append(natsChecks(nc, requireTokens), ready.Dir("keys", filepath.Join(keys, keydir.RandomnessKeys)))
}

// relayChecks: NATS and JetStream (its inbox is a work queue), and Kafka
// for the last relay of the route.
func relayChecks(ctx context.Context, nc *nats.Conn, o relays.Config) []ready.Check {
	checks := natsChecks(nc, true)
	if relayToKafka(o) {
		checks = append(checks, kafkaCheck(ctx, o.Kafka))
	}
	return checks
}

// relayWriteChecks: for the last relay, "kafka_writes", failing while
// Kafka keeps refusing the relay's produce calls (relays.Relay.KafkaErr).
func relayWriteChecks(r *relays.Relay, o relays.Config) []ready.Check {
	if !relayToKafka(o) {
		return nil
	}
	return []ready.Check{{Name: "kafka_writes", Fn: func(context.Context) error { return r.KafkaErr() }}}
}

// relayToKafka reports whether a relay with o forwards to Kafka
// (relays.Config.ToKafka).
func relayToKafka(o relays.Config) bool { return o.ToKafka() }

// issuerChecks: NATS, JetStream (counters are a key-value bucket) and the
// keys directory (enrollment list, epoch keys; its epoch subdirectory
// exists only once an epoch is opened).
func issuerChecks(nc *nats.Conn, keys string) []ready.Check {
	return append(natsChecks(nc, true), ready.Dir("keys", keys))
}

// clickhouseCheck: ClickHouse answers a ping on the release writer's
// connection.
func clickhouseCheck(ping func(context.Context) error) ready.Check {
	return ready.Check{Name: "clickhouse", Fn: ping}
}

// kafkaCheck: a broker of brokers answers a metadata request, asked with
// the credential of ctx (infra/kafka.WithAuth).
func kafkaCheck(ctx context.Context, brokers []string) ready.Check {
	return infrakafka.ReadyCheck(brokers, infrakafka.AuthFrom(ctx))
}

// coordinatorChecks: NATS, JetStream (its state is in key-value buckets)
// and Kafka (rosters and ticks on topic vectors).
func coordinatorChecks(ctx context.Context, nc *nats.Conn, brokers []string) []ready.Check {
	return append(natsChecks(nc, true), kafkaCheck(ctx, brokers))
}

// vectorsChecks (aggregate-vectors): NATS (recovery requests to the
// coordinator) and Kafka.
func vectorsChecks(ctx context.Context, nc *nats.Conn, brokers []string) []ready.Check {
	return append(natsChecks(nc, false), kafkaCheck(ctx, brokers))
}
