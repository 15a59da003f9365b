package clickhouse

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
)

// DefaultUser is the ClickHouse user of a Login without one: the server's
// built-in administrator, without password on a server started by Start.
const DefaultUser = "default"

// Login is how a crowdlog process logs in to ClickHouse over the native
// protocol: a user, its password and, where the server offers it
// (tcp_port_secure), TLS. The zero Login is user default without password
// and without TLS (a local server started by Start).
type Login struct {
	// User is the user name; "" means DefaultUser.
	User string
	// Password is the user's password; never logged.
	Password string
	// TLS, when set, makes the connection TLS with this client
	// configuration (connect to the server's secure native port).
	TLS *tls.Config
}

// Username returns l.User, or DefaultUser when it is empty.
func (l Login) Username() string {
	if l.User == "" {
		return DefaultUser
	}
	return l.User
}

// LoginConfig is Login as configuration (cmd/crowdlog's --clickhouse-user,
// --clickhouse-password and --clickhouse-tls… flags).
type LoginConfig struct {
	// User and Password: the ClickHouse user (DefaultUser when empty) and
	// its password, from CROWDLOG_CLICKHOUSE_PASSWORD_FILE or the
	// environment.
	User, Password string
	// TLS turns TLS on (implied by CAFile and CertFile); without CAFile
	// the system roots verify the server.
	TLS bool
	// CAFile is a PEM file of the CA certificates that verify the server.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and key; both or
	// neither.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the server's certificate.
	ServerName string
}

// Load reads the files of c and returns its Login. Errors name the file or
// setting to fix: an unreadable or empty CA file, a certificate without
// its key, a password without a user.
func (c LoginConfig) Load() (Login, error) {
	l := Login{User: c.User, Password: c.Password}
	if c.Password != "" && c.User == "" {
		return Login{}, errors.New("clickhouse: a password without a user: give the user name (--clickhouse-user)")
	}
	if !c.TLS && c.CAFile == "" && c.CertFile == "" && c.KeyFile == "" && c.ServerName == "" {
		return l, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return Login{}, fmt.Errorf("clickhouse: TLS CA file: %w (give the PEM file of the CA that signed the server's certificate)", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return Login{}, fmt.Errorf("clickhouse: TLS CA file %s holds no PEM certificate", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return Login{}, errors.New("clickhouse: TLS client certificate and key go together: give both files or neither")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return Login{}, fmt.Errorf("clickhouse: TLS client certificate %s with key %s: %w", c.CertFile, c.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	l.TLS = tc
	return l, nil
}

type loginKey struct{}

// WithLogin returns ctx carrying l: the release stages' writers, `crowdlog
// clickhouse init` and the report log in with it (release.Open and the
// functions beside it read it with LoginFrom). The command line sets it
// once per process.
func WithLogin(ctx context.Context, l Login) context.Context {
	return context.WithValue(ctx, loginKey{}, l)
}

// LoginFrom returns the Login WithLogin put in ctx; the zero Login (user
// default, no password, no TLS) when none.
func LoginFrom(ctx context.Context) Login {
	l, _ := ctx.Value(loginKey{}).(Login)
	return l
}

// TLSConfigFile is the name of the file WriteTLSConfig writes in a
// server directory's config.d.
const TLSConfigFile = "crowdlog-tls.xml"

// WriteTLSConfig makes the server of dir (a Start directory) offer TLS on
// the native protocol from its next start: it writes
// dir/config.d/TLSConfigFile with tcp_port_secure = port and the
// server's openSSL settings (certFile and keyFile: PEM, readable by the
// server; TLS 1.2 and later; no client certificate asked for). The plain
// tcp_port stays open, on loopback only (Start's listen_host), for the
// local administrator. Connect with a Login whose TLS verifies certFile's
// issuer. Errors name the file that could not be written.
func WriteTLSConfig(dir, certFile, keyFile string, port int) error {
	if port <= 0 || port > 65535 {
		return fmt.Errorf("clickhouse: TLS port %d: want 1..65535", port)
	}
	cd := filepath.Join(dir, "config.d")
	if err := os.MkdirAll(cd, 0o755); err != nil {
		return fmt.Errorf("clickhouse: create %s (is the directory writable?): %w", cd, err)
	}
	text := fmt.Sprintf(`<?xml version="1.0"?>
<!-- Written by crowdlog infra/clickhouse: TLS on the native protocol. -->
<yandex>
    <tcp_port_secure>%d</tcp_port_secure>
    <openSSL>
        <server>
            <certificateFile>%s</certificateFile>
            <privateKeyFile>%s</privateKeyFile>
            <verificationMode>none</verificationMode>
            <loadDefaultCAFile>false</loadDefaultCAFile>
            <cacheSessions>true</cacheSessions>
            <disableProtocols>sslv2,sslv3,tlsv1,tlsv1_1</disableProtocols>
            <preferServerCiphers>true</preferServerCiphers>
        </server>
    </openSSL>
</yandex>
`, port, xmlEscape(certFile), xmlEscape(keyFile))
	path := filepath.Join(cd, TLSConfigFile)
	if err := atomicfile.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("clickhouse: install %s: %w", path, err)
	}
	return nil
}
