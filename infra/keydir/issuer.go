package keydir

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// IssuerKeys is the issuer's per-epoch key directory inside a keys
// directory: EPOCH.randomness.key and EPOCH.report.key (token.PrivateKey,
// RFC 9578 §5.5) and EPOCH.arc.key (arc.PrivateKey,
// draft-ietf-privacypass-arc-crypto), each 0600. The issuer holds all
// of them; the randomness service needs only the randomness keys and the
// aggregator only the report and ARC keys (give each role a keys directory
// with only those files to keep the aggregator from minting randomness
// tokens).
const IssuerKeys = "issuer.keys"

// issuerEpoch is the pattern of epoch names that may name key files (the
// randomness service's rule).
var issuerEpoch = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidIssuerEpoch reports whether epoch may name issuer key files:
// 1..64 of [A-Za-z0-9._-], not "." or "..".
func ValidIssuerEpoch(epoch string) bool {
	return issuerEpoch.MatchString(epoch) && epoch != "." && epoch != ".."
}

// TokenKeyPath is the file of the token key of kind and epoch.
func TokenKeyPath(dir string, kind token.Kind, epoch string) string {
	return filepath.Join(dir, IssuerKeys, epoch+"."+kind.String()+".key")
}

// ARCKeyPath is the file of the ARC key of epoch.
func ARCKeyPath(dir, epoch string) string {
	return filepath.Join(dir, IssuerKeys, epoch+".arc.key")
}

// EnsureIssuerKeys creates the token keys of both kinds and the ARC key of
// epoch in dir/issuer.keys when missing; in a role directory (custody
// marker, GenerateRole) only the kinds its role holds (IssuerKindsOf: the
// aggregator's report and ARC keys, the randomness operator's randomness
// key), and it errors for a role that holds none. It is
// idempotent and safe to run from several processes at once on one file
// system: each file is written under a temporary name and linked into
// place, so the first writer wins and the others keep its key.
func EnsureIssuerKeys(dir, epoch string) error {
	if !ValidIssuerEpoch(epoch) {
		return fmt.Errorf("issuer keys: epoch %q is not 1..64 of [A-Za-z0-9._-]", epoch)
	}
	held, err := IssuerKindsOf(dir)
	if err != nil {
		return err
	}
	if len(held) == 0 {
		role, _ := DirRole(dir)
		return fmt.Errorf("issuer keys: the keys directory %s belongs to %s, which issues no tokens: %w (run the issuer at the aggregator's or the randomness operator)", dir, role, ErrNotCustodian)
	}
	if err := os.MkdirAll(filepath.Join(dir, IssuerKeys), 0o700); err != nil {
		return fmt.Errorf("issuer keys dir: %w", err)
	}
	for _, kind := range []token.Kind{token.KindRandomness, token.KindReport} {
		if !slices.Contains(held, kind.String()) {
			continue
		}
		path := TokenKeyPath(dir, kind, epoch)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		k, err := token.GenerateKey(kind, epoch)
		if err != nil {
			return err
		}
		b, err := k.MarshalBinary()
		if err != nil {
			return err
		}
		if err := createOnce(path, b); err != nil {
			return err
		}
	}
	if !slices.Contains(held, "arc") {
		return nil
	}
	return ensureARCKey(dir, epoch)
}

// createOnce writes b to path (mode 0600) unless path exists: a synced
// temporary file linked into place (atomicfile.CreateOnce: link fails
// when another writer won, and a reader never sees a partial key).
func createOnce(path string, b []byte) error {
	if err := atomicfile.CreateOnce(path, b, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("issuer key: %w", err)
	}
	return nil
}

// LoadTokenKey reads the token key of kind and epoch from dir/issuer.keys.
// Errors wrap os.ErrNotExist when the file is missing (an operator creates
// it: `crowdlog issuer` with --epoch, or EnsureIssuerKeys; `crowdlog run` creates
// it up front), ErrNotCustodian in a role directory whose role does not
// hold keys of kind (CheckPrivate), and name the file otherwise.
func LoadTokenKey(dir string, kind token.Kind, epoch string) (*token.PrivateKey, error) {
	if !ValidIssuerEpoch(epoch) {
		return nil, fmt.Errorf("issuer keys: epoch %q is not 1..64 of [A-Za-z0-9._-]", epoch)
	}
	if !kind.Valid() {
		return nil, fmt.Errorf("issuer keys: no token key of kind %s", kind)
	}
	path := TokenKeyPath(dir, kind, epoch)
	if err := CheckPrivate(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("issuer key %s: %w", path, err)
	}
	k, err := token.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("issuer key %s: %w", path, err)
	}
	if k.Kind() != kind || k.Epoch() != epoch {
		return nil, fmt.Errorf("issuer key %s holds the %s key of epoch %q", path, k.Kind(), k.Epoch())
	}
	return k, nil
}

// ensureARCKey creates the ARC key of epoch (arc.GenerateKey) when
// missing.
func ensureARCKey(dir, epoch string) error {
	path := ARCKeyPath(dir, epoch)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	k, err := arc.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	b, err := k.MarshalBinary()
	if err != nil {
		return err
	}
	return createOnce(path, b)
}

// LoadARCKey reads the ARC key of epoch from dir/issuer.keys (the issuer
// issues credentials under it; the aggregator verifies presentations with
// it). Errors wrap os.ErrNotExist when the file is missing,
// ErrNotCustodian in a role directory whose role does not hold ARC keys
// (CheckPrivate), and name the file otherwise.
func LoadARCKey(dir, epoch string) (*arc.PrivateKey, error) {
	if !ValidIssuerEpoch(epoch) {
		return nil, fmt.Errorf("issuer keys: epoch %q is not 1..64 of [A-Za-z0-9._-]", epoch)
	}
	path := ARCKeyPath(dir, epoch)
	if err := CheckPrivate(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ARC key %s: %w", path, err)
	}
	k, err := arc.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("ARC key %s: %w", path, err)
	}
	return k, nil
}
