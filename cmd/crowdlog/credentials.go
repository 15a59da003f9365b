package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
)

// Kafka credentials: every command with a --kafka flag also gets the
// --kafka-tls… and --kafka-sasl-… flags below (addKafkaAuthFlags), and the
// root command's pre-run loads them into the command's context
// (infra/kafka.WithAuth), from which every reader, writer, consumer group
// and admin request of the roles takes them. Set the password with
// CROWDLOG_KAFKA_SASL_PASSWORD_FILE (a mounted secret) or
// CROWDLOG_KAFKA_SASL_PASSWORD, not on the command line, where ps shows it.

// addKafkaAuthFlags adds the Kafka TLS and SASL flags to c and, recursively,
// to every subcommand of c that has a --kafka flag.
func addKafkaAuthFlags(c *cobra.Command) {
	for _, sub := range c.Commands() {
		addKafkaAuthFlags(sub)
	}
	if c.Flags().Lookup("kafka") == nil {
		return
	}
	f := c.Flags()
	f.Bool("kafka-tls", false, "connect to Kafka with TLS (implied by --kafka-tls-ca and --kafka-tls-cert); the system roots verify the brokers unless --kafka-tls-ca")
	f.String("kafka-tls-ca", "", "PEM file of the CA certificates that verify the Kafka brokers")
	f.String("kafka-tls-cert", "", "PEM client certificate for mutual TLS with Kafka (with --kafka-tls-key)")
	f.String("kafka-tls-key", "", "PEM private key of --kafka-tls-cert")
	f.String("kafka-tls-server-name", "", "name to verify in the brokers' certificates (default: the host dialled)")
	f.String("kafka-sasl-mechanism", "", "SASL mechanism: SCRAM-SHA-512 (RFC 5802/7677), SCRAM-SHA-256 or PLAIN (only with TLS); empty: no SASL")
	f.String("kafka-sasl-user", "", "SASL user name: this role's Kafka principal (docs/operations.md, Kafka ACLs)")
	f.String("kafka-sasl-password", "", "SASL password; give it as CROWDLOG_KAFKA_SASL_PASSWORD_FILE=PATH (or the environment), not on the command line")
}

// applyKafkaAuth loads cmd's Kafka credential flags (after the
// configuration layer set them) into cmd's context. Errors are usage
// errors naming the flag to fix.
func applyKafkaAuth(cmd *cobra.Command) error {
	f := cmd.Flags()
	if f.Lookup("kafka-sasl-mechanism") == nil {
		return nil
	}
	var c infrakafka.AuthConfig
	c.TLS, _ = f.GetBool("kafka-tls")
	for name, p := range map[string]*string{"kafka-tls-ca": &c.CAFile, "kafka-tls-cert": &c.CertFile, "kafka-tls-key": &c.KeyFile,
		"kafka-tls-server-name": &c.ServerName, "kafka-sasl-mechanism": &c.Mechanism, "kafka-sasl-user": &c.User, "kafka-sasl-password": &c.Password} {
		*p, _ = f.GetString(name)
	}
	a, err := c.Load()
	if err != nil {
		return usageError(err)
	}
	if a != nil {
		slog.Debug("kafka credential", "command", cmd.CommandPath(), "auth", a.String())
	}
	cmd.SetContext(infrakafka.WithAuth(cmd.Context(), a))
	return nil
}

// ClickHouse logins: every command with a --clickhouse flag also gets
// --clickhouse-user, --clickhouse-password and --clickhouse-tls…
// (addClickHouseLoginFlags); the pre-run loads them into the command's
// context (infra/clickhouse.WithLogin), from which the release writers,
// `crowdlog clickhouse init` and the report log in. Give the password as
// CROWDLOG_CLICKHOUSE_PASSWORD_FILE (or CROWDLOG_CLICKHOUSE_PASSWORD).

// addClickHouseLoginFlags adds the ClickHouse login flags to c and,
// recursively, to every subcommand of c that has a --clickhouse flag.
func addClickHouseLoginFlags(c *cobra.Command) {
	for _, sub := range c.Commands() {
		addClickHouseLoginFlags(sub)
	}
	if c.Flags().Lookup("clickhouse") == nil {
		return
	}
	f := c.Flags()
	f.String("clickhouse-user", "", `ClickHouse user ("" = default, the administrator); release and release-pdd require the writer of 'crowdlog clickhouse init --writer' (never default)`)
	f.String("clickhouse-password", "", "password of --clickhouse-user; give it as CROWDLOG_CLICKHOUSE_PASSWORD_FILE=PATH (or the environment), not on the command line")
	f.Bool("clickhouse-tls", false, "connect to ClickHouse with TLS (the server's secure native port, tcp_port_secure); the system roots verify it unless --clickhouse-tls-ca")
	f.String("clickhouse-tls-ca", "", "PEM file of the CA certificates that verify the ClickHouse server")
	f.String("clickhouse-tls-cert", "", "PEM client certificate for ClickHouse (with --clickhouse-tls-key)")
	f.String("clickhouse-tls-key", "", "PEM private key of --clickhouse-tls-cert")
	f.String("clickhouse-tls-server-name", "", "name to verify in the ClickHouse server's certificate (default: the host dialled)")
}

// applyClickHouseLogin loads cmd's ClickHouse login flags into cmd's
// context. Errors are usage errors naming the flag to fix.
func applyClickHouseLogin(cmd *cobra.Command) error {
	f := cmd.Flags()
	if f.Lookup("clickhouse-user") == nil {
		return nil
	}
	var c clickhouse.LoginConfig
	c.TLS, _ = f.GetBool("clickhouse-tls")
	for name, p := range map[string]*string{"clickhouse-user": &c.User, "clickhouse-password": &c.Password, "clickhouse-tls-ca": &c.CAFile,
		"clickhouse-tls-cert": &c.CertFile, "clickhouse-tls-key": &c.KeyFile, "clickhouse-tls-server-name": &c.ServerName} {
		*p, _ = f.GetString(name)
	}
	l, err := c.Load()
	if err != nil {
		return usageError(err)
	}
	cmd.SetContext(clickhouse.WithLogin(cmd.Context(), l))
	return nil
}

// requireWriterLogin refuses to start the release stage named what without
// an explicit ClickHouse user other than default: the stages write as the
// writer of `crowdlog clickhouse init --writer NAME` (its databases only),
// never as the administrator, and there is no fallback to it.
func requireWriterLogin(cmd *cobra.Command, what string) error {
	switch l := clickhouse.LoginFrom(cmd.Context()); l.User {
	case "":
		return usageError(fmt.Errorf("%s writes as the ClickHouse writer user of `crowdlog clickhouse init --writer NAME`: give --clickhouse-user NAME and its password as CROWDLOG_CLICKHOUSE_PASSWORD_FILE=PATH", what))
	case clickhouse.DefaultUser:
		return usageError(fmt.Errorf("%s never writes as user default, the administrator: give --clickhouse-user the writer of `crowdlog clickhouse init --writer NAME` (limited to the release and analyst databases)", what))
	}
	return nil
}

// checkLocalServices refuses credentials meant for a remote service when
// `run` or `pdd` is about to start the local one instead (an empty
// --kafka or --clickhouse): the local kfake broker has no SASL or TLS and
// the local ClickHouse only user default, so the roles could not connect.
func checkLocalServices(cmd *cobra.Command, kafkaAddr, clickhouseAddr string) error {
	if kafkaAddr == "" && infrakafka.AuthFrom(cmd.Context()) != nil {
		return usageError(errors.New("--kafka-tls…/--kafka-sasl-… are for a remote cluster: give its --kafka (an empty --kafka starts a local broker without TLS or SASL)"))
	}
	if l := clickhouse.LoginFrom(cmd.Context()); clickhouseAddr == "" && (l.User != "" || l.TLS != nil) {
		return usageError(errors.New("--clickhouse-user/--clickhouse-tls… are for a remote server: give its --clickhouse (an empty --clickhouse starts a local server with user default)"))
	}
	return nil
}
