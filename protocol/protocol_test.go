package protocol

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/cloudflare/circl/oprf"
)

// evaluateOverWire encodes q, decodes it as the service would, evaluates it
// under key and returns the response after its own encode/decode round trip.
func evaluateOverWire(t testing.TB, key *oprf.PrivateKey, q *RandomnessRequest) *RandomnessResponse {
	t.Helper()
	b, _ := q.MarshalBinary()
	q2, err := ParseRandomnessRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := Evaluate(key, q2)
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := resp.MarshalBinary()
	resp2, err := ParseRandomnessResponse(rb)
	if err != nil {
		t.Fatal(err)
	}
	return resp2
}

func omegaFor(t testing.TB, key *oprf.PrivateKey, app, epoch, artifact string) []byte {
	t.Helper()
	fin, req, err := Blind(key.Public(), epoch, [][]byte{OPRFInput(app, epoch, artifact)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Finalize(fin, evaluateOverWire(t, key, req))
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

func TestSealRecoverOpen(t *testing.T) {
	key, _ := oprf.GenerateKey(OPRFSuite, rand.Reader)
	const k = 5
	for _, pol := range []Policy{FTa, FTu} {
		var reports []*Report
		for u := 0; u < k; u++ {
			user, _ := NewUserSecret()
			// every client evaluates the OPRF itself: blinding differs, ω must not
			s, err := DeriveSealing(omegaFor(t, key, "query", "e1", "weather"), "query", "e1", pol, k)
			if err != nil {
				t.Fatal(err)
			}
			for rep := 0; rep < 2; rep++ {
				r, err := s.Seal(&user, "weather", "Weather")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := r.MarshalBinary()
				r2, err := ParseReport(b)
				if err != nil {
					t.Fatal(err)
				}
				reports = append(reports, r2)
			}
		}
		// all reports share one tag
		for _, r := range reports {
			if r.Tag != reports[0].Tag {
				t.Fatalf("%v: tags differ across clients", pol)
			}
		}
		distinct := map[string]Share{}
		for _, r := range reports {
			x, _ := r.Share.X.MarshalBinary()
			distinct[string(x)] = r.Share
		}
		wantDistinct := k
		if pol == FTa {
			wantDistinct = 2 * k
		}
		if len(distinct) != wantDistinct {
			t.Fatalf("%v: %d distinct shares, want %d", pol, len(distinct), wantDistinct)
		}
		var shares []Share
		for _, s := range distinct {
			shares = append(shares, s)
		}
		if _, err := Recover(shares[:k-1], k); !errors.Is(err, ErrThreshold) {
			t.Fatalf("k-1 shares: err %v, want ErrThreshold", err)
		}
		sec, err := Recover(shares, k)
		if err != nil {
			t.Fatal(err)
		}
		aead := KeyFromSecret(reports[0].Tag, sec)
		for _, r := range reports {
			p, err := OpenPayload(aead, r)
			if err != nil {
				t.Fatalf("%v: open: %v", pol, err)
			}
			if p.Primary != "weather" || p.Secondary != "Weather" {
				t.Fatalf("payload %+v", p)
			}
		}
		// k-1 genuine shares plus a wrong one give a key that fails the AEAD
		bad := append([]Share{}, shares[:k-1]...)
		bad = append(bad, Share{X: G.RandomNonZeroScalar(rand.Reader), Y: G.RandomScalar(rand.Reader)})
		sec, _ = Recover(bad, k)
		if _, err := OpenPayload(KeyFromSecret(reports[0].Tag, sec), reports[0]); err == nil {
			t.Fatal("poisoned share opened the report")
		}
		// duplicate x is an error, not a panic
		if _, err := Recover([]Share{shares[0], shares[0], shares[1], shares[2], shares[3]}, k); err == nil {
			t.Fatal("duplicate shares accepted")
		}
	}
}

func TestDifferentArtifactsDifferentTags(t *testing.T) {
	key, _ := oprf.GenerateKey(OPRFSuite, rand.Reader)
	a, _ := DeriveSealing(omegaFor(t, key, "query", "e1", "a"), "query", "e1", FTu, 3)
	b, _ := DeriveSealing(omegaFor(t, key, "query", "e1", "b"), "query", "e1", FTu, 3)
	key2, _ := oprf.GenerateKey(OPRFSuite, rand.Reader)
	c, _ := DeriveSealing(omegaFor(t, key2, "query", "e2", "a"), "query", "e2", FTu, 3)
	if a.Tag == b.Tag || a.Tag == c.Tag {
		t.Fatal("tags collide across artifacts or epochs")
	}
}

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
	if _, _, err := Peel([]*KeyPair{ra2}, l1); !errors.Is(err, ErrMalformed) {
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
	if _, _, err := Peel([]*KeyPair{ra}, l1); !errors.Is(err, ErrMalformed) {
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

func BenchmarkSealReport(b *testing.B) {
	key, _ := oprf.GenerateKey(OPRFSuite, rand.Reader)
	s, _ := DeriveSealing(omegaFor(b, key, "query", "e", "weather"), "query", "e", FTu, 5)
	u, _ := NewUserSecret()
	for b.Loop() {
		if _, err := s.Seal(&u, "weather", "Weather"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRecoverK5(b *testing.B) {
	key, _ := oprf.GenerateKey(OPRFSuite, rand.Reader)
	s, _ := DeriveSealing(omegaFor(b, key, "query", "e", "weather"), "query", "e", FTa, 5)
	var shares []Share
	for i := 0; i < 5; i++ {
		shares = append(shares, s.poly.Eval(G.RandomNonZeroScalar(rand.Reader)))
	}
	for b.Loop() {
		Recover(shares, 5)
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
