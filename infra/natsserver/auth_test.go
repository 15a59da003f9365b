package natsserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
)

// writePEM writes a DER block of kind to path.
func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA, into dir; it returns the CA path and
// the server's and the client's certificate and key paths.
func testPKI(t *testing.T, dir string) (ca string, server, client natsauth.TLSFiles) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "crowdlog test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	ca = filepath.Join(dir, "ca.pem")
	writePEM(t, ca, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) natsauth.TLSFiles {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		f := natsauth.TLSFiles{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: ca}
		writePEM(t, f.Cert, "CERTIFICATE", der)
		writePEM(t, f.Key, "EC PRIVATE KEY", kder)
		return f
	}
	return ca, leaf("server", 2, x509.ExtKeyUsageServerAuth), leaf("client", 3, x509.ExtKeyUsageClientAuth)
}

// TestStartAuthTLS: the server generated from the permission table with
// TLS on takes a role with its NKey, the CA and a client certificate, and
// lets it do its job (the admin creates relay a's stream in relay a's
// account, the client publishes to relay a through its account's import
// and gets the acknowledgement); it refuses a connection without the client
// certificate, without the CA, and without the NKey.
func TestStartAuthTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	ca, srvTLS, cli := testPKI(t, dir)
	keys := filepath.Join(dir, "keys")
	ns, err := Options{Dir: filepath.Join(dir, "js")}.StartAuth(ctx, keys, &srvTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	conf, err := os.ReadFile(filepath.Join(keys, ConfigFileName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), "verify: true") || strings.Contains(string(conf), `"SU`) {
		t.Fatalf("server config: want TLS verify on and no seed in it:\n%s", conf)
	}
	full := func(r natsauth.Role) natsconn.Security {
		s := natsconn.RoleSecurity(keys, r)
		s.CAFile, s.CertFile, s.KeyFile = ca, cli.Cert, cli.Key
		return s
	}
	admin, err := natsconn.ConnectAs(ns.URL, "admin", full(natsauth.Admin))
	if err != nil {
		t.Fatalf("admin with NKey and TLS: %v", err)
	}
	defer admin.Close()
	// the admin reaches relay a's account through its import of relay
	// a's JetStream API (one account per role)
	js, _ := jetstream.NewWithAPIPrefix(admin, natsauth.JSAPIPrefix(natsauth.RelayA))
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: protocol.RelayStream, Subjects: []string{protocol.RelaySubject("a")}}); err != nil {
		t.Fatalf("admin creates relay a's stream: %v", err)
	}
	cl, err := natsconn.ConnectAs(ns.URL, "client", full(natsauth.Client))
	if err != nil {
		t.Fatalf("client with NKey and TLS: %v", err)
	}
	defer cl.Close()
	cjs, _ := jetstream.New(cl)
	if _, err := cjs.Publish(ctx, protocol.RelaySubject("a"), []byte("layer")); err != nil {
		t.Fatalf("client publishes to relay a: %v", err)
	}
	// the generated config's max_payload holds the largest onion layer
	// (1,050,112 bytes) with its headers: 2 MiB, not nats-server's 1 MiB
	if !strings.Contains(string(conf), "max_payload: 2097152\n") || cl.MaxPayload() != 2097152 {
		t.Fatalf("server config max_payload: client sees %d, want 2097152 in the config:\n%s", cl.MaxPayload(), conf)
	}
	for name, s := range map[string]natsconn.Security{
		"no client certificate": {Role: natsauth.Client, NKeyFile: full(natsauth.Client).NKeyFile, CAFile: ca},
		"no CA":                 {Role: natsauth.Client, NKeyFile: full(natsauth.Client).NKeyFile, CertFile: cli.Cert, KeyFile: cli.Key},
		"no NKey":               {Role: natsauth.Client, CAFile: ca, CertFile: cli.Cert, KeyFile: cli.Key},
	} {
		s := s
		nc, err := natsconn.ConnectAs(ns.URL, name, s)
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected; want refused", name)
			continue
		}
		t.Logf("%s: refused: %v", name, err)
	}
}

// TestServerConfigErrors: the generator refuses no users, unknown roles
// and keys that are not public user NKeys.
func TestServerConfigErrors(t *testing.T) {
	keys, err := natsauth.GenerateAll(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]natsauth.ServerConfig{
		"no users":     {},
		"unknown role": {Users: map[natsauth.Role]string{"mallory": keys[natsauth.Client]}},
		"seed as key":  {Users: map[natsauth.Role]string{natsauth.Client: "SUAEXAMPLE"}},
		"half TLS":     {Users: keys, TLS: &natsauth.TLSFiles{Cert: "c.pem"}},
	} {
		if _, err := c.Text(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
