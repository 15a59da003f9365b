package ingest

import (
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// NATSSecurity is how a device authenticates to the deployment's NATS
// (Config.NATSSecurity): the clients' shared NKey credential and TLS
// files, all PEM or NKey seed files on disk. The zero value connects
// without credential or TLS (a NATS server with auth off). The operator
// hands out the seed and the CA bundle; docs/operations.md lists what a
// client may publish and subscribe to with it.
type NATSSecurity struct {
	// NKeyFile is the path of the clients' NKey seed (SU…, the
	// nats-client.nk an operator makes with `crowdlog nats-config nkey
	// --role client`); "" connects without a credential.
	NKeyFile string
	// CAFile is the PEM CA bundle that verifies the NATS server's
	// certificate; setting it (or CertFile) turns TLS on.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// NATS servers that verify clients (both or neither).
	CertFile, KeyFile string
}

// security is s as infra/natsconn's Security of the client's row of the
// permission table (natsauth.Client), its errors naming Config's fields.
func (s NATSSecurity) security() natsconn.Security {
	return natsconn.Security{Role: natsauth.Client, NKeyFile: s.NKeyFile, CAFile: s.CAFile, CertFile: s.CertFile, KeyFile: s.KeyFile,
		Hints: natsconn.Hints{URL: "Config.NATS", NKey: "Config.NATSSecurity.NKeyFile", CA: "Config.NATSSecurity.CAFile",
			Cert: "Config.NATSSecurity.CertFile", Key: "Config.NATSSecurity.KeyFile"}}
}

// Connect connects to the deployment's NATS at url (comma-separated for a
// cluster) as client name, with s's credential and TLS files, reconnecting
// forever. Errors say whether the server is down or a file was refused,
// naming the Config field to fix (Config.NATS, Config.NATSSecurity.…).
// The caller closes the connection.
func (s NATSSecurity) Connect(url, name string) (*nats.Conn, error) {
	return natsconn.ConnectAs(url, name, s.security())
}

// LoadRoute reads the onion route [relay A, relay B, aggregator] from the
// public key files in dir (relay-a.key.pub, relay-b.key.pub,
// aggregator.key.pub, as `crowdlog keys export-public` writes them), each
// checked to be its hop's key. SubjectB is relay B's subject. Errors name
// the file; verify the files' fingerprints out of band (docs/client.md,
// "Operator keys") before shipping them.
func LoadRoute(dir string) (Route, error) {
	a, b, agg, err := loadRouteKeys(dir)
	if err != nil {
		return Route{}, err
	}
	return Route{RelayA: a, RelayB: b, Aggregator: agg, SubjectB: protocol.RelaySubject("b")}, nil
}

// loadRouteKeys reads the route's public key files from dir
// (relay-a.key.pub, relay-b.key.pub, aggregator.key.pub), each checked to
// be its hop's (onion.LoadPublicKeyFor: the file's role and a key id ≥ 1),
// so a relay-b file given as relay a's fails here rather than at the relay.
func loadRouteKeys(dir string) (a, b, agg onion.PublicKey, err error) {
	load := func(file string) (onion.PublicKey, error) {
		return onion.LoadPublicKeyFor(filepath.Join(dir, file+".pub"), strings.TrimSuffix(file, ".key"))
	}
	if a, err = load(keydir.RelayAKey); err != nil {
		return
	}
	if b, err = load(keydir.RelayBKey); err != nil {
		return
	}
	agg, err = load(keydir.AggregatorKey)
	return
}
