package main

import (
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
)

// addNATSSecurityFlags adds the NATS credential and TLS flags of a role
// (--nats-nkey, --nats-ca, --nats-cert, --nats-key) to f, filling s. Like
// every flag they also come from CROWDLOG_NATS_NKEY etc. or --config.
func addNATSSecurityFlags(f *pflag.FlagSet, s *natsconn.Security) {
	f.StringVar(&s.NKeyFile, "nats-nkey", "", "NKey seed file of this role's NATS credential (crowdlog nats-config nkey --role ROLE); empty connects without one")
	f.StringVar(&s.CAFile, "nats-ca", "", "PEM CA bundle that verifies the NATS server's certificate; turns TLS on")
	f.StringVar(&s.CertFile, "nats-cert", "", "PEM client certificate for NATS TLS (with --nats-key), for servers that verify clients")
	f.StringVar(&s.KeyFile, "nats-key", "", "PEM private key of --nats-cert")
}

// as returns s for role r (its inbox prefix in the permission table).
func as(s natsconn.Security, r natsauth.Role) natsconn.Security {
	s.Role = r
	return s
}
