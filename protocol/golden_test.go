package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/cloudflare/circl/oprf"
)

// Golden test vectors (issue 3 item 6): protocol/testdata/golden-*.json hold
// every message type's encoding for fixed inputs, so a future client in any
// language can be checked against them. `go test ./protocol -run TestGolden
// -update` rewrites them; by default the test recomputes every value and
// compares. Values are hex unless the name ends in "_text" or "_json".

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

// goldenSealing is the fixed artifact of the vectors: ω = SHA-512 of a
// label (any 64 bytes), app "query", epoch "2006-03", FT_u, k = 3.
func goldenSealing(t *testing.T) (Sealing, []byte, UserSecret) {
	omega := fixedBytes("omega", 64)
	s, err := DeriveSealing(omega, "query", "2006-03", FTu, 3)
	if err != nil {
		t.Fatal(err)
	}
	var u UserSecret
	copy(u[:], fixedBytes("user", 32))
	return s, omega, u
}

// TestGoldenSealing: what ω determines — tag, commitment, AEAD key — and
// what the user secret adds — FT_u share x, unit id — plus OPRF input,
// hash-mode ω and the Kafka tag bucket.
func TestGoldenSealing(t *testing.T) {
	s, omega, u := goldenSealing(t)
	x := s.ShareX(&u)
	share := s.poly.Eval(x)
	unit := s.UnitID(&u)
	golden(t, "sealing", map[string]string{
		"app_text": "query", "epoch_text": "2006-03", "policy": "02", "k": "0003",
		"omega":                           hex.EncodeToString(omega),
		"user_secret":                     hex.EncodeToString(u[:]),
		"tag":                             hex.EncodeToString(s.Tag[:]),
		"commitment":                      hex.EncodeToString(s.Commitment()),
		"commitment_hash":                 func() string { h := CommitmentHash(s.Commitment()); return hex.EncodeToString(h[:]) }(),
		"secret_f0":                       scalarHex(s.poly.Secret()),
		"aead_key":                        hex.EncodeToString(s.key[:]),
		"share_x":                         scalarHex(share.X),
		"share_y":                         scalarHex(share.Y),
		"unit_id":                         hex.EncodeToString(unit[:]),
		"tag_bucket":                      hex.EncodeToString(TagBucket(s.Tag)),
		"oprf_input":                      hex.EncodeToString(OPRFInput("query", "2006-03", "new york weather")),
		"local_omega_of_new_york_weather": hex.EncodeToString(LocalOmega("query", "2006-03", "new york weather")),
	})
}

// TestGoldenPayloadAndReport: the AEAD plaintext and a whole report with a
// fixed id and nonce; the golden bytes decode back to the same fields and
// open under the golden key.
func TestGoldenPayloadAndReport(t *testing.T) {
	s, _, u := goldenSealing(t)
	p := Payload{Primary: "new york weather", Secondary: "New York  Weather", Unit: s.UnitID(&u)}
	pb, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "payload", map[string]string{"primary_text": p.Primary, "secondary_text": p.Secondary,
		"unit": hex.EncodeToString(p.Unit[:]), "encoded": hex.EncodeToString(pb)})

	r, err := s.seal(fixedReader("report"), &u, s.ShareX(&u), p.Primary, p.Secondary)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "report", map[string]string{"id": hex.EncodeToString(r.ID[:]),
		"ciphertext": hex.EncodeToString(r.Ciphertext), "encoded": hex.EncodeToString(rb)})
	if *update {
		return
	}
	want := loadGolden(t, "report")
	back, err := ParseReport(mustHex(t, want["encoded"]))
	if err != nil {
		t.Fatalf("golden report does not parse: %v", err)
	}
	pl, err := OpenPayload(s.key, back)
	if err != nil || pl != p {
		t.Fatalf("golden report opens to %+v, %v; want %+v", pl, err, p)
	}
}

// goldenKeys are the route's fixed key pairs: RFC 9180 DeriveKeyPair of a
// fixed ikm per hop, key ids 1, 2, 3.
func goldenKeys(t *testing.T) []*KeyPair {
	var out []*KeyPair
	for i, name := range []string{"relay-a", "relay-b", "aggregator"} {
		pk, sk := kemScheme.DeriveKeyPair(fixedBytes("ikm "+name, 32))
		out = append(out, &KeyPair{ID: byte(i + 1), Public: pk, Private: sk})
	}
	return out
}

// TestGoldenOnion: the three layers of one report with fixed ephemeral
// keys (HPKE Setup reads its ikmE from the given reader), and each golden
// layer peels to the golden next layer with the right hop.
func TestGoldenOnion(t *testing.T) {
	keys := goldenKeys(t)
	inner := fixedBytes("inner report", 300)
	l3, err := sealLayer(fixedReader("enc aggregator"), keys[2].PublicKey(), Hop{Kind: HopDeliver}, inner)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := sealLayer(fixedReader("enc relay-b"), keys[1].PublicKey(), Hop{Kind: HopKafka, Key: []byte{0xab, 0xcd}}, l3)
	if err != nil {
		t.Fatal(err)
	}
	l1, err := sealLayer(fixedReader("enc relay-a"), keys[0].PublicKey(), Hop{Kind: HopRelay, Subject: "crowdlog.relay.b"}, l2)
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
	golden(t, "onion", got)
	if *update {
		return
	}
	want := loadGolden(t, "onion")
	layer := mustHex(t, want["layer_relay_a"])
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

// TestGoldenRandomness: request, response, public key messages and
// refusals. The DLEQ proof is randomized (circl draws its nonce), so the
// golden file keeps one proof and the test checks that it verifies and that
// every other byte is reproduced.
func TestGoldenRandomness(t *testing.T) {
	sk, err := DeriveOPRFKey(fixedBytes("oprf seed", 32), "2006-03")
	if err != nil {
		t.Fatal(err)
	}
	pkb, _ := sk.Public().MarshalBinary()
	pub, err := ParseOPRFPublicKey(pkb)
	if err != nil {
		t.Fatal(err)
	}
	inputs := [][]byte{OPRFInput("query", "2006-03", "new york weather"), OPRFInput("query", "2006-03", "google")}
	blinds := make([]oprf.Blind, len(inputs))
	for i := range blinds {
		blinds[i] = G.HashToScalar(fixedBytes(fmt.Sprint("blind", i), 32), []byte("golden blind"))
	}
	fin, ereq, err := oprf.NewVerifiableClient(OPRFSuite, pub).DeterministicBlind(inputs, blinds)
	if err != nil {
		t.Fatal(err)
	}
	q := &RandomnessRequest{Epoch: "2006-03"}
	for _, e := range ereq.Elements {
		b, _ := e.MarshalBinaryCompress()
		q.Elements = append(q.Elements, b)
	}
	qb, _ := q.MarshalBinary()
	resp, err := Evaluate(sk, q)
	if err != nil {
		t.Fatal(err)
	}
	if old := loadGolden(t, "randomness"); old["proof"] != "" && !*update {
		resp.Proof = mustHex(t, old["proof"]) // the golden proof; must verify below
	}
	rb, _ := resp.MarshalBinary()
	omegas, err := Finalize(&Blinded{pub: pub, fin: fin}, resp)
	if err != nil {
		t.Fatalf("golden proof does not verify: %v", err)
	}
	refusal, _ := (&RandomnessResponse{Refusal: Refusal{Error: "epoch 1999-01 is in the future"}}).MarshalBinary()
	closed, _ := (&RandomnessResponse{Refusal: Refusal{Closed: true, Error: "epoch 2006-02 closed"}}).MarshalBinary()
	expired, _ := (&RandomnessResponse{Refusal: Refusal{Expired: true, Error: "epoch 20060301T000000Z-24h expired"}}).MarshalBinary()
	future, _ := (&RandomnessResponse{Refusal: Refusal{Future: true, Error: "epoch 20060301T000000Z-24h has not started"}}).MarshalBinary()
	pkq, _ := (&PublicKeyRequest{Epoch: "2006-03"}).MarshalBinary()
	pkr, _ := (&PublicKeyResponse{Epoch: "2006-03", Key: pkb}).MarshalBinary()
	pkClosed, _ := (&PublicKeyResponse{Refusal: Refusal{Closed: true, Error: "epoch 2006-02 closed"}}).MarshalBinary()
	pkExpired, _ := (&PublicKeyResponse{Refusal: Refusal{Expired: true, Error: "epoch 20060301T000000Z-24h expired"}}).MarshalBinary()
	golden(t, "randomness", map[string]string{
		"public_key": hex.EncodeToString(pkb), "blind0": scalarHex(blinds[0]), "blind1": scalarHex(blinds[1]),
		"request": hex.EncodeToString(qb), "proof": hex.EncodeToString(resp.Proof), "response": hex.EncodeToString(rb),
		"omega0": hex.EncodeToString(omegas[0]), "omega1": hex.EncodeToString(omegas[1]),
		"response_refused": hex.EncodeToString(refusal), "response_closed": hex.EncodeToString(closed),
		"pubkey_request": hex.EncodeToString(pkq), "pubkey_response": hex.EncodeToString(pkr),
		"pubkey_response_closed": hex.EncodeToString(pkClosed),
		"response_expired":       hex.EncodeToString(expired), "response_future": hex.EncodeToString(future),
		"pubkey_response_expired": hex.EncodeToString(pkExpired),
	})
	if *update {
		return
	}
	want := loadGolden(t, "randomness")
	for _, name := range []string{"request", "response", "response_refused", "response_closed", "response_expired", "response_future"} {
		var err error
		switch name {
		case "request":
			_, err = ParseRandomnessRequest(mustHex(t, want[name]))
		default:
			_, err = ParseRandomnessResponse(mustHex(t, want[name]))
		}
		if err != nil {
			t.Errorf("golden %s does not parse: %v", name, err)
		}
	}
	if p, err := ParsePublicKeyResponse(mustHex(t, want["pubkey_response"])); err != nil || !bytes.Equal(p.Key, pkb) {
		t.Errorf("golden public key response: %v", err)
	}
	if p, err := ParseRandomnessResponse(mustHex(t, want["response_expired"])); err != nil || !p.Expired {
		t.Errorf("golden expired response: %+v %v", p, err)
	}
	if p, err := ParsePublicKeyResponse(mustHex(t, want["pubkey_response_expired"])); err != nil || !p.Expired {
		t.Errorf("golden expired public key response: %+v %v", p, err)
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
	golden(t, "relaykeys", map[string]string{"relay_text": "a", "public_key": hex.EncodeToString(pub),
		"request": hex.EncodeToString(qb), "response": hex.EncodeToString(pb), "response_refused": hex.EncodeToString(refused)})
	if *update {
		return
	}
	want := loadGolden(t, "relaykeys")
	back, err := ParseRelayKeysResponse(mustHex(t, want["response"]))
	if err != nil || back.Relay != "a" || !bytes.Equal(back.IDs(), []byte{1, 2}) {
		t.Fatalf("golden announcement parses to %+v, %v", back, err)
	}
	for _, id := range []byte{1, 2} {
		if k, ok := back.Lookup(id); !ok || !bytes.Equal(k, pub) {
			t.Fatalf("golden announcement: key id %d", id)
		}
	}
	if q, err := ParseRelayKeysRequest(mustHex(t, want["request"])); err != nil || q.Relay != "a" {
		t.Fatalf("golden request: %+v %v", q, err)
	}
	if r, err := ParseRelayKeysResponse(mustHex(t, want["response_refused"])); err != nil || r.Error == "" {
		t.Fatalf("golden refusal: %+v %v", r, err)
	}
}

// TestGoldenDecrypted: the JSON messages of the decrypted topic and the
// epoch-close control message, as written by the aggregator.
func TestGoldenDecrypted(t *testing.T) {
	item := Decrypted{Kind: KindItem, App: "query", Epoch: "2006-03", Policy: "ft-u", K: 5,
		Tag: hex.EncodeToString(fixedBytes("tag", 32)), Report: hex.EncodeToString(fixedBytes("id", 16)),
		Unit: hex.EncodeToString(fixedBytes("unit", 16)), Item: "new york weather", Variant: "New York  Weather"}
	sum := Decrypted{Kind: KindSummary, App: "query", Epoch: "2006-03", Policy: "ft-u", K: 5,
		Summary: []SummaryRow{{Reports: 8, Shares: 4, Tags: 1}, {Reports: 1, Shares: 1, Tags: 812}}, Partition: 3, Partitions: 8}
	closed := Decrypted{Kind: KindClosed, App: "query", Epoch: "2006-03", Partition: 3, Partitions: 8}
	got := map[string]string{}
	for name, d := range map[string]Decrypted{"item_json": item, "summary_json": sum, "closed_json": closed} {
		b, _ := json.Marshal(&d)
		got[name] = string(b)
		if !*update {
			back, err := ParseDecrypted(b)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if b2, _ := json.Marshal(back); !bytes.Equal(b, b2) {
				t.Errorf("%s does not round-trip", name)
			}
		}
	}
	b, _ := json.Marshal(EpochClose{App: "query", Epoch: "2006-03", Partitions: 8})
	got["epoch_close_json"] = string(b)
	golden(t, "decrypted", got)
}
