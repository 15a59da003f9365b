package keydir

import (
	"bufio"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnrollmentFile is the issuer's default attester list inside a keys
// directory: one enrolled client identity per line, the hex of its Ed25519
// public key (RFC 8032); '#' starts a comment. `crowdlog keys enroll`
// appends to it; the issuer rereads it when it changes.
const EnrollmentFile = "issuer.enrolled"

// EnrollmentPath is the enrollment list's path in dir.
func EnrollmentPath(dir string) string { return filepath.Join(dir, EnrollmentFile) }

// EnrollIdentity adds pub to dir's enrollment list unless it is there
// already (mode 0644: public keys only). Concurrent enrollments append
// whole lines (O_APPEND); a key enrolled twice by a race is listed twice,
// which LoadEnrollment ignores.
func EnrollIdentity(dir string, pub ed25519.PublicKey) error {
	return EnrollIdentities(dir, []ed25519.PublicKey{pub})
}

// EnrollIdentities is EnrollIdentity for many keys with one read and one
// write of the list (what `crowdlog run` does for every replayed user).
func EnrollIdentities(dir string, pubs []ed25519.PublicKey) error {
	for _, p := range pubs {
		if len(p) != ed25519.PublicKeySize {
			return fmt.Errorf("enroll: identity key of %d bytes, want %d (Ed25519)", len(p), ed25519.PublicKeySize)
		}
	}
	have, err := LoadEnrollment(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var b strings.Builder
	for _, p := range pubs {
		var k [32]byte
		copy(k[:], p)
		if have[k] {
			continue
		}
		if have == nil {
			have = map[[32]byte]bool{}
		}
		have[k] = true
		b.WriteString(hex.EncodeToString(p))
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("enroll: %w", err)
	}
	path := EnrollmentPath(dir)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("enroll: %w", err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return fmt.Errorf("enroll %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("enroll %s: %w", path, err)
	}
	return nil
}

// LoadEnrollment reads dir's enrollment list: the set of enrolled Ed25519
// public keys. Errors wrap os.ErrNotExist when there is no list (nobody is
// enrolled) and name the file and line of a bad entry.
func LoadEnrollment(dir string) (map[[32]byte]bool, error) {
	path := EnrollmentPath(dir)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("enrollment list: %w", err)
	}
	defer f.Close()
	out := map[[32]byte]bool{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		s := sc.Text()
		if i := strings.IndexByte(s, '#'); i >= 0 {
			s = s[:i]
		}
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		b, err := hex.DecodeString(s)
		if err != nil || len(b) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("enrollment list %s:%d: not the hex of a 32-byte Ed25519 public key", path, line)
		}
		var k [32]byte
		copy(k[:], b)
		out[k] = true
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("enrollment list %s: %w", path, err)
	}
	return out, nil
}

// EnsureIdentityKey returns the client identity key in path (Ed25519,
// PKCS #8 PEM, mode 0600), creating it when missing with its public half in
// path+".pub" (what `crowdlog keys enroll` takes). It is the key that signs
// the client's IssueRequests; the issuer never learns more of it than its
// public half.
func EnsureIdentityKey(path string) (ed25519.PrivateKey, error) {
	return EnsureSigningKey(path)
}
