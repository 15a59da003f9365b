package onion

import (
	"bytes"
	"errors"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
)

func TestOnion(t *testing.T) {
	ra, _ := GenerateKeyPair(1)
	rb, _ := GenerateKeyPair(7)
	ag, _ := GenerateKeyPair(3)
	report := bytes.Repeat([]byte{0xab}, 300)
	l3, err := SealLayer(ag.PublicKey(), Hop{Kind: HopDeliver}, report)
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := SealLayer(rb.PublicKey(), Hop{Kind: HopKafka, Key: []byte{1, 2}}, l3)
	l1, _ := SealLayer(ra.PublicKey(), Hop{Kind: HopRelay, Subject: "crowdlog.relay.b"}, l2)

	// a relay holding the wrong key learns nothing and reports it
	if _, _, err := Peel([]*KeyPair{rb}, l1); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("wrong key id: %v", err)
	}
	ra2, _ := GenerateKeyPair(1)
	if _, _, err := Peel([]*KeyPair{ra2}, l1); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("wrong key same id: %v", err)
	}
	hop, in, err := Peel([]*KeyPair{rb, ra}, l1)
	if err != nil || hop.Kind != HopRelay || hop.Subject != "crowdlog.relay.b" || !bytes.Equal(in, l2) {
		t.Fatalf("layer 1: %v %+v", err, hop)
	}
	hop, in, err = Peel([]*KeyPair{rb}, in)
	if err != nil || hop.Kind != HopKafka || !bytes.Equal(hop.Key, []byte{1, 2}) || !bytes.Equal(in, l3) {
		t.Fatalf("layer 2: %v %+v", err, hop)
	}
	hop, in, err = Peel([]*KeyPair{ag}, in)
	if err != nil || hop.Kind != HopDeliver || !bytes.Equal(in, report) {
		t.Fatalf("layer 3: %v %+v", err, hop)
	}
	// size classes: reports of 10 and 300 bytes give layers of one length
	small, _ := SealLayer(ag.PublicKey(), Hop{Kind: HopDeliver}, report[:10])
	if len(small) != len(l3) {
		t.Fatalf("padding: %d vs %d bytes", len(small), len(l3))
	}
	// tampering is detected
	l1[len(l1)-1] ^= 1
	if _, _, err := Peel([]*KeyPair{ra}, l1); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("tampered: %v", err)
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	k, _ := GenerateKeyPair(4)
	if err := SaveKeyPair(dir+"/a.key", "relay-a", k); err != nil {
		t.Fatal(err)
	}
	k2, err := LoadKeyPair(dir + "/a.key")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := LoadPublicKey(dir + "/a.key.pub")
	if err != nil {
		t.Fatal(err)
	}
	l, _ := SealLayer(pub, Hop{Kind: HopDeliver}, []byte("x"))
	if _, in, err := Peel([]*KeyPair{k2}, l); err != nil || string(in) != "x" {
		t.Fatalf("round trip through files: %v", err)
	}
}

// TestLoadPublicKeyFor: a client given another hop's public key file gets
// ErrKeyRole instead of reports the relay silently drops.
func TestLoadPublicKeyFor(t *testing.T) {
	dir := t.TempDir()
	k, _ := GenerateKeyPair(2)
	if err := SaveKeyPair(dir+"/relay-b.key", "relay-b", k); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPublicKeyFor(dir+"/relay-b.key.pub", "relay-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPublicKeyFor(dir+"/relay-b.key.pub", "relay-a"); !errors.Is(err, ErrKeyRole) {
		t.Fatalf("relay b's key used for relay a: %v, want ErrKeyRole", err)
	}
}
