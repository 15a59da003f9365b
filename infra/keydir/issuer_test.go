package keydir

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/token"
)

func TestIssuerKeys(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadTokenKey(dir, token.KindRandomness, "e1"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing key: %v, want ErrNotExist", err)
	}
	// several processes ensuring at once keep one key per (kind, epoch)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = EnsureIssuerKeys(dir, "e1") }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	rnd, err := LoadTokenKey(dir, token.KindRandomness, "e1")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := LoadTokenKey(dir, token.KindReport, "e1")
	if err != nil {
		t.Fatal(err)
	}
	ak, err := LoadARCKey(dir, "e1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadARCKey(dir, "e9"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing ARC key: %v", err)
	}
	if rnd.KeyID() == rep.KeyID() || rnd.Kind() != token.KindRandomness || rep.Kind() != token.KindReport {
		t.Fatal("kinds share a key or are mixed up")
	}
	if err := EnsureIssuerKeys(dir, "e1"); err != nil {
		t.Fatal(err)
	}
	again, _ := LoadTokenKey(dir, token.KindRandomness, "e1")
	if again.KeyID() != rnd.KeyID() {
		t.Fatal("EnsureIssuerKeys replaced an existing key")
	}
	ak2, _ := LoadARCKey(dir, "e1")
	a1, _ := ak.Public().MarshalBinary()
	a2, _ := ak2.Public().MarshalBinary()
	if !bytes.Equal(a1, a2) {
		t.Fatal("EnsureIssuerKeys replaced the ARC key")
	}
	entries, _ := os.ReadDir(filepath.Join(dir, IssuerKeys))
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", e.Name())
		}
		info, _ := e.Info()
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", e.Name(), info.Mode().Perm())
		}
	}
	// a key file renamed to another epoch is refused
	os.Link(TokenKeyPath(dir, token.KindRandomness, "e1"), TokenKeyPath(dir, token.KindRandomness, "e2"))
	if _, err := LoadTokenKey(dir, token.KindRandomness, "e2"); err == nil {
		t.Fatal("key of epoch e1 loaded as e2")
	}
	for _, bad := range []string{"", "..", "a/b", strings.Repeat("x", 65)} {
		if err := EnsureIssuerKeys(dir, bad); err == nil {
			t.Errorf("epoch %q accepted", bad)
		}
	}
}

func TestEnrollment(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadEnrollment(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no list: %v", err)
	}
	var pubs []ed25519.PublicKey
	for range 3 {
		p, _, _ := ed25519.GenerateKey(rand.Reader)
		pubs = append(pubs, p)
	}
	if err := EnrollIdentity(dir, pubs[0]); err != nil {
		t.Fatal(err)
	}
	if err := EnrollIdentities(dir, pubs); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(EnrollmentPath(dir))
	lines := strings.Fields(string(raw))
	if len(lines) != 3 || lines[0] != hex.EncodeToString(pubs[0]) {
		t.Fatalf("list has %d lines (want 3, the first key first): %q", len(lines), raw)
	}
	got, err := LoadEnrollment(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pubs {
		if !got[[32]byte(p)] {
			t.Fatalf("%x not enrolled", p)
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d enrolled, want 3", len(got))
	}
	if err := EnrollIdentity(dir, pubs[0][:31]); err == nil {
		t.Fatal("short key enrolled")
	}
	os.WriteFile(EnrollmentPath(dir), append(raw, "# comment\n\nzz\n"...), 0o644)
	if _, err := LoadEnrollment(dir); err == nil || !strings.Contains(err.Error(), ":6") {
		t.Fatalf("bad line: %v, want the error to name line 6", err)
	}
}

func TestEnsureIdentityKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "identity.key")
	k, err := EnsureIdentityKey(path)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := EnsureIdentityKey(path)
	if err != nil || !k.Equal(k2) {
		t.Fatalf("second call made another key: %v", err)
	}
	info, _ := os.Stat(path)
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("identity key mode %v", info.Mode().Perm())
	}
	pub, err := LoadSigningPublic(path + ".pub")
	if err != nil || !pub.Equal(k.Public()) {
		t.Fatalf("public half: %v", err)
	}
}
