package natsauth

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
)

// The commands that make a deployment's NATS credentials and server
// configuration (`crowdlog nats-config …`): their long help, options and
// steps, each writing its report to w.

// ConfigHelp is the long help of `crowdlog nats-config`.
var ConfigHelp = `nats-config prints the nats-server configuration file (nats-server -c FILE)
generated from crowdlog's permission table (infra/natsauth): JetStream on,
one account per role (the client's "` + ClientAccount + `", "CROWDLOG_RELAY_A",
…; JetStream only in the accounts of the relays, the randomness service,
the issuer and the coordinator), each with the NKey user of its role whose
public key is in --nkeys DIR (nats-ROLE.pub), allowed to publish and
subscribe only to the subjects its role uses; responders may answer the
requests they receive (allow_responses). A role without a public key in DIR
cannot connect. Accounts reach each other only through service exports
and imports: the request subjects each role answers, the relays' inboxes
(relay a's for the clients, relay b's for relay a) and the JetStream API
subjects the admin step and the pipeline operator need. With --tls-cert, --tls-key and --tls-ca the
server requires TLS and a client certificate signed by the CA. For a
cluster give --cluster-name, --cluster-listen, --routes and --route-secret
(the same file on every server, from 'crowdlog nats-config route-secret'):
every route must authenticate with it, since a route is not subject to the
permission table. The printed file then holds the route password: keep it
as secret as the route secret (mode 0600; on Kubernetes a Secret, not a
ConfigMap).

Each operator creates its role's key with 'crowdlog nats-config nkey --role
ROLE --dir DIR', keeps the seed (nats-ROLE.nk; the role's --nats-nkey) and
sends the public key (nats-ROLE.pub) to whoever runs NATS, who collects them
in one directory and runs this command. --table prints the permission table
(Markdown) instead. Roles: ` + fmt.Sprint(Roles) + `.`

// ConfigExample is the example of `crowdlog nats-config`.
const ConfigExample = `  crowdlog nats-config nkey --role relay-a --dir keys
  crowdlog nats-config --nkeys nats-pub --tls-cert server.pem --tls-key server-key.pem --tls-ca ca.pem > nats.conf
  nats-server -c nats.conf`

// ConfigOptions are the flags of `crowdlog nats-config`.
type ConfigOptions struct {
	NKeys, Listen, StoreDir string
	TLS                     TLSFiles
	Table                   bool // print the permission table instead
	Cluster                 Cluster
	RouteSecret             string // file of the route password
}

// AddFlags adds nats-config's flags to f.
func (o *ConfigOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.NKeys, "nkeys", "", "directory with the public keys nats-ROLE.pub of the roles that may connect")
	f.StringVar(&o.Listen, "listen", "", "client listen address HOST:PORT (default: nats-server's 0.0.0.0:4222)")
	f.StringVar(&o.StoreDir, "store-dir", "", "JetStream store directory (default: nats-server's)")
	o.TLS.AddFlags(f)
	f.BoolVar(&o.Table, "table", false, "print the permission table (Markdown) instead of the configuration")
	f.StringVar(&o.Cluster.Name, "cluster-name", "", "NATS cluster name (a cluster needs --cluster-listen, --routes and --route-secret too)")
	f.StringVar(&o.Cluster.Listen, "cluster-listen", "", "route listen address HOST:PORT (e.g. 0.0.0.0:6222)")
	f.StringSliceVar(&o.Cluster.Routes, "routes", nil, "HOST:PORT of every server's route port, comma-separated")
	f.StringVar(&o.RouteSecret, "route-secret", "", "file with the route password every server of the cluster shares (crowdlog nats-config route-secret)")
}

// AddFlags adds the server TLS flags (--tls-cert, --tls-key, --tls-ca).
func (t *TLSFiles) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&t.Cert, "tls-cert", "", "the server's PEM certificate (TLS on with --tls-key and --tls-ca)")
	f.StringVar(&t.Key, "tls-key", "", "the server's PEM private key")
	f.StringVar(&t.CA, "tls-ca", "", "PEM CA bundle that signs the clients' certificates (verified)")
}

// cluster reports whether any cluster flag is set.
func (o *ConfigOptions) cluster() bool {
	return o.Cluster.Name != "" || o.Cluster.Listen != "" || len(o.Cluster.Routes) > 0 || o.RouteSecret != ""
}

// Validate errors (a usage error) without --nkeys, unless --table, or
// with a cluster but no --route-secret.
func (o *ConfigOptions) Validate() error {
	if o.Table {
		return nil
	}
	if o.NKeys == "" {
		return errors.New("--nkeys is required: the directory of the roles' nats-ROLE.pub files")
	}
	if o.cluster() && o.RouteSecret == "" {
		return errors.New("--route-secret is required with a cluster: the file of the route password (crowdlog nats-config route-secret --out FILE)")
	}
	return nil
}

// Config reads the public keys and the route password and returns the
// ServerConfig o stands for.
func (o *ConfigOptions) Config() (ServerConfig, error) {
	if err := o.Validate(); err != nil {
		return ServerConfig{}, err
	}
	keys, err := PublicKeys(o.NKeys)
	if err != nil {
		return ServerConfig{}, err
	}
	sc := ServerConfig{Users: keys, Listen: o.Listen, StoreDir: o.StoreDir}
	if o.TLS != (TLSFiles{}) {
		tls := o.TLS
		sc.TLS = &tls
	}
	if o.cluster() {
		cl := o.Cluster
		if cl.Password, err = ReadRouteSecret(o.RouteSecret); err != nil {
			return ServerConfig{}, err
		}
		sc.Cluster = &cl
	}
	return sc, nil
}

// Write writes the permission table (with --table) or the server
// configuration to w.
func (o *ConfigOptions) Write(w io.Writer) error {
	if o.Table {
		_, err := fmt.Fprint(w, Markdown())
		return err
	}
	sc, err := o.Config()
	if err != nil {
		return err
	}
	text, err := sc.Text()
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(w, text)
	return err
}

// InitHelp is the long help of `crowdlog nats-config init`, which writes
// the server configuration to configFile in its directory.
func InitHelp(configFile string) string {
	return `init is for trying crowdlog on one host, where one operator plays every role
(infra/deploy/compose.yaml): it creates the NKey of every role that has none
in DIR yet (nats-ROLE.nk, mode 0600, and nats-ROLE.pub; existing keys are
kept) and writes DIR/` + configFile + ` from the permission table, as
'crowdlog nats-config --nkeys DIR' prints it. Give nats-server the file with
-c and each role its seed with --nats-nkey. On a real deployment each
operator creates only its own role's key ('crowdlog nats-config nkey').`
}

// InitOptions are the flags of `crowdlog nats-config init`.
type InitOptions struct {
	Dir string
	TLS TLSFiles
}

// AddFlags adds init's flags to f.
func (o *InitOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Dir, "dir", "nats-auth", "directory for the role NKeys and the server config")
	o.TLS.AddFlags(f)
}

// Init creates every role's missing NKey in o.Dir (EnsureAll) and writes
// the server configuration to o.Dir/configFile (mode 0644), reporting both
// to w.
func (o *InitOptions) Init(w io.Writer, configFile string) error {
	keys, err := EnsureAll(o.Dir)
	if err != nil {
		return err
	}
	sc := ServerConfig{Users: keys}
	if o.TLS != (TLSFiles{}) {
		tls := o.TLS
		sc.TLS = &tls
	}
	text, err := sc.Text()
	if err != nil {
		return err
	}
	path := filepath.Join(o.Dir, configFile)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("write the NATS server config: %w", err)
	}
	fmt.Fprintf(w, "%d role credentials in %s; server config %s\n", len(keys), o.Dir, path)
	return nil
}

// RouteSecretHelp is the long help of `crowdlog nats-config route-secret`.
const RouteSecretHelp = `route-secret writes a new route password to FILE (mode 0600; it refuses
to overwrite one). Give the same file to 'crowdlog nats-config
--route-secret' for every server of the cluster: each server then accepts
only routes that authenticate as user "` + RouteUser + `" with it.`

// WriteRouteSecret creates a route password in out (GenerateRouteSecret)
// and reports it to w.
func WriteRouteSecret(w io.Writer, out string) error {
	if _, err := GenerateRouteSecret(out); err != nil {
		return err
	}
	fmt.Fprintf(w, "route password in %s (secret; the same file for every server of the cluster)\n", out)
	return nil
}

// NKeyHelp is the long help of `crowdlog nats-config nkey`.
var NKeyHelp = `nkey creates a new user NKey (Ed25519) for ROLE in DIR: the seed
nats-ROLE.nk (mode 0600: the role's credential, given to it with
--nats-nkey or CROWDLOG_NATS_NKEY; it never leaves its operator) and the
public key nats-ROLE.pub (for 'crowdlog nats-config --nkeys'). It refuses
to overwrite an existing seed. Roles: ` + fmt.Sprint(Roles) + `.`

// NKeyOptions are the flags of `crowdlog nats-config nkey`.
type NKeyOptions struct {
	Role, Dir string
}

// AddFlags adds --role and --dir (default "keys") to f.
func (o *NKeyOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Role, "role", "", "the role: one of "+roleList())
	f.StringVar(&o.Dir, "dir", "keys", "directory to write the seed and public key to")
}

// Validate errors when the role is not one of Roles.
func (o *NKeyOptions) Validate() error {
	_, err := ParseRole(o.Role)
	return err
}

// Write creates the role's NKey (WriteNKey).
func (o *NKeyOptions) Write(w io.Writer) error {
	r, err := ParseRole(o.Role)
	if err != nil {
		return err
	}
	return WriteNKey(w, o.Dir, r)
}

// WriteNKey creates role's NKey in dir (GenerateNKey) and reports the
// seed and public key files and the public key to w.
func WriteNKey(w io.Writer, dir string, r Role) error {
	pub, err := GenerateNKey(dir, r)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: seed %s (secret), public key %s: %s\n", r, filepath.Join(dir, SeedFile(r)), filepath.Join(dir, PublicFile(r)), pub)
	return nil
}

// roleList is Roles as "client, relay-a, …".
func roleList() string {
	names := make([]string, len(Roles))
	for i, r := range Roles {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}
