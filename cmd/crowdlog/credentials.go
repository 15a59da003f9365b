package main

import (
	"log/slog"

	"github.com/spf13/cobra"

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
