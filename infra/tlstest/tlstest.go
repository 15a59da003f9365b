// Package tlstest makes TLS material for tests of clients against local
// servers with TLS on (a kfake broker's infra/kafka.Config.TLS, a
// ClickHouse server's infra/clickhouse.WriteTLSConfig). For tests only.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLS writes a fresh self-signed CA certificate to dir/ca.pem and returns
// a server TLS configuration (ECDSA P-256, valid for one hour, for the
// address 127.0.0.1) signed by it; the server certificate and its key are
// also written, PEM, to dir/server.pem and dir/server-key.pem, and a
// client certificate signed by the same CA to dir/client.pem and
// dir/client-key.pem (all mode 0600). Clients verify the server with the
// CA file; a server that wants client certificates sets ClientCAs from it
// (ClientCAs of the returned configuration is set, ClientAuth is not).
func TLS(t testing.TB, dir string) (server *tls.Config, caFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "crowdlog test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	caFile = filepath.Join(dir, "ca.pem")
	write(t, caFile, "CERTIFICATE", caDER)
	issue := func(serial int64, name string, usage x509.ExtKeyUsage) tls.Certificate {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
		write(t, filepath.Join(dir, name+"-key.pem"), "EC PRIVATE KEY", keyDER)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	srv := issue(2, "server", x509.ExtKeyUsageServerAuth)
	issue(3, "client", x509.ExtKeyUsageClientAuth)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{Certificates: []tls.Certificate{srv}, ClientCAs: pool, MinVersion: tls.VersionTLS12}, caFile
}

func write(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
