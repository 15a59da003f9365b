package pipelinespec

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
)

func TestSignedPipelines(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	specs := []Spec{{App: "query", Policy: "ft-u", ShamirK: 5}, {App: "click", Options: "url=domain", Policy: "dp-u", ShamirK: 2, DP: &DP{Epsilon: 1, Delta: 1e-6, D: 1, Users: 9}}}
	b, err := SignPipelines(key, "p1", specs)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseSignedPipelines(b)
	if err != nil {
		t.Fatal(err)
	}
	if a.Process != "p1" || len(a.Specs) != 2 || a.Specs[1].Digest() != specs[1].Digest() || a.Pipelines[0] != specs[0].Canonical() {
		t.Fatalf("parsed %+v", a)
	}
	if err := a.Verify(pub); err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(other); !errors.Is(err, ErrSignature) {
		t.Fatalf("other key: %v", err)
	}
	// a k changed in transit no longer verifies
	forged := append([]byte(nil), b...)
	for i := range forged {
		if forged[i] == '5' {
			forged[i] = '1'
			break
		}
	}
	f, err := ParseSignedPipelines(forged)
	if err != nil {
		t.Fatal(err)
	}
	if f.Specs[0].ShamirK != 1 || !errors.Is(f.Verify(pub), ErrSignature) {
		t.Fatalf("forged k=%d verified", f.Specs[0].ShamirK)
	}
	for _, bad := range [][]byte{nil, b[:len(b)-1], append(append([]byte(nil), b...), 0), {2, 1, 0, 0, 0}} {
		if _, err := ParseSignedPipelines(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseSignedPipelines(%x…): %v, want ErrMalformed", bad[:min(8, len(bad))], err)
		}
	}
	// none: serves every definition
	e, _ := SignPipelines(key, "p2", nil)
	if a, err := ParseSignedPipelines(e); err != nil || len(a.Specs) != 0 || a.Verify(pub) != nil {
		t.Fatalf("empty: %v", err)
	}
}

// FuzzParseSignedPipelines: the client's decoder of the aggregator's
// signed announcement never panics, and what it accepts re-encodes to the
// same body.
func FuzzParseSignedPipelines(f *testing.F) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	b, _ := SignPipelines(key, "p", []Spec{{App: "query", Policy: "ft-u", ShamirK: 5}})
	f.Add(b)
	e, _ := SignPipelines(key, "", nil)
	f.Add(e)
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseSignedPipelines(b)
		if err != nil {
			return
		}
		if len(a.Specs) != len(a.Pipelines) || len(a.body)+ed25519.SignatureSize != len(b) {
			t.Fatalf("parsed %d specs of %d texts, body %d of %d bytes", len(a.Specs), len(a.Pipelines), len(a.body), len(b))
		}
	})
}
