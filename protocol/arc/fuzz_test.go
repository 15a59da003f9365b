package arc

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
)

// fuzzFixture is one issuance and presentation, the seeds of every target,
// plus the published vectors' encodings.
type fuzzFixture struct {
	sk                               *PrivateKey
	key, pub, req, resp, cred, pres1 []byte
	pres3                            []byte // limit 3: two bit commitments
	vecReq, vecResp, vecPres         []byte
}

func newFuzzFixture(f *testing.F) *fuzzFixture {
	sk, err := GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	x := &fuzzFixture{sk: sk}
	secrets, req, _ := NewCredentialRequest(rand.Reader)
	resp, err := sk.Issue(rand.Reader, req)
	if err != nil {
		f.Fatal(err)
	}
	cred, err := secrets.Finalize(sk.Public(), req, resp)
	if err != nil {
		f.Fatal(err)
	}
	p1, _ := cred.Present(rand.Reader, []byte("ctx"), 0, 1)
	p3, _ := cred.Present(rand.Reader, []byte("ctx"), 2, 3)
	x.key, _ = sk.MarshalBinary()
	x.pub, _ = sk.Public().MarshalBinary()
	x.req, _ = req.MarshalBinary()
	x.resp, _ = resp.MarshalBinary()
	x.cred, _ = cred.MarshalBinary()
	x.pres1, _ = p1.MarshalBinary()
	x.pres3, _ = p3.MarshalBinary()
	if b, err := os.ReadFile("testdata/allVectors.json"); err == nil {
		var all map[string]map[string]map[string]string
		if json.Unmarshal(b, &all) == nil {
			v := all["ARCV1-P256"]
			h := func(s string) []byte { d, _ := hex.DecodeString(s); return d }
			rq, rs, p := v["CredentialRequest"], v["CredentialResponse"], v["Presentation1"]
			x.vecReq = h(rq["m1_enc"] + rq["m2_enc"] + rq["proof"])
			x.vecResp = h(rs["U"] + rs["enc_U_prime"] + rs["X0_aux"] + rs["X1_aux"] + rs["X2_aux"] + rs["H_aux"] + rs["proof"])
			x.vecPres = h(p["U"] + p["U_prime_commit"] + p["m1_commit"] + p["tag"] + p["nonce_commit"] + p["proof"])
		}
	}
	return x
}

// addSeeds adds good, truncated, extended and bit-flipped variants of each
// seed.
func addSeeds(f *testing.F, seeds ...[]byte) {
	f.Add([]byte{})
	f.Add([]byte{2})
	for _, s := range seeds {
		if len(s) == 0 {
			continue
		}
		f.Add(s)
		f.Add(s[:len(s)-1])
		f.Add(append(append([]byte(nil), s...), 0))
		flip := append([]byte(nil), s...)
		flip[len(flip)/2] ^= 0x80
		f.Add(flip)
	}
}

// roundTrip checks that what parses re-encodes to the same bytes
// (encodings are canonical).
func roundTrip(t *testing.T, in []byte, m interface{ MarshalBinary() ([]byte, error) }) {
	out, err := m.MarshalBinary()
	if err != nil {
		t.Fatalf("parsed value does not re-encode: %v", err)
	}
	if !bytes.Equal(in, out) {
		t.Fatalf("re-encoding differs:\n in %x\nout %x", in, out)
	}
}

func FuzzParsePrivateKey(f *testing.F) {
	x := newFuzzFixture(f)
	addSeeds(f, x.key)
	f.Fuzz(func(t *testing.T, b []byte) {
		sk, err := ParsePrivateKey(b)
		if err != nil {
			return
		}
		roundTrip(t, b, sk)
	})
}

func FuzzParsePublicKey(f *testing.F) {
	x := newFuzzFixture(f)
	addSeeds(f, x.pub)
	f.Fuzz(func(t *testing.T, b []byte) {
		pk, err := ParsePublicKey(b)
		if err != nil {
			return
		}
		roundTrip(t, b, pk)
	})
}

func FuzzParseCredentialRequest(f *testing.F) {
	x := newFuzzFixture(f)
	addSeeds(f, x.req, x.vecReq)
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := ParseCredentialRequest(b)
		if err != nil {
			return
		}
		roundTrip(t, b, req)
		_, _ = x.sk.Issue(rand.Reader, req) // must not panic
	})
}

func FuzzParseCredentialResponse(f *testing.F) {
	x := newFuzzFixture(f)
	addSeeds(f, x.resp, x.vecResp)
	secrets, req, _ := NewCredentialRequest(rand.Reader)
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := ParseCredentialResponse(b)
		if err != nil {
			return
		}
		roundTrip(t, b, resp)
		if _, err := secrets.Finalize(x.sk.Public(), req, resp); err == nil && !bytes.Equal(b, x.resp) {
			t.Fatal("a response to another request finalized")
		}
	})
}

func FuzzParseCredential(f *testing.F) {
	x := newFuzzFixture(f)
	addSeeds(f, x.cred)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCredential(b)
		if err != nil {
			return
		}
		roundTrip(t, b, c)
	})
}

func FuzzParsePresentation(f *testing.F) {
	x := newFuzzFixture(f)
	addSeeds(f, x.pres1, x.pres3, x.vecPres)
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePresentation(b)
		if err != nil {
			return
		}
		roundTrip(t, b, p)
		_ = p.Tag()
		for _, limit := range []int{1, 2, 3} {
			err := x.sk.VerifyPresentation(p, []byte("ctx"), limit)
			honest := (limit == 1 && bytes.Equal(b, x.pres1)) || (limit == 3 && bytes.Equal(b, x.pres3))
			if (err == nil) != honest {
				t.Fatalf("limit %d: VerifyPresentation = %v for %x", limit, err, b)
			}
		}
	})
}
