package kafka

import (
	"context"
	"errors"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
)

// Kafka credentials as flags: every command with a --kafka flag also gets
// the --kafka-tls… and --kafka-sasl-… flags (AddAuthFlags); the command's
// pre-run reads them (AuthConfigFromFlags) after the configuration layer
// set them and loads them into its context (WithAuth), from which every
// reader, writer, consumer group and admin request of the roles takes
// them. The password comes from CROWDLOG_KAFKA_SASL_PASSWORD_FILE (a
// mounted secret) or CROWDLOG_KAFKA_SASL_PASSWORD: on the command line,
// where ps shows it, it is refused (config.MarkSecret).

// AddAuthFlags adds the Kafka TLS and SASL flags to f.
func AddAuthFlags(f *pflag.FlagSet) {
	f.Bool("kafka-tls", false, "connect to Kafka with TLS (implied by --kafka-tls-ca and --kafka-tls-cert); the system roots verify the brokers unless --kafka-tls-ca")
	f.String("kafka-tls-ca", "", "PEM file of the CA certificates that verify the Kafka brokers")
	f.String("kafka-tls-cert", "", "PEM client certificate for mutual TLS with Kafka (with --kafka-tls-key)")
	f.String("kafka-tls-key", "", "PEM private key of --kafka-tls-cert")
	f.String("kafka-tls-server-name", "", "name to verify in the brokers' certificates (default: the host dialled)")
	f.String("kafka-sasl-mechanism", "", "SASL mechanism: SCRAM-SHA-512 (RFC 5802/7677), SCRAM-SHA-256 or PLAIN (only with TLS); empty: no SASL")
	f.String("kafka-sasl-user", "", "SASL user name: this role's Kafka principal (docs/operations.md, Kafka ACLs)")
	f.String("kafka-sasl-password", "", "SASL password")
	config.MarkSecret(f, "kafka-sasl-password")
}

// AuthConfigFromFlags returns the AuthConfig of the flags AddAuthFlags
// added to f; ok is false when f has none.
func AuthConfigFromFlags(f *pflag.FlagSet) (c AuthConfig, ok bool) {
	if f.Lookup("kafka-sasl-mechanism") == nil {
		return c, false
	}
	c.TLS, _ = f.GetBool("kafka-tls")
	for name, p := range map[string]*string{"kafka-tls-ca": &c.CAFile, "kafka-tls-cert": &c.CertFile, "kafka-tls-key": &c.KeyFile,
		"kafka-tls-server-name": &c.ServerName, "kafka-sasl-mechanism": &c.Mechanism, "kafka-sasl-user": &c.User, "kafka-sasl-password": &c.Password} {
		*p, _ = f.GetString(name)
	}
	return c, true
}

// CheckLocal errors when ctx carries a credential (AuthFrom) but addr is
// empty, so a local broker without TLS or SASL is about to be started
// instead.
func CheckLocal(ctx context.Context, addr string) error {
	if addr == "" && AuthFrom(ctx) != nil {
		return errors.New("--kafka-tls…/--kafka-sasl-… are for a remote cluster: give its --kafka (an empty --kafka starts a local broker without TLS or SASL)")
	}
	return nil
}

// WithAuthFlags returns ctx with the credential of the flags AddAuthFlags
// added to f (AuthConfigFromFlags, AuthConfig.Load, WithAuth), logged at
// debug level under name; ctx as it is when f has none. Errors name the
// flag to fix.
func WithAuthFlags(ctx context.Context, f *pflag.FlagSet, name string) (context.Context, error) {
	c, ok := AuthConfigFromFlags(f)
	if !ok {
		return ctx, nil
	}
	a, err := c.Load()
	if err != nil {
		return ctx, err
	}
	if a != nil {
		slog.Debug("kafka credential", "command", name, "auth", a.String())
	}
	return WithAuth(ctx, a), nil
}
