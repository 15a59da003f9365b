package arc

import (
	"bytes"
	"crypto/rand"
	"crypto/sha3"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/big"
	"os"
	"strings"
	"testing"
)

// testDRNG is TestDRNG of draft-irtf-cfrg-sigma-protocols (poc
// test_drng.sage at 1d243b4): SHAKE128 with the 168-byte first block
// "sigma-proofs/TestDRNG/SHAKE128" ‖ zeros, then the 32-byte seed; its
// output stream is read in order. random_scalar() = OS2IP(48 bytes) mod p
// (sigma nonces); ScalarField.random(rng) = randint(0, p−1) =
// OS2IP(48 bytes) mod (p−1) (ARC secrets).
type testDRNG struct{ r io.Reader }

func newTestDRNG(seed []byte) *testDRNG {
	h := sha3.NewSHAKE128()
	block := make([]byte, 168)
	copy(block, "sigma-proofs/TestDRNG/SHAKE128")
	h.Write(block)
	h.Write(seed)
	return &testDRNG{h}
}

func (t *testDRNG) read48() *big.Int {
	var b [48]byte
	if _, err := io.ReadFull(t.r, b[:]); err != nil {
		panic(err)
	}
	return new(big.Int).SetBytes(b[:])
}

func (t *testDRNG) secret() (scalar, error) {
	pm1 := new(big.Int).Sub(orderN, big.NewInt(1))
	v := t.read48()
	return scalarWide(v.Mod(v, pm1).Bytes()), nil
}

func (t *testDRNG) nonce() (scalar, error) {
	return scalarWide(t.read48().Bytes()), nil
}

type vectorSet map[string]map[string]string

func loadVectors(t *testing.T) vectorSet {
	t.Helper()
	b, err := os.ReadFile("testdata/allVectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]vectorSet
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatal(err)
	}
	v, ok := all["ARCV1-P256"]
	if !ok {
		t.Fatal("no ARCV1-P256 vectors in testdata/allVectors.json")
	}
	return v
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// check compares got (bytes) against the hex vector field.
func check(t *testing.T, v vectorSet, group, field string, got []byte) {
	t.Helper()
	want := unhex(t, v[group][field])
	if !bytes.Equal(got, want) {
		t.Errorf("%s.%s:\n got %x\nwant %x", group, field, got, want)
	}
}

func enc(e element) []byte { return mustEncode(e) }

// TestVectors replays the draft's deterministic run (poc/test_arc.sage:
// keygen, request with "test request context", issue, finalize, two
// presentations with limit 2 in "test presentation context") with the
// TestDRNG and compares every published field: draft-ietf-privacypass-arc-crypto
// editor's copy at ietf-wg-privacypass/draft-arc@3268903 (testdata/README.md).
func TestVectors(t *testing.T) {
	v := loadVectors(t)
	rng := newTestDRNG(append([]byte("test vector seed"), make([]byte, 16)...))

	sk, err := generateKey(rng)
	if err != nil {
		t.Fatal(err)
	}
	check(t, v, "ServerKey", "x0", encodeScalar(sk.x0))
	check(t, v, "ServerKey", "x1", encodeScalar(sk.x1))
	check(t, v, "ServerKey", "x2", encodeScalar(sk.x2))
	check(t, v, "ServerKey", "xb", encodeScalar(sk.xb))
	check(t, v, "ServerKey", "X0", enc(sk.pub.X0))
	check(t, v, "ServerKey", "X1", enc(sk.pub.X1))
	check(t, v, "ServerKey", "X2", enc(sk.pub.X2))

	reqCtx := unhex(t, v["CredentialRequest"]["request_context"])
	secrets, req, err := newCredentialRequest(rng, reqCtx)
	if err != nil {
		t.Fatal(err)
	}
	check(t, v, "CredentialRequest", "m1", encodeScalar(secrets.m1))
	check(t, v, "CredentialRequest", "m2", encodeScalar(secrets.m2))
	check(t, v, "CredentialRequest", "r1", encodeScalar(secrets.r1))
	check(t, v, "CredentialRequest", "r2", encodeScalar(secrets.r2))
	check(t, v, "CredentialRequest", "m1_enc", enc(req.M1Enc))
	check(t, v, "CredentialRequest", "m2_enc", enc(req.M2Enc))
	check(t, v, "CredentialRequest", "proof", req.Proof)

	resp, err := sk.issue(rng, req)
	if err != nil {
		t.Fatal(err)
	}
	check(t, v, "CredentialResponse", "U", enc(resp.U))
	check(t, v, "CredentialResponse", "enc_U_prime", enc(resp.EncUPrime))
	check(t, v, "CredentialResponse", "X0_aux", enc(resp.X0Aux))
	check(t, v, "CredentialResponse", "X1_aux", enc(resp.X1Aux))
	check(t, v, "CredentialResponse", "X2_aux", enc(resp.X2Aux))
	check(t, v, "CredentialResponse", "H_aux", enc(resp.HAux))
	check(t, v, "CredentialResponse", "proof", resp.Proof)

	cred, err := secrets.Finalize(sk.Public(), req, resp)
	if err != nil {
		t.Fatal(err)
	}
	check(t, v, "Credential", "m1", encodeScalar(cred.m1))
	check(t, v, "Credential", "U", enc(cred.U))
	check(t, v, "Credential", "U_prime", enc(cred.UPrime))
	check(t, v, "Credential", "X1", enc(cred.X1))

	for i, name := range []string{"Presentation1", "Presentation2"} {
		pctx := unhex(t, v[name]["presentation_context"])
		p, err := cred.present(rng, pctx, i, 2)
		if err != nil {
			t.Fatal(err)
		}
		if want := "0x" + strings.TrimPrefix(v[name]["nonce"], "0x"); want != "0x"+big.NewInt(int64(i)).Text(16) {
			t.Fatalf("%s: vector nonce %s, replayed %d", name, want, i)
		}
		check(t, v, name, "U", enc(p.U))
		check(t, v, name, "U_prime_commit", enc(p.UPrimeCommit))
		check(t, v, name, "m1_commit", enc(p.M1Commit))
		check(t, v, name, "nonce_commit", enc(p.NonceCommit))
		check(t, v, name, "tag", p.Tag())
		check(t, v, name, "D_0", enc(p.D[0]))
		full, err := p.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		check(t, v, name, "proof", full[5*ElementSize:])
		if err := sk.VerifyPresentationWithContext(p, reqCtx, pctx, 2); err != nil {
			t.Errorf("%s does not verify: %v", name, err)
		}
	}
}

// TestVectorsVerify parses the draft's published encodings (not ones this
// package produced) and checks them: the request proof under Issue, the
// response proof under Finalize, and both presentations under the
// published key, request context and limit 2.
func TestVectorsVerify(t *testing.T) {
	v := loadVectors(t)
	key := v["ServerKey"]
	sk, err := ParsePrivateKey(unhex(t, key["x0"]+key["x1"]+key["x2"]+key["xb"]))
	if err != nil {
		t.Fatal(err)
	}
	pk, err := ParsePublicKey(unhex(t, key["X0"]+key["X1"]+key["X2"]))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mustEncode(pk.X0), mustEncode(sk.pub.X0); !bytes.Equal(a, b) {
		t.Fatalf("published X0 %x is not x0·G + xb·H = %x", a, b)
	}
	rq := v["CredentialRequest"]
	req, err := ParseCredentialRequest(unhex(t, rq["m1_enc"]+rq["m2_enc"]+rq["proof"]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sk.Issue(rand.Reader, req); err != nil {
		t.Errorf("published request refused: %v", err)
	}
	rs := v["CredentialResponse"]
	resp, err := ParseCredentialResponse(unhex(t, rs["U"]+rs["enc_U_prime"]+rs["X0_aux"]+rs["X1_aux"]+rs["X2_aux"]+rs["H_aux"]+rs["proof"]))
	if err != nil {
		t.Fatal(err)
	}
	var sc [4]scalar
	for i, f := range []string{"m1", "m2", "r1", "r2"} {
		if sc[i], err = decodeScalar(unhex(t, rq[f]), f); err != nil {
			t.Fatal(err)
		}
	}
	secrets := &ClientSecrets{m1: sc[0], m2: sc[1], r1: sc[2], r2: sc[3]}
	cred, err := secrets.Finalize(pk, req, resp)
	if err != nil {
		t.Fatalf("published response refused: %v", err)
	}
	check(t, v, "Credential", "U_prime", enc(cred.UPrime))
	reqCtx := unhex(t, rq["request_context"])
	for _, name := range []string{"Presentation1", "Presentation2"} {
		f := v[name]
		p, err := ParsePresentation(unhex(t, f["U"]+f["U_prime_commit"]+f["m1_commit"]+f["tag"]+f["nonce_commit"]+f["proof"]))
		if err != nil {
			t.Fatal(err)
		}
		pctx := unhex(t, f["presentation_context"])
		if err := sk.VerifyPresentationWithContext(p, reqCtx, pctx, 2); err != nil {
			t.Errorf("published %s refused: %v", name, err)
		}
		if err := sk.VerifyPresentationWithContext(p, reqCtx, pctx, 3); err == nil {
			t.Errorf("published %s accepted with limit 3", name)
		}
		if err := sk.VerifyPresentationWithContext(p, reqCtx, append(pctx, '!'), 2); err == nil {
			t.Errorf("published %s accepted in another context", name)
		}
	}
}
