package clickhouse

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
)

// ClickHouse logins as flags: every command with a --clickhouse flag also
// gets --clickhouse-user, --clickhouse-password and --clickhouse-tls…
// (AddLoginFlags); the command's pre-run reads them
// (LoginConfigFromFlags) and loads them into its context (WithLogin), from
// which the release writers, `crowdlog clickhouse init` and the report
// log in. The password comes from CROWDLOG_CLICKHOUSE_PASSWORD_FILE (or
// CROWDLOG_CLICKHOUSE_PASSWORD); on the command line it is refused
// (config.MarkSecret).

// AddLoginFlags adds the ClickHouse login flags to f.
func AddLoginFlags(f *pflag.FlagSet) {
	f.String("clickhouse-user", "", `ClickHouse user ("" = default, the administrator); release and release-pdd require the writer of 'crowdlog clickhouse init --writer' (never default)`)
	f.String("clickhouse-password", "", "password of --clickhouse-user")
	config.MarkSecret(f, "clickhouse-password")
	f.Bool("clickhouse-tls", false, "connect to ClickHouse with TLS (the server's secure native port, tcp_port_secure); the system roots verify it unless --clickhouse-tls-ca")
	f.String("clickhouse-tls-ca", "", "PEM file of the CA certificates that verify the ClickHouse server")
	f.String("clickhouse-tls-cert", "", "PEM client certificate for ClickHouse (with --clickhouse-tls-key)")
	f.String("clickhouse-tls-key", "", "PEM private key of --clickhouse-tls-cert")
	f.String("clickhouse-tls-server-name", "", "name to verify in the ClickHouse server's certificate (default: the host dialled)")
}

// LoginConfigFromFlags returns the LoginConfig of the flags AddLoginFlags
// added to f; ok is false when f has none.
func LoginConfigFromFlags(f *pflag.FlagSet) (c LoginConfig, ok bool) {
	if f.Lookup("clickhouse-user") == nil {
		return c, false
	}
	c.TLS, _ = f.GetBool("clickhouse-tls")
	for name, p := range map[string]*string{"clickhouse-user": &c.User, "clickhouse-password": &c.Password, "clickhouse-tls-ca": &c.CAFile,
		"clickhouse-tls-cert": &c.CertFile, "clickhouse-tls-key": &c.KeyFile, "clickhouse-tls-server-name": &c.ServerName} {
		*p, _ = f.GetString(name)
	}
	return c, true
}

// RequireWriter errors when the login of ctx (LoginFrom) is not an
// explicit user other than DefaultUser: the release stage named what
// writes as the writer of `crowdlog clickhouse init --writer NAME` (its
// databases only), never as the administrator, and there is no fallback
// to it.
func RequireWriter(ctx context.Context, what string) error {
	switch l := LoginFrom(ctx); l.User {
	case "":
		return fmt.Errorf("%s writes as the ClickHouse writer user of `crowdlog clickhouse init --writer NAME`: give --clickhouse-user NAME and its password as CROWDLOG_CLICKHOUSE_PASSWORD_FILE=PATH", what)
	case DefaultUser:
		return fmt.Errorf("%s never writes as user default, the administrator: give --clickhouse-user the writer of `crowdlog clickhouse init --writer NAME` (limited to the release and analyst databases)", what)
	}
	return nil
}

// CheckLocal errors when the login of ctx is meant for a remote server
// (a user or TLS) but addr is empty, so a local server with user default
// is about to be started instead.
func CheckLocal(ctx context.Context, addr string) error {
	if l := LoginFrom(ctx); addr == "" && (l.User != "" || l.TLS != nil) {
		return errors.New("--clickhouse-user/--clickhouse-tls… are for a remote server: give its --clickhouse (an empty --clickhouse starts a local server with user default)")
	}
	return nil
}

// WithLoginFlags returns ctx with the login of the flags AddLoginFlags
// added to f (LoginConfigFromFlags, LoginConfig.Load, WithLogin); ctx as
// it is when f has none. Errors name the flag to fix.
func WithLoginFlags(ctx context.Context, f *pflag.FlagSet) (context.Context, error) {
	c, ok := LoginConfigFromFlags(f)
	if !ok {
		return ctx, nil
	}
	l, err := c.Load()
	if err != nil {
		return ctx, err
	}
	return WithLogin(ctx, l), nil
}
