// Package keydir is the layout of a crowdlog keys directory and its rules:
// the HPKE key files of relay a, relay b and the aggregator (created by
// EnsureKeys, listed by List, rotated by Rotate with the old key kept for
// the rotation window), the clients' route of public keys (LoadRoute), and
// the randomness service's epoch key directory and pin file names, and key
// custody (custody.go): one directory per operator holding only that
// role's private keys (GenerateRole), public bundles passed between
// operators (ExportPublic, ImportPublic), and loaders that refuse another
// role's private key (ErrNotCustodian).
package keydir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// Key file names inside a keys directory (see `crowdlog keys`).
const (
	RelayAKey     = "relay-a.key"
	RelayBKey     = "relay-b.key"
	AggregatorKey = "aggregator.key"
	// RandomnessSeed is the master seed of the older randomness layout
	// (epoch keys derived from it); no longer used, see RandomnessKeys.
	RandomnessSeed = "randomness.seed"
	// RandomnessKeys is the randomness service's epoch key directory: one
	// EPOCH.key file (0600) per epoch, destroyed after the epoch closes
	// (randomness.Keys).
	RandomnessKeys = "randomness.keys"
	// RandomnessPins is the clients' pin file of epoch OPRF public keys
	// (oprfclient.Client.PinFile): trust on first use, a changed key is refused.
	RandomnessPins = "randomness.pins"
	// IssuerPins is the clients' pin file of the issuer's public keys per
	// epoch (tokenclient.Client.PinFile): trust on first use, other keys
	// are refused.
	IssuerPins = "issuer.pins"
)

// EnsureKeys creates the HPKE key pairs of relay A, relay B and the
// aggregator, and the aggregator operator's Ed25519 signing key
// (AggregatorSignKey), in dir when missing (mode 0600, public halves in
// *.pub) and returns nothing else: services load their own keys, clients the .pub files.
// This is the single-host layout (every role's keys in one directory, for
// `crowdlog run`, the demo and tests); separate operators use GenerateRole,
// and EnsureKeys refuses a role directory (ErrNotCustodian).
func EnsureKeys(dir string) error {
	if role, err := DirRole(dir); err != nil {
		return err
	} else if role != "" {
		return fmt.Errorf("keys directory %s belongs to role %s: %w; the all-in-one layout (`crowdlog keys generate` without --role, `crowdlog run`) needs a directory of its own", dir, role, ErrNotCustodian)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("keys dir: %w", err)
	}
	for i, name := range []string{RelayAKey, RelayBKey, AggregatorKey} {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		k, err := onion.GenerateKeyPair(byte(i + 1))
		if err != nil {
			return err
		}
		if err := SaveKeyPair(path, name[:len(name)-4], k); err != nil {
			return err
		}
	}
	// the aggregator operator's signing key: it signs the pipeline
	// announcement clients verify (aggregator --sign-key)
	if _, err := EnsureSigningKey(filepath.Join(dir, AggregatorSignKey)); err != nil {
		return err
	}
	return nil
}

// LoadRoute reads the public keys of the route [relay A, relay B, aggregator]
// from dir.
func LoadRoute(dir string) (a, b, agg onion.PublicKey, err error) {
	if a, err = onion.LoadPublicKey(filepath.Join(dir, RelayAKey+".pub")); err != nil {
		return
	}
	if b, err = onion.LoadPublicKey(filepath.Join(dir, RelayBKey+".pub")); err != nil {
		return
	}
	agg, err = onion.LoadPublicKey(filepath.Join(dir, AggregatorKey+".pub"))
	return
}

// LoadKeyPairs reads the HPKE key files at paths (onion.LoadKeyPair), in
// order: a role started with two files during a rotation accepts layers
// sealed for either key id. It errors when paths is empty (say which
// --key files to give), when a file is another role's key in a role
// directory (ErrNotCustodian, CheckPrivate) or a file is bad (the error
// names it).
func LoadKeyPairs(paths []string) ([]*onion.KeyPair, error) {
	if len(paths) == 0 {
		return nil, errors.New("no key file given: pass --key FILE (see `crowdlog keys generate`)")
	}
	keys := make([]*onion.KeyPair, 0, len(paths))
	for _, p := range paths {
		if err := CheckPrivate(p); err != nil {
			return nil, err
		}
		k, err := onion.LoadKeyPair(p)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// SaveKeyPair writes the HPKE key pair k named name to path (mode 0600)
// and its public half to path+".pub" (0644), each atomically
// (infra/atomicfile: a reader sees the whole file or the previous one,
// never a partial key). Errors name the file.
func SaveKeyPair(path, name string, k *onion.KeyPair) error {
	priv, pub, err := onion.MarshalKeyPair(name, k)
	if err != nil {
		return fmt.Errorf("key %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, priv, 0o600); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if err := atomicfile.WriteFile(path+".pub", pub, 0o644); err != nil {
		return fmt.Errorf("public key: %w", err)
	}
	return nil
}
