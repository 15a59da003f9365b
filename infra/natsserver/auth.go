package natsserver

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
	"github.com/crowdlog/crowdlog/infra/natsauth"
)

// ConfigFileName is the name of the server configuration StartAuth writes
// into its key directory.
const ConfigFileName = "nats-server.conf"

// StartAuth runs the server of o with crowdlog's permission table on, for
// one machine where one operator plays every role (`crowdlog run`, tests):
// it creates an NKey for every role of natsauth.Roles in keyDir (seeds
// natsauth.SeedFile, mode 0600; keyDir must not hold seeds already), writes
// keyDir/ConfigFileName from natsauth.ServerConfig (tls, when given: the
// server's certificate, key and the CA verifying clients) and starts from
// it (Options.ConfigFile). A role connects with
// natsconn.RoleSecurity(keyDir, role). Errors wrap the failing step.
func (o Options) StartAuth(ctx context.Context, keyDir string, tls *natsauth.TLSFiles) (*Server, error) {
	keys, err := natsauth.GenerateAll(keyDir)
	if err != nil {
		return nil, fmt.Errorf("natsserver: role credentials: %w", err)
	}
	text, err := natsauth.ServerConfig{Users: keys, TLS: tls}.Text()
	if err != nil {
		return nil, fmt.Errorf("natsserver: %w", err)
	}
	path := filepath.Join(keyDir, ConfigFileName)
	if err := atomicfile.WriteFile(path, []byte(text), 0o600); err != nil {
		return nil, fmt.Errorf("natsserver: write %s: %w", path, err)
	}
	o.ConfigFile = path
	return o.Start(ctx)
}
