package natsconn

import (
	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/natsauth"
)

// DefaultURL is the NATS URL a role connects to unless --nats says
// otherwise.
const DefaultURL = "nats://127.0.0.1:4222"

// Options are a role's NATS connection flags: --nats (URL; a
// comma-separated list for a cluster) and the Security flags. Roles embed
// them in their own Options.
type Options struct {
	URL string
	Security
}

// AddFlags adds --nats (default DefaultURL, described by urlUsage) and the
// Security flags to f.
func (o *Options) AddFlags(f *pflag.FlagSet, urlUsage string) {
	f.StringVar(&o.URL, "nats", DefaultURL, urlUsage)
	o.Security.AddFlags(f)
}

// AddFlags adds the NATS credential and TLS flags of a role (--nats-nkey,
// --nats-ca, --nats-cert, --nats-key) to f, filling s. Like every flag
// they also come from CROWDLOG_NATS_NKEY etc. or --config.
func (s *Security) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&s.NKeyFile, "nats-nkey", "", "NKey seed file of this role's NATS credential (crowdlog nats-config nkey --role ROLE); empty connects without one")
	f.StringVar(&s.CAFile, "nats-ca", "", "PEM CA bundle that verifies the NATS server's certificate; turns TLS on")
	f.StringVar(&s.CertFile, "nats-cert", "", "PEM client certificate for NATS TLS (with --nats-key), for servers that verify clients")
	f.StringVar(&s.KeyFile, "nats-key", "", "PEM private key of --nats-cert")
}

// As returns s for role r (its inbox prefix in the permission table).
func (s Security) As(r natsauth.Role) Security {
	s.Role = r
	return s
}

// Connect connects to o.URL as role r (ConnectAs), naming the connection
// name.
func (o Options) Connect(name string, r natsauth.Role) (*nats.Conn, error) {
	return ConnectAs(o.URL, name, o.Security.As(r))
}
