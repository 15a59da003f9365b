package protocol

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

	"github.com/cloudflare/circl/oprf"
)

var update = flag.Bool("update", false, "rewrite protocol/testdata/golden-*.json from the current code")

// fixedReader is a deterministic byte stream (ChaCha8 keyed by SHA-256 of a
// label): report ids, AEAD nonces and HPKE ephemeral keys of the vectors.
func fixedReader(label string) io.Reader {
	return mrand.NewChaCha8(sha256.Sum256([]byte("crowdlog golden " + label)))
}

func fixedBytes(label string, n int) []byte {
	b := make([]byte, n)
	io.ReadFull(fixedReader(label), b)
	return b
}

// golden compares (or with -update writes) testdata/golden-<name>.json.
func golden(t *testing.T, name string, got map[string]string) {
	t.Helper()
	path := filepath.Join("testdata", "golden-"+name+".json")
	if *update {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want := loadGolden(t, name)
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

func loadGolden(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden-"+name+".json"))
	if err != nil {
		if *update {
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

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func scalarHex(s interface{ MarshalBinary() ([]byte, error) }) string {
	b, _ := s.MarshalBinary()
	return hex.EncodeToString(b)
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func hexList(t *testing.T, s string) [][]byte {
	var out [][]byte
	for _, p := range strings.Split(s, ",") {
		out = append(out, mustHex(t, p))
	}
	return out
}

// evaluateOverWire encodes q, decodes it as the service would, evaluates it
// under key and returns the response after its own encode/decode round trip.
func evaluateOverWire(t testing.TB, key *oprf.PrivateKey, q *RandomnessRequest) *RandomnessResponse {
	t.Helper()
	b, _ := q.MarshalBinary()
	q2, err := ParseRandomnessRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := Evaluate(key, q2)
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := resp.MarshalBinary()
	resp2, err := ParseRandomnessResponse(rb)
	if err != nil {
		t.Fatal(err)
	}
	return resp2
}

func omegaFor(t testing.TB, key *oprf.PrivateKey, app, epoch, artifact string) []byte {
	t.Helper()
	fin, req, err := Blind(key.Public(), epoch, [][]byte{OPRFInput(app, epoch, artifact)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Finalize(fin, evaluateOverWire(t, key, req))
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}
