package natsconn

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsauth"
)

// Security is how a role authenticates to NATS: its NKey seed file (its
// credential in the server's permission table, infra/natsauth) and TLS
// files. The zero value connects without TLS or credential (a server with
// auth off).
type Security struct {
	// Role names the connection's row of the permission table; its
	// replies use natsauth.InboxPrefix(Role), the only inbox it may
	// subscribe to; a client's (natsauth.Client, one credential shared
	// by every device) use a prefix of their own per connection,
	// natsauth.InboxPrefix(Client) + "." + 26 random base32 characters
	// (ClientInboxPrefix). "" keeps the default inbox "_INBOX".
	Role natsauth.Role
	// NKeyFile is the path of the role's NKey seed (SU…, from crowdlog
	// nats-config nkey); "" connects without a credential.
	NKeyFile string
	// CAFile is the PEM CA bundle that verifies the server's
	// certificate; setting it (or CertFile) turns TLS on.
	CAFile string
	// CertFile and KeyFile are the role's PEM client certificate and key,
	// for servers that verify clients (both or neither).
	CertFile, KeyFile string
	// Hints name, in the errors of Options and ConnectAs, where the
	// caller sets each value; zero fields name the crowdlog command's
	// flags (FlagHints).
	Hints Hints
	// ConnectTimeout bounds each attempt of ConnectAs to reach a server
	// (dial, TLS handshake, the server's INFO: nats.Timeout); 0 means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
}

// DefaultConnectTimeout is Security.ConnectTimeout when 0: nats.go's own
// default (2 s) ran out on a loaded 2-core machine where many processes
// connected at once. The server's side of the handshake has its own bound
// (nats-server's auth_timeout, natsserver.Options.AuthTimeout).
const DefaultConnectTimeout = 10 * time.Second

// Hints name, in natsconn's errors, the setting that fixes each: the
// crowdlog command's flags (FlagHints, used for a zero field) or the
// fields of a library's configuration (ingest.Config's).
type Hints struct {
	// URL is the setting of the server URL ("--nats").
	URL string
	// NKey is the setting of the NKey seed file ("--nats-nkey").
	NKey string
	// CA, Cert and Key are the settings of the TLS files ("--nats-ca",
	// "--nats-cert", "--nats-key").
	CA, Cert, Key string
}

// FlagHints are the crowdlog command's flags, the hints of a zero Hints.
var FlagHints = Hints{URL: "--nats", NKey: "--nats-nkey", CA: "--nats-ca", Cert: "--nats-cert", Key: "--nats-key"}

// or is h with each empty field taken from d.
func (h Hints) or(d Hints) Hints {
	pick := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	return Hints{URL: pick(h.URL, d.URL), NKey: pick(h.NKey, d.NKey), CA: pick(h.CA, d.CA), Cert: pick(h.Cert, d.Cert), Key: pick(h.Key, d.Key)}
}

// Options returns the nats.go options s stands for. Errors: a client
// certificate without its key (or the reverse), an unreadable NKey seed.
func (s Security) Options() ([]nats.Option, error) {
	h := s.Hints.or(FlagHints)
	var opts []nats.Option
	switch s.Role {
	case "":
	case natsauth.Client:
		opts = append(opts, nats.CustomInboxPrefix(ClientInboxPrefix()))
	default:
		opts = append(opts, nats.CustomInboxPrefix(natsauth.InboxPrefix(s.Role)))
	}
	if s.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(s.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("NATS NKey seed %s (%s; the operator creates it with crowdlog nats-config nkey): %w", s.NKeyFile, h.NKey, err)
		}
		opts = append(opts, o)
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		return nil, fmt.Errorf("NATS TLS: give both the client certificate and its key (%s and %s), or neither", h.Cert, h.Key)
	}
	if s.CAFile != "" {
		opts = append(opts, nats.RootCAs(s.CAFile))
	}
	if s.CertFile != "" {
		opts = append(opts, nats.ClientCert(s.CertFile, s.KeyFile))
	}
	return opts, nil
}

// ClientInboxPrefix returns a fresh inbox prefix for one client
// connection: natsauth.InboxPrefix(natsauth.Client) + "." +
// rand.Text() (26 base32 characters, 130 bits from crypto/rand), so no
// client can name another's inbox. The clients' subscribe permission
// (natsauth.Table) allows only subjects below one such token; the limit
// of what a shared credential can enforce is in natsauth's package
// comment.
func ClientInboxPrefix() string { return natsauth.InboxPrefix(natsauth.Client) + "." + rand.Text() }

// Connect connects to url with reconnects forever (services outlive a
// NATS restart), without credential or TLS; see ConnectAs.
func Connect(url, name string) (*nats.Conn, error) { return ConnectAs(url, name, Security{}) }

// ConnectAs connects to url (comma-separated for a cluster) as name, with
// s's credential, TLS and inbox prefix, each attempt bounded by
// s.ConnectTimeout (DefaultConnectTimeout), reconnecting forever and
// logging disconnects. Errors say whether the server is down or the credential or
// TLS files were refused.
func ConnectAs(url, name string, s Security) (*nats.Conn, error) {
	sec, err := s.Options()
	if err != nil {
		return nil, err
	}
	timeout := s.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	opts := append([]nats.Option{nats.Name(name), nats.Timeout(timeout), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				slog.Warn("NATS disconnected; reconnecting", "conn", name, "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { slog.Info("NATS reconnected", "conn", name, "server", c.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			slog.Warn("NATS error (a permission violation means the role's credential may not use this subject)", "conn", name, "subject", subj, "err", err)
		}),
	}, sec...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		h := s.Hints.or(FlagHints)
		if errors.Is(err, nats.ErrAuthorization) {
			return nil, fmt.Errorf("connect to NATS at %s as %s: %w (check %s: the server config must list this role's public key)", RedactURLs(url), name, err, h.NKey)
		}
		return nil, fmt.Errorf("connect to NATS at %s (is it running? give %s; with TLS check %s, %s, %s): %w", RedactURLs(url), h.URL, h.CA, h.Cert, h.Key, err)
	}
	return nc, nil
}

// RedactURLs is urls (one URL or a comma-separated list) with the password
// of each URL's user info replaced by "xxxxx" (url.URL.Redacted), for
// errors and logs; an item that does not parse is kept as it is unless it
// has user info, which is then replaced whole.
func RedactURLs(urls string) string {
	items := strings.Split(urls, ",")
	for i, item := range items {
		u, err := neturl.Parse(strings.TrimSpace(item))
		switch {
		case err == nil:
			items[i] = u.Redacted()
		case strings.Contains(item, "@"):
			items[i] = "(a URL with user info, not shown)"
		}
	}
	return strings.Join(items, ",")
}

// RoleSecurity is the Security of role r whose NKey seed lies in keyDir
// under natsauth.SeedFile(r) (as natsauth.GenerateNKey and
// natsserver.StartAuth write it), without TLS.
func RoleSecurity(keyDir string, r natsauth.Role) Security {
	return Security{Role: r, NKeyFile: filepath.Join(keyDir, natsauth.SeedFile(r))}
}
