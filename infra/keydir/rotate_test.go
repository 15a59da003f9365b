package keydir_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// TestKeysRotate: after a rotation the new key has the next id, the old one
// is kept under ROLE.ID.key (0600), layers sealed for either peel with both
// loaded (two keys valid during a rotation), and a relay holding only the
// new key reports the old id as unknown.
func TestKeysRotate(t *testing.T) {
	dir := t.TempDir()
	if err := keydir.EnsureKeys(dir); err != nil {
		t.Fatal(err)
	}
	oldPub, err := onion.LoadPublicKeyFor(filepath.Join(dir, "relay-b.key.pub"), "relay-b")
	if err != nil {
		t.Fatal(err)
	}
	oldID, newID, err := keydir.Rotate(dir, "relay-b")
	if err != nil || newID != oldID+1 || oldID != int(oldPub.ID) {
		t.Fatalf("rotate: old %d new %d err %v", oldID, newID, err)
	}
	oldPath := filepath.Join(dir, "relay-b.2.key")
	if st, err := os.Stat(oldPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("old key kept as %s: %v %v", oldPath, st.Mode(), err)
	}
	newKey, _ := onion.LoadKeyPair(filepath.Join(dir, "relay-b.key"))
	oldKey, _ := onion.LoadKeyPair(oldPath)
	newPub, err := onion.LoadPublicKeyFor(filepath.Join(dir, "relay-b.key.pub"), "relay-b")
	if err != nil || int(newPub.ID) != newID {
		t.Fatalf("new public key: id %d, %v", newPub.ID, err)
	}
	for _, pub := range []onion.PublicKey{oldPub, newPub} {
		l, _ := onion.SealLayer(pub, onion.Hop{Kind: onion.HopDeliver}, []byte("x"))
		if _, in, err := onion.Peel([]*onion.KeyPair{newKey, oldKey}, l); err != nil || string(in) != "x" {
			t.Fatalf("layer for key id %d does not peel during the rotation: %v", pub.ID, err)
		}
	}
	l, _ := onion.SealLayer(oldPub, onion.Hop{Kind: onion.HopDeliver}, []byte("x"))
	if _, _, err := onion.Peel([]*onion.KeyPair{newKey}, l); err == nil {
		t.Fatal("retired key id still accepted")
	}
	ks, err := keydir.List(dir)
	if err != nil || len(ks) != 4 {
		t.Fatalf("list: %d keys, %v", len(ks), err)
	}
}
