package attack

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/randomness"
)

// TestKeyDirOmega: with a stolen epoch key directory the attacker computes
// exactly the ω a client obtains through the VOPRF (Blind, Evaluate,
// Finalize); once the epoch is closed and its key destroyed, nothing is
// left to probe that epoch with.
func TestKeyDirOmega(t *testing.T) {
	keysDir := t.TempDir()
	keys, err := randomness.Open(filepath.Join(keysDir, "randomness.keys"), randomness.Options{Grace: -1})
	if err != nil {
		t.Fatal(err)
	}
	sk, err := keys.Epoch("2006-03")
	if err != nil {
		t.Fatal(err)
	}
	in := oprf.OPRFInput("query", "2006-03", "some artifact")
	bl, q, err := oprf.Blind(sk.Public(), "2006-03", [][]byte{in})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := oprf.Evaluate(sk, q)
	if err != nil {
		t.Fatal(err)
	}
	want, err := oprf.Finalize(bl, resp)
	if err != nil {
		t.Fatal(err)
	}
	omega, err := SeedOmega(keysDir) // the keys directory holding randomness.keys
	if err != nil {
		t.Fatal(err)
	}
	got, err := omega("query", "2006-03", "some artifact")
	if err != nil || !bytes.Equal(got, want[0]) {
		t.Fatalf("ω from the stolen key directory differs from the client's (%v)", err)
	}
	if err := keys.Close("2006-03"); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Sweep(); err != nil {
		t.Fatal(err)
	}
	after, _ := SeedOmega(filepath.Join(keysDir, "randomness.keys"))
	if w, err := after("query", "2006-03", "some artifact"); err == nil {
		t.Fatalf("destroyed epoch key still gives ω %x…", w[:4])
	}
}
