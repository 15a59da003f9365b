package ingest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/crowdlog/crowdlog/infra/keydir"
)

// TestPinSignKey: the aggregator's signing key is pinned on first use; a
// different file later is refused unless a fingerprint vouches for it; a
// fingerprint that disagrees is refused on first use too.
func TestPinSignKey(t *testing.T) {
	dir := t.TempDir()
	keys, other, state := filepath.Join(dir, "keys"), filepath.Join(dir, "other"), filepath.Join(dir, "state")
	for _, d := range []string{keys, other} {
		if _, err := keydir.EnsureSigningKey(filepath.Join(d, keydir.AggregatorSignKey)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(state, stateKeys), 0o700); err != nil {
		t.Fatal(err)
	}
	fp := func(d string) string {
		b, err := os.ReadFile(filepath.Join(d, AggregatorSignKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:])
	}
	log := slog.Default()
	first, err := pinSignKey(Config{StateDir: state, KeysDir: keys}, log)
	if err != nil {
		t.Fatal(err)
	}
	// later runs: from the pin alone, or the same file
	if k, err := pinSignKey(Config{StateDir: state}, log); err != nil || !k.Equal(first) {
		t.Fatalf("from the pin: %v", err)
	}
	if _, err := pinSignKey(Config{StateDir: state, KeysDir: other}, log); !errors.Is(err, ErrAggregatorKeyChanged) {
		t.Fatalf("another key: %v, want ErrAggregatorKeyChanged", err)
	}
	if _, err := pinSignKey(Config{StateDir: state, KeysDir: other, Fingerprints: map[string]string{AggregatorSignKeyFile: fp(keys)}}, log); !errors.Is(err, ErrKeyFingerprint) {
		t.Fatalf("a fingerprint that disagrees: %v, want ErrKeyFingerprint", err)
	}
	rotated, err := pinSignKey(Config{StateDir: state, KeysDir: other, Fingerprints: map[string]string{AggregatorSignKeyFile: fp(other)}}, log)
	if err != nil || rotated.Equal(first) {
		t.Fatalf("a vouched rotation: %v", err)
	}
	if k, err := pinSignKey(Config{StateDir: state}, log); err != nil || !k.Equal(rotated) {
		t.Fatalf("the rotation is pinned: %v", err)
	}
	if _, err := pinSignKey(Config{Memory: true}, log); err == nil {
		t.Fatal("no key anywhere: accepted")
	}
	if err := checkFingerprintNames(map[string]string{"relay-c.key.pub": fp(keys)}); err == nil {
		t.Fatal("an unknown file name accepted")
	}
}
