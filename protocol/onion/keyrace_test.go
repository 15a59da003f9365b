package onion

import (
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// concurrentFirstPeels peels layers with a fresh copy of a key (made by
// fresh) from one goroutine per layer, rounds times, and returns how many
// peels failed. This is what a relay or aggregator does right after it
// starts: its peel workers share a key that was just read from disk.
func concurrentFirstPeels(t *testing.T, rounds int, layers [][]byte, fresh func() *KeyPair) int64 {
	t.Helper()
	var fails atomic.Int64
	for range rounds {
		kp := fresh()
		var wg sync.WaitGroup
		for _, l := range layers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, _, err := Peel([]*KeyPair{kp}, l); err != nil {
					fails.Add(1)
				}
			}()
		}
		wg.Wait()
	}
	return fails.Load()
}

func sealedLayers(t *testing.T, kp *KeyPair, n int) [][]byte {
	t.Helper()
	layers := make([][]byte, n)
	for i := range layers {
		var err error
		if layers[i], err = SealLayer(kp.PublicKey(), Hop{Kind: HopDeliver}, []byte("report")); err != nil {
			t.Fatal(err)
		}
	}
	return layers
}

// TestLoadedKeyPeelsConcurrently is the regression test of the lost
// reports after relay restarts: a key from LoadKeyPair must open every
// genuine layer even when its first uses are concurrent (see
// KeyPair.Prepare; without it about 3% of such peels failed).
func TestLoadedKeyPeelsConcurrently(t *testing.T) {
	kp, err := GenerateKeyPair(3)
	if err != nil {
		t.Fatal(err)
	}
	kp.Role = "relay-b" // as LoadKeyPair sets it from the file
	path := filepath.Join(t.TempDir(), "relay-b.key")
	if err := SaveKeyPair(path, "relay-b", kp); err != nil {
		t.Fatal(err)
	}
	layers := sealedLayers(t, kp, 8)
	const rounds = 500
	fails := concurrentFirstPeels(t, rounds, layers, func() *KeyPair {
		k, err := LoadKeyPair(path)
		if err != nil {
			t.Fatal(err)
		}
		return k
	})
	if fails > 0 {
		t.Fatalf("%d of %d concurrent first peels with a loaded key failed", fails, rounds*len(layers))
	}
}

// TestPrepareHandBuiltKey: a KeyPair built from an unmarshalled private key
// is safe to share once Prepare ran, and Prepare fills a missing public key.
func TestPrepareHandBuiltKey(t *testing.T) {
	kp, err := GenerateKeyPair(4)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := kp.Private.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	layers := sealedLayers(t, kp, 8)
	const rounds = 500
	fails := concurrentFirstPeels(t, rounds, layers, func() *KeyPair {
		sk, err := kemScheme.UnmarshalBinaryPrivateKey(raw)
		if err != nil {
			t.Fatal(err)
		}
		k := &KeyPair{ID: 4, Private: sk}
		if err := k.Prepare(); err != nil {
			t.Fatal(err)
		}
		return k
	})
	if fails > 0 {
		t.Fatalf("%d of %d concurrent first peels after Prepare failed", fails, rounds*len(layers))
	}
}

func TestPrepareKeyMismatch(t *testing.T) {
	a, _ := GenerateKeyPair(1)
	b, _ := GenerateKeyPair(1)
	bad := &KeyPair{ID: 1, Public: a.Public, Private: b.Private}
	if err := bad.Prepare(); !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("Prepare of a mismatched pair: %v, want ErrKeyMismatch", err)
	}
	if err := PrepareKeys([]*KeyPair{a, bad}); !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("PrepareKeys: %v, want ErrKeyMismatch", err)
	}
	if err := (&KeyPair{ID: 2}).Prepare(); err == nil {
		t.Fatal("Prepare of a key pair without a private key succeeded")
	}
}
