// Package testvec holds the helpers of crowdlog's wire test vectors: the
// golden files testdata/golden-<name>.json of each protocol package (every
// message's encoding for fixed inputs, so a second implementation can be
// checked against them), deterministic byte streams for their random inputs,
// and readers for the RFC test-vector files. `go test ./protocol/... -run
// TestGolden -update` rewrites the golden files after a deliberate change.
package testvec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var Update = flag.Bool("update", false, "rewrite testdata/golden-*.json from the current code")

// FixedReader is a deterministic byte stream (ChaCha8 keyed by SHA-256 of a
// label): report ids, AEAD nonces and HPKE ephemeral keys of the vectors.
func FixedReader(label string) io.Reader {
	return mrand.NewChaCha8(sha256.Sum256([]byte("crowdlog golden " + label)))
}

func FixedBytes(label string, n int) []byte {
	b := make([]byte, n)
	io.ReadFull(FixedReader(label), b)
	return b
}

// Golden compares (or with -update writes) testdata/golden-<name>.json.
func Golden(t *testing.T, name string, got map[string]string) {
	t.Helper()
	path := filepath.Join("testdata", "golden-"+name+".json")
	if *Update {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want := LoadGolden(t, name)
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got[k] != want[k] {
			t.Errorf("%s: %s = %q, golden %q", path, k, got[k], want[k])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s not in the golden file (run with -update after a deliberate change)", path, k)
		}
	}
}

func LoadGolden(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden-"+name+".json"))
	if err != nil {
		if *Update {
			return nil
		}
		t.Fatalf("golden file missing: %v (generate with go test ./protocol -run TestGolden -update)", err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func MustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ScalarHex(s interface{ MarshalBinary() ([]byte, error) }) string {
	b, _ := s.MarshalBinary()
	return hex.EncodeToString(b)
}

func ReadJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func HexList(t *testing.T, s string) [][]byte {
	var out [][]byte
	for _, p := range strings.Split(s, ",") {
		out = append(out, MustHex(t, p))
	}
	return out
}
