package natsauth

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"
)

// TLSFiles are the paths of a TLS certificate (PEM), its private key (PEM)
// and the CA bundle (PEM) that verifies the other side.
type TLSFiles struct {
	Cert, Key, CA string
}

// ServerConfig describes a nats-server configuration file (nats-server -c,
// https://docs.nats.io/running-a-nats-service/configuration).
type ServerConfig struct {
	// Users maps each role that may connect to its public NKey ("U…", 56
	// characters). A role missing here cannot connect. At least one.
	Users map[Role]string
	// TLS, when set, makes the server require TLS with a client
	// certificate signed by TLS.CA (verify: true) besides the NKey.
	TLS *TLSFiles
	// Listen is "host:port" for clients; "" leaves it to the caller
	// (nats-server's default 0.0.0.0:4222, or the embedded server's).
	Listen string
	// StoreDir is the JetStream store directory; "" leaves it out
	// (nats-server's default, or the embedded server's Dir).
	StoreDir string
	// MaxPayload in bytes; 0 means DefaultMaxPayload (2 MiB).
	MaxPayload int32
	// Cluster, when set, makes the server a member of a NATS cluster
	// whose routes authenticate (Cluster.Password); nil: a single server.
	Cluster *Cluster
}

// DefaultMaxPayload is the max_payload, in bytes, of every NATS server
// configuration crowdlog generates (ServerConfig.Text) and of its embedded
// servers (infra/natsserver): 2 MiB, twice nats-server's default of
// 1 MiB. The largest onion layer (onion.MaxLayer, 1,050,112 bytes: a Prio3
// upload of the 1 MiB size class inside relay a's layer) plus its
// Nats-Msg-Id header exceeds 1 MiB, and the Prio3 leader's requests to the
// helper are batched up to half of this (aggregator/prio3). nats-server
// warns above 8 MiB; 2 MiB keeps a slow consumer's buffered messages small.
const DefaultMaxPayload int32 = 2 << 20

// RouteUser is the user name every route of a generated cluster
// authenticates with.
const RouteUser = "route"

// MinRoutePassword is the shortest route password Text accepts, in bytes.
const MinRoutePassword = 24

// Cluster describes the routes of one NATS server of a cluster
// (https://docs.nats.io/running-a-nats-service/configuration/clustering).
// A route carries every account's messages and is not subject to the
// permission table, so the generated cluster block always requires
// authorization: a server that does not present RouteUser and Password
// cannot join. Every server of the cluster gets the same Password.
type Cluster struct {
	// Name is the cluster's name (the same on every server).
	Name string
	// Listen is "host:port" for routes (nats-server's default port 6222).
	Listen string
	// Routes are "host:port" of the cluster's servers (listing this
	// server too is fine); the generated URLs carry the credential.
	Routes []string
	// Password authenticates every route (user RouteUser); at least
	// MinRoutePassword bytes, e.g. GenerateRouteSecret's.
	Password string
}

// quote returns s as a NATS config string (JSON-style double quotes).
func quote(s string) string { return strconv.Quote(s) }

// list renders subjects as a NATS config list.
func list(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// Text renders the configuration: server-wide JetStream (and listen,
// store_dir, cluster, tls where set; max_payload always) and one account
// per role of Roles (AccountOf; JetStream enabled for JetStreamRoles),
// whose user, when c.Users has the role's key, has the role's Table row
// as permissions (publish/subscribe allow lists, allow_responses); each
// account exports its Services to their importers' accounts only and its
// AdminAPI and OperatorAPI subjects to the admin's and the operator's
// accounts, which import those under JSAPIPrefix of the owner. Requests
// through a service import reach the responder with a reply subject
// "_R_.…" of its account that nats-server maps back to the requester's
// own reply subject in the requester's account.
// Errors: no users, an unknown role, a key that is not a public user NKey,
// a cluster without its name, listen address, routes or a route password
// of MinRoutePassword bytes.
func (c ServerConfig) Text() (string, error) {
	if len(c.Users) == 0 {
		return "", errors.New("natsauth: no users: give each role's public NKey (crowdlog nats-config nkey --role ROLE)")
	}
	var b strings.Builder
	b.WriteString("# crowdlog NATS server configuration, generated from the role permission\n# table (infra/natsauth). Regenerate instead of editing: crowdlog nats-config\n")
	if c.Listen != "" {
		fmt.Fprintf(&b, "listen: %s\n", quote(c.Listen))
	}
	maxPayload := c.MaxPayload
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	fmt.Fprintf(&b, "max_payload: %d\n", maxPayload)
	if c.StoreDir != "" {
		fmt.Fprintf(&b, "jetstream: {store_dir: %s}\n", quote(c.StoreDir))
	} else {
		b.WriteString("jetstream: enabled\n")
	}
	if c.Cluster != nil {
		if err := c.Cluster.write(&b); err != nil {
			return "", err
		}
	}
	if c.TLS != nil {
		if c.TLS.Cert == "" || c.TLS.Key == "" || c.TLS.CA == "" {
			return "", errors.New("natsauth: TLS needs the server certificate, its key and the CA file (all three)")
		}
		fmt.Fprintf(&b, "tls: {\n  cert_file: %s\n  key_file: %s\n  ca_file: %s\n  verify: true\n  timeout: 5\n}\n",
			quote(c.TLS.Cert), quote(c.TLS.Key), quote(c.TLS.CA))
	}
	for r := range c.Users {
		if _, ok := Table(r); !ok {
			return "", fmt.Errorf("natsauth: unknown role %q (one of %v)", r, Roles)
		}
	}
	b.WriteString("# one account per role: a subject one role names (a reply or deliver\n# subject included) reaches another's account only through these exports\naccounts: {\n")
	for _, r := range Roles {
		fmt.Fprintf(&b, "  # %s\n  %s: {\n", r, AccountOf(r))
		if slices.Contains(JetStreamRoles, r) {
			b.WriteString("    jetstream: enabled\n")
		}
		if key, ok := c.Users[r]; ok {
			if !nkeys.IsValidPublicUserKey(key) {
				return "", fmt.Errorf("natsauth: role %s: %q is not a public user NKey (want U… from crowdlog nats-config nkey)", r, key)
			}
			p, _ := Table(r)
			if len(p.Publish) == 0 || len(p.Subscribe) == 0 {
				// nats-server reads "allow: []" as no allow list: everything
				return "", fmt.Errorf("natsauth: role %s has an empty publish or subscribe list, which nats-server would read as no restriction (give it at least its own inbox)", r)
			}
			fmt.Fprintf(&b, "    users: [\n      {nkey: %s, permissions: {\n        publish: {allow: %s}\n        subscribe: {allow: %s}\n",
				quote(key), list(p.Publish), list(p.Subscribe))
			if p.Responses {
				b.WriteString("        allow_responses: true\n")
			}
			b.WriteString("      }}\n    ]\n")
		}
		if ex := exportsOf(r); len(ex) > 0 {
			b.WriteString("    exports: [\n")
			for _, e := range ex {
				fmt.Fprintf(&b, "      {service: %s, accounts: %s}\n", quote(e.subject), list(e.accounts))
			}
			b.WriteString("    ]\n")
		}
		if im := importsOf(r); len(im) > 0 {
			b.WriteString("    imports: [\n")
			for _, i := range im {
				if i.to == i.subject {
					fmt.Fprintf(&b, "      {service: {account: %s, subject: %s}}\n", quote(i.account), quote(i.subject))
				} else {
					fmt.Fprintf(&b, "      {service: {account: %s, subject: %s}, to: %s}\n", quote(i.account), quote(i.subject), quote(i.to))
				}
			}
			b.WriteString("    ]\n")
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// write renders the cluster block: name, listen, authorization (user
// RouteUser, the password) and the routes with the credential in their URLs.
func (cl *Cluster) write(b *strings.Builder) error {
	if cl.Name == "" || cl.Listen == "" || len(cl.Routes) == 0 {
		return errors.New("natsauth: a cluster needs its name, the route listen address and the routes (host:port of every server)")
	}
	if len(cl.Password) < MinRoutePassword {
		return fmt.Errorf("natsauth: the route password has %d bytes, want at least %d (crowdlog nats-config route-secret makes one): an unauthorized route bypasses every permission", len(cl.Password), MinRoutePassword)
	}
	routes := make([]string, len(cl.Routes))
	for i, r := range cl.Routes {
		if strings.Contains(r, "/") || strings.Contains(r, "@") {
			return fmt.Errorf("natsauth: route %q: give host:port only (the credential is added)", r)
		}
		routes[i] = (&url.URL{Scheme: "nats-route", User: url.UserPassword(RouteUser, cl.Password), Host: r}).String()
	}
	fmt.Fprintf(b, "cluster: {\n  name: %s\n  listen: %s\n  authorization: {user: %s, password: %s, timeout: 2}\n  routes: %s\n}\n",
		quote(cl.Name), quote(cl.Listen), quote(RouteUser), quote(cl.Password), list(routes))
	return nil
}

// GenerateRouteSecret writes a new route password (32 random bytes,
// hex: 64 characters) to path, mode 0600, refusing to overwrite an
// existing file, and returns it. Every server of a cluster needs the same
// file (Cluster.Password; crowdlog nats-config --route-secret).
func GenerateRouteSecret(path string) (string, error) {
	var k [32]byte
	if _, err := rand.Read(k[:]); err != nil {
		return "", fmt.Errorf("natsauth: route secret: %w", err)
	}
	secret := hex.EncodeToString(k[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("natsauth: write route secret (remove %s first to replace it, then regenerate every server's config): %w", path, err)
	}
	if _, err := f.WriteString(secret + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("natsauth: write route secret %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("natsauth: write route secret %s: %w", path, err)
	}
	return secret, nil
}

// ReadRouteSecret reads the route password GenerateRouteSecret wrote.
// Errors: unreadable, or shorter than MinRoutePassword.
func ReadRouteSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("natsauth: route secret: %w (create it with crowdlog nats-config route-secret --out %s)", err, path)
	}
	secret := strings.TrimSpace(string(b))
	if len(secret) < MinRoutePassword {
		return "", fmt.Errorf("natsauth: route secret %s has %d bytes, want at least %d", path, len(secret), MinRoutePassword)
	}
	return secret, nil
}

// SeedFile and PublicFile are the names, in a role's key directory, of its
// NKey seed (secret, mode 0600) and public key.
func SeedFile(r Role) string   { return "nats-" + string(r) + ".nk" }
func PublicFile(r Role) string { return "nats-" + string(r) + ".pub" }

// GenerateNKey creates a new user NKey for role r in dir: the seed
// (SUA…, the credential the role's --nats-nkey flag reads; mode 0600) and
// the public key (U…, for the server configuration; mode 0644). It
// refuses to overwrite an existing seed. Returns the public key.
func GenerateNKey(dir string, r Role) (string, error) {
	if _, ok := Table(r); !ok {
		return "", fmt.Errorf("natsauth: unknown role %q (one of %v)", r, Roles)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("natsauth: key directory: %w", err)
	}
	seedPath := filepath.Join(dir, SeedFile(r))
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", fmt.Errorf("natsauth: create NKey: %w", err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	f, err := os.OpenFile(seedPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("natsauth: write seed (remove %s first to replace it, then update the server config): %w", seedPath, err)
	}
	if _, err := f.Write(append(seed, '\n')); err != nil {
		f.Close()
		return "", fmt.Errorf("natsauth: write seed %s: %w", seedPath, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("natsauth: write seed %s: %w", seedPath, err)
	}
	if err := os.WriteFile(filepath.Join(dir, PublicFile(r)), []byte(pub+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("natsauth: write public key: %w", err)
	}
	return pub, nil
}

// PublicKeys reads the public NKey of every role of Roles that has a
// PublicFile in dir. Errors: an unreadable or invalid file; no file at all.
func PublicKeys(dir string) (map[Role]string, error) {
	keys := map[Role]string{}
	for _, r := range Roles {
		b, err := os.ReadFile(filepath.Join(dir, PublicFile(r)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("natsauth: public key of %s: %w", r, err)
		}
		k := strings.TrimSpace(string(b))
		if !nkeys.IsValidPublicUserKey(k) {
			return nil, fmt.Errorf("natsauth: %s: not a public user NKey", filepath.Join(dir, PublicFile(r)))
		}
		keys[r] = k
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("natsauth: no nats-ROLE.pub in %s (create them with crowdlog nats-config nkey --role ROLE --dir %s)", dir, dir)
	}
	return keys, nil
}

// EnsureAll creates, in dir, an NKey for every role of Roles that has no
// public key there yet (GenerateNKey) and returns every role's public key;
// existing keys are kept, so it is idempotent. For one host where one
// operator plays every role (a compose trial): on a real deployment each
// operator makes only its own role's key.
func EnsureAll(dir string) (map[Role]string, error) {
	for _, r := range Roles {
		if _, err := os.Stat(filepath.Join(dir, PublicFile(r))); err == nil {
			continue
		}
		if _, err := GenerateNKey(dir, r); err != nil {
			return nil, err
		}
	}
	return PublicKeys(dir)
}

// GenerateAll creates an NKey for every role of Roles in dir (see
// GenerateNKey) and returns their public keys: the one-machine setup of
// `crowdlog run`, where one operator plays every role.
func GenerateAll(dir string) (map[Role]string, error) {
	keys := map[Role]string{}
	for _, r := range Roles {
		k, err := GenerateNKey(dir, r)
		if err != nil {
			return nil, err
		}
		keys[r] = k
	}
	return keys, nil
}
