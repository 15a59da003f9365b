package main

import (
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
)

// addNATSSecurityFlags is natsconn.Security.AddFlags.
func addNATSSecurityFlags(f *pflag.FlagSet, s *natsconn.Security) { s.AddFlags(f) }

// as is natsconn.Security.As.
func as(s natsconn.Security, r natsauth.Role) natsconn.Security { return s.As(r) }
