package prio3

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
)

func testSettings() *Settings {
	return &Settings{Campaign: "c1", Measurement: Config{Kind: KindSumVec, Length: 100, Bits: 4, L1: 20},
		ListHash: [32]byte{1, 2, 3}, MinBatchSize: 10, Epsilon: 1.5,
		LeaderKeys: []LeaderKey{{ID: 1, Key: [32]byte{9}}, {ID: 2, Key: [32]byte{8}}}}
}

func TestSignedSettingsRoundTrip(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	s := testSettings()
	b, err := SignSettings(key, s)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseSignedSettings(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(pub); err != nil {
		t.Fatal(err)
	}
	want := *s
	want.Measurement = s.Measurement.Resolved()
	if a.Settings.Campaign != want.Campaign || a.Settings.Measurement != want.Measurement || a.Settings.ListHash != want.ListHash ||
		a.Settings.MinBatchSize != 10 || a.Settings.Epsilon != 1.5 || len(a.Settings.LeaderKeys) != 2 || a.Settings.LeaderKeys[1] != want.LeaderKeys[1] {
		t.Fatalf("round trip: %+v, want %+v", a.Settings, want)
	}
	if a.Settings.Digest() != s.Digest() {
		t.Fatal("digest changed by the round trip (chunk 0 and its default must digest alike)")
	}
	other, _, _ := ed25519.GenerateKey(nil)
	if err := a.Verify(other); !errors.Is(err, ErrSettings) {
		t.Fatalf("another key: %v, want ErrSettings", err)
	}
	// any flipped bit of the body fails the signature or the parse
	for i := range len(b) - ed25519.SignatureSize {
		c := bytes.Clone(b)
		c[i] ^= 1
		a, err := ParseSignedSettings(c)
		if err == nil && a.Verify(pub) == nil {
			t.Fatalf("byte %d flipped: still verifies", i)
		}
	}
	s2 := testSettings()
	s2.Measurement.L1 = 21
	if s2.Digest() == s.Digest() {
		t.Fatal("S not in the digest")
	}
	s3 := testSettings()
	s3.Epsilon = 9
	if s3.Digest() != s.Digest() {
		t.Fatal("ε in the digest (operational, not the measurement)")
	}
}

func FuzzParseSignedSettings(f *testing.F) {
	_, key, _ := ed25519.GenerateKey(nil)
	b, _ := SignSettings(key, testSettings())
	f.Add(b)
	f.Add([]byte{WireVersion, msgSettings})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseSignedSettings(b)
		if err != nil {
			if !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		// what parses re-encodes to the same bytes
		body, err := a.Settings.body()
		if err != nil {
			return // a campaign or ε SignSettings refuses: parse accepted what sign would not
		}
		if !bytes.Equal(append(body, a.Sig[:]...), b) {
			t.Fatal("re-encoding differs")
		}
	})
}
