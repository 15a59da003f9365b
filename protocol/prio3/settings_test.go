package prio3

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
)

func testSettings() *Settings {
	return &Settings{Campaign: "c1", Measurement: Config{Kind: KindSumVec, Length: 100, Bits: 4, L1: 20},
		ListHash: [32]byte{1, 2, 3}, MinBatchSize: 10, Epsilon: 1.5,
		LeaderKeys:    []LeaderKey{{ID: 1, Key: [32]byte{9}}, {ID: 2, Key: [32]byte{8}}},
		StatusEpsilon: 0.15, StatusDelta: 1e-6}
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
		a.Settings.MinBatchSize != 10 || a.Settings.Epsilon != 1.5 || len(a.Settings.LeaderKeys) != 2 || a.Settings.LeaderKeys[1] != want.LeaderKeys[1] ||
		a.Settings.StatusEpsilon != 0.15 || a.Settings.StatusDelta != 1e-6 {
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

// TestSignedSettingsStatus: the status (ε_c, δ) is signed and strictly
// parsed: the exact rule announces (0, 0); a δ without ε_c, a δ outside
// (0, ½), a negative or NaN ε_c, the type-6 format without the status
// (an old leader's, or a leader hiding its rule) and a truncated status
// are refused as malformed.
func TestSignedSettingsStatus(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	exact := testSettings()
	exact.StatusEpsilon, exact.StatusDelta = 0, 0
	b, err := SignSettings(key, exact)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseSignedSettings(b)
	if err != nil || a.Verify(pub) != nil || a.Settings.StatusEpsilon != 0 || a.Settings.StatusDelta != 0 {
		t.Fatalf("exact status rule: %+v, %v", a, err)
	}
	for _, c := range []struct {
		name     string
		epsC, dl float64
	}{{"delta without epsilon", 0, 1e-6}, {"delta 0", 0.1, 0}, {"delta 0.5", 0.1, 0.5}, {"negative epsilon", -1, 1e-6}, {"NaN epsilon", math.NaN(), 1e-6}, {"infinite epsilon", math.Inf(1), 1e-6}} {
		s := testSettings()
		s.StatusEpsilon, s.StatusDelta = c.epsC, c.dl
		if _, err := SignSettings(key, s); err == nil {
			t.Errorf("%s: signed", c.name)
		}
		// the same bytes forged past SignSettings: the parser refuses them
		good, _ := SignSettings(key, testSettings())
		body := bytes.Clone(good[:len(good)-ed25519.SignatureSize-16])
		body = binary.BigEndian.AppendUint64(body, math.Float64bits(c.epsC))
		body = binary.BigEndian.AppendUint64(body, math.Float64bits(c.dl))
		forged := append(body, ed25519.Sign(key, append([]byte(SettingsDomain), body...))...)
		if _, err := ParseSignedSettings(forged); !errors.Is(err, protocol.ErrMalformed) {
			t.Errorf("%s: parse %v, want ErrMalformed", c.name, err)
		}
	}
	good, _ := SignSettings(key, testSettings())
	old := bytes.Clone(good[:len(good)-ed25519.SignatureSize-16])
	old[1] = 6
	old = append(old, ed25519.Sign(key, append([]byte(SettingsDomain), old...))...)
	if _, err := ParseSignedSettings(old); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("type 6 (no status): %v, want ErrMalformed", err)
	}
	cut := bytes.Clone(good[:len(good)-ed25519.SignatureSize-8])
	cut = append(cut, ed25519.Sign(key, append([]byte(SettingsDomain), cut...))...)
	if _, err := ParseSignedSettings(cut); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("status delta cut off: %v, want ErrMalformed", err)
	}
}

func FuzzParseSignedSettings(f *testing.F) {
	_, key, _ := ed25519.GenerateKey(nil)
	b, _ := SignSettings(key, testSettings())
	f.Add(b)
	exact := testSettings()
	exact.StatusEpsilon, exact.StatusDelta, exact.Epsilon = 0, 0, 0
	b, _ = SignSettings(key, exact)
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
