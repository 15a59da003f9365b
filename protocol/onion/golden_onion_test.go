package onion

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

// goldenKeys are the route's fixed key pairs: RFC 9180 DeriveKeyPair of a
// fixed ikm per hop, key ids 1, 2, 3.
func goldenKeys(t *testing.T) []*KeyPair {
	var out []*KeyPair
	for i, name := range []string{"relay-a", "relay-b", "aggregator"} {
		pk, sk := kemScheme.DeriveKeyPair(testvec.FixedBytes("ikm "+name, 32))
		out = append(out, &KeyPair{ID: byte(i + 1), Public: pk, Private: sk})
	}
	return out
}

// TestGoldenOnion: the three layers of one report with fixed ephemeral
// keys (HPKE Setup reads its ikmE from the given reader), and each golden
// layer peels to the golden next layer with the right hop.
func TestGoldenOnion(t *testing.T) {
	keys := goldenKeys(t)
	inner := testvec.FixedBytes("inner report", 300)
	l3, err := sealLayer(testvec.FixedReader("enc aggregator"), keys[2].PublicKey(), Hop{Kind: HopDeliver}, inner)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := sealLayer(testvec.FixedReader("enc relay-b"), keys[1].PublicKey(), Hop{Kind: HopKafka, Key: []byte{0xab, 0xcd}}, l3)
	if err != nil {
		t.Fatal(err)
	}
	l1, err := sealLayer(testvec.FixedReader("enc relay-a"), keys[0].PublicKey(), Hop{Kind: HopRelay, Subject: "crowdlog.relay.b"}, l2)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{"inner": hex.EncodeToString(inner),
		"layer_aggregator": hex.EncodeToString(l3), "layer_relay_b": hex.EncodeToString(l2), "layer_relay_a": hex.EncodeToString(l1)}
	for i, k := range keys {
		pub, _ := k.Public.MarshalBinary()
		priv, _ := k.Private.MarshalBinary()
		got[fmt.Sprintf("key%d_public", i+1)] = hex.EncodeToString(pub)
		got[fmt.Sprintf("key%d_private", i+1)] = hex.EncodeToString(priv)
	}
	testvec.Golden(t, "onion", got)
	if *testvec.Update {
		return
	}
	want := testvec.LoadGolden(t, "onion")
	layer := testvec.MustHex(t, want["layer_relay_a"])
	for i, wantHop := range []Hop{{Kind: HopRelay, Subject: "crowdlog.relay.b"}, {Kind: HopKafka, Key: []byte{0xab, 0xcd}}, {Kind: HopDeliver}} {
		hop, next, err := Peel(keys, layer)
		if err != nil || hop.Kind != wantHop.Kind || hop.Subject != wantHop.Subject || !bytes.Equal(hop.Key, wantHop.Key) {
			t.Fatalf("golden layer %d peels to %+v, %v; want %+v", i, hop, err, wantHop)
		}
		layer = next
	}
	if !bytes.Equal(layer, inner) {
		t.Fatal("innermost golden layer does not hold the golden report")
	}
}

// TestGoldenRelayKeys: a relay's key announcement (the golden route's
// relay-a key under ids 1 and 2, as during a rotation), its request and a
// refusal; the golden bytes parse back to the same ids and keys.
func TestGoldenRelayKeys(t *testing.T) {
	keys := goldenKeys(t)
	old := *keys[0]
	old.ID = 2
	p, err := RelayKeysOf("a", []*KeyPair{&old, keys[0]})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	qb, _ := (&RelayKeysRequest{Relay: "a"}).MarshalBinary()
	refused, _ := (&RelayKeysResponse{Error: "relay shutting down"}).MarshalBinary()
	pub, _ := keys[0].Public.MarshalBinary()
	testvec.Golden(t, "relaykeys", map[string]string{"relay_text": "a", "public_key": hex.EncodeToString(pub),
		"request": hex.EncodeToString(qb), "response": hex.EncodeToString(pb), "response_refused": hex.EncodeToString(refused)})
	if *testvec.Update {
		return
	}
	want := testvec.LoadGolden(t, "relaykeys")
	back, err := ParseRelayKeysResponse(testvec.MustHex(t, want["response"]))
	if err != nil || back.Relay != "a" || !bytes.Equal(back.IDs(), []byte{1, 2}) {
		t.Fatalf("golden announcement parses to %+v, %v", back, err)
	}
	for _, id := range []byte{1, 2} {
		if k, ok := back.Lookup(id); !ok || !bytes.Equal(k, pub) {
			t.Fatalf("golden announcement: key id %d", id)
		}
	}
	if q, err := ParseRelayKeysRequest(testvec.MustHex(t, want["request"])); err != nil || q.Relay != "a" {
		t.Fatalf("golden request: %+v %v", q, err)
	}
	if r, err := ParseRelayKeysResponse(testvec.MustHex(t, want["response_refused"])); err != nil || r.Error == "" {
		t.Fatalf("golden refusal: %+v %v", r, err)
	}
}
