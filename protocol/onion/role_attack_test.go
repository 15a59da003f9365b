package onion

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestAttackCrossRoleLayer: an operator installs one key pair for two hops
// (the same file copied as relay-a.key and relay-b.key). A layer sealed for
// relay b is then handed to relay a, e.g. to make it forward a message off
// the route or twice. With the hop role bound into the HPKE info (the key
// file's name, layerInfo) the layer does not open at the other role; it
// opens at its own. Control: keys without a role (the binding off) open the
// layer at either hop.
func TestAttackCrossRoleLayer(t *testing.T) {
	kp, err := GenerateKeyPair(1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, role := range []string{"relay-a", "relay-b"} {
		if err := SaveKeyPair(filepath.Join(dir, role+".key"), role, kp); err != nil {
			t.Fatal(err)
		}
	}
	asA, err := LoadKeyPair(filepath.Join(dir, "relay-a.key"))
	if err != nil {
		t.Fatal(err)
	}
	pubB, err := LoadPublicKeyFor(filepath.Join(dir, "relay-b.key.pub"), "relay-b")
	if err != nil {
		t.Fatal(err)
	}
	asB, _ := LoadKeyPair(filepath.Join(dir, "relay-b.key"))
	const n = 100
	crossed, own, control := 0, 0, 0
	for i := 0; i < n; i++ {
		l, err := SealLayer(pubB, Hop{Kind: HopKafka, Key: []byte{byte(i)}}, []byte("inner"))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Peel([]*KeyPair{asA}, l); err == nil {
			crossed++
		}
		if _, _, err := Peel([]*KeyPair{asB}, l); err == nil {
			own++
		}
		u, _ := SealLayer(kp.PublicKey(), Hop{Kind: HopKafka, Key: []byte{byte(i)}}, []byte("inner"))
		if _, _, err := Peel([]*KeyPair{kp}, u); err == nil {
			control++
		}
	}
	fmt.Printf("ATTACK cross-role-layer: %d of %d layers sealed for relay b opened at relay a holding the same key (%d of %d at relay b; control without roles: %d of %d opened)\n",
		crossed, n, own, n, control, n)
	if own != n || control != n {
		t.Fatalf("the layer must open at its own role (%d of %d) and without roles (%d of %d)", own, n, control, n)
	}
	if crossed != 0 {
		t.Fatalf("%d layers sealed for relay b opened at relay a", crossed)
	}
}
