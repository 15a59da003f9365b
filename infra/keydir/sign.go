package keydir

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
)

// Signing key file names: the credentials of PDD's coordination (Ed25519,
// RFC 8032). The coordinator accepts recovery requests only under the
// aggregator's and clock advances only under the operator's (see
// coordinator.Coordinator.AggregatorKey and OperatorKey).
const (
	AggregatorSignKey = "aggregator-sign.key"
	OperatorSignKey   = "operator-sign.key"
)

// CoordinatorSignKey is the PDD coordinator's Ed25519 key (RFC 8032) that
// signs the rosters, day ticks and commitments it writes to topic
// "vectors" (protocol.VectorsControl): `crowdlog coordinator --sign-key`.
// aggregate-vectors verifies with its public half,
// CoordinatorSignKey+".pub" (--coordinator-pub).
const CoordinatorSignKey = "coordinator-sign.key"

// ControlSignKey is the pipeline operator's Ed25519 key (RFC 8032) that
// signs the epoch open and close records on the reports topic
// (protocol.SignedControl): `crowdlog aggregate open-epoch|close-epoch
// --control-key`, the aggregator's schedule, `crowdlog run`. Aggregators
// verify with its public half, ControlSignKey+".pub" (--control-pub).
const ControlSignKey = "control-sign.key"

// EnsureSigningKey returns the Ed25519 private key in path (PKCS #8 PEM,
// mode 0600), creating it when missing, with its public half in
// path+".pub" (PKIX PEM). Errors name the file.
func EnsureSigningKey(path string) (ed25519.PrivateKey, error) {
	if k, err := LoadSigningKey(path); err == nil {
		return k, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	pder, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(path+".pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder}), 0o644); err != nil {
		return nil, fmt.Errorf("signing key %s.pub: %w", path, err)
	}
	return priv, nil
}

// LoadSigningKey reads an Ed25519 private key written by EnsureSigningKey.
// Errors wrap os.ErrNotExist when the file is missing and ErrNotCustodian
// when path is another role's key in a role directory (CheckPrivate).
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	if err := CheckPrivate(path); err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(raw)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("signing key %s: not a PEM private key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("signing key %s: not an Ed25519 key", path)
	}
	return ek, nil
}

// LoadSigningPublic reads an Ed25519 public key: a PKIX PEM file (the .pub
// written by EnsureSigningKey), or a private key file whose public half is
// taken.
func LoadSigningPublic(path string) (ed25519.PublicKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(raw)
	if b == nil {
		return nil, fmt.Errorf("signing key %s: not PEM", path)
	}
	if b.Type == "PRIVATE KEY" {
		k, err := LoadSigningKey(path)
		if err != nil {
			return nil, err
		}
		return k.Public().(ed25519.PublicKey), nil
	}
	k, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("signing key %s: not an Ed25519 key", path)
	}
	return ek, nil
}
