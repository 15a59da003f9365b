package token

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/cloudflare/circl/group"
	"github.com/cloudflare/circl/oprf"
	"github.com/crowdlog/crowdlog/protocol"
)

type rfcVector struct {
	SkS            string `json:"skS"`
	PkS            string `json:"pkS"`
	TokenChallenge string `json:"token_challenge"`
	Nonce          string `json:"nonce"`
	Blind          string `json:"blind"`
	TokenRequest   string `json:"token_request"`
	TokenResponse  string `json:"token_response"`
	Token          string `json:"token"`
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRFC9578Vectors runs RFC 9578 Appendix A.1 (type 0x0001, VOPRF P-384)
// through the same code crowdlog runs over ristretto255: the public key,
// the TokenRequest from (nonce, challenge, blind), the issuer's evaluated
// element (its proof is randomized, so the RFC's proof is checked by
// Finalize instead of compared), the token from the RFC's TokenResponse,
// and verification of that token.
func TestRFC9578Vectors(t *testing.T) {
	b, err := os.ReadFile("testdata/rfc9578-voprf-p384.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Vectors []rfcVector }
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Vectors) != 5 {
		t.Fatalf("%d vectors, want RFC 9578's 5", len(file.Vectors))
	}
	s := suiteP384
	for i, v := range file.Vectors {
		sk := new(oprf.PrivateKey)
		if err := sk.UnmarshalBinary(s.oprf, unhex(t, v.SkS)); err != nil {
			t.Fatal(err)
		}
		key, err := newKey(s, KindRandomness, "rfc", sk)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(key.Public()); got != v.PkS {
			t.Errorf("vector %d: pkS %s, want %s", i+1, got, v.PkS)
		}
		digest := sha256.Sum256(unhex(t, v.TokenChallenge))
		var nonce [32]byte
		copy(nonce[:], unhex(t, v.Nonce))
		blind := group.P384.NewScalar()
		if err := blind.UnmarshalBinary(unhex(t, v.Blind)); err != nil {
			t.Fatal(err)
		}
		p, blinded, err := newRequestDigest(s, key.Public(), digest, [][32]byte{nonce}, []oprf.Blind{blind})
		if err != nil {
			t.Fatal(err)
		}
		// TokenRequest = u16 type ‖ truncated_token_key_id ‖ blinded_msg (RFC 9578 §5.1)
		keyID := sha256.Sum256(unhex(t, v.PkS))
		req := append([]byte{0x00, 0x01, keyID[31]}, blinded[0]...)
		if got := hex.EncodeToString(req); got != v.TokenRequest {
			t.Errorf("vector %d: token_request %s, want %s", i+1, got, v.TokenRequest)
		}
		resp := unhex(t, v.TokenResponse)
		evaluated, proof := resp[:s.ne], resp[s.ne:]
		ours, ourProof, err := key.Issue(blinded)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours[0], evaluated) {
			t.Errorf("vector %d: evaluate_msg %x, want %x", i+1, ours[0], evaluated)
		}
		toks, err := p.Finalize([][]byte{evaluated}, proof)
		if err != nil {
			t.Fatalf("vector %d: finalize with the RFC's response: %v", i+1, err)
		}
		enc, err := toks[0].MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(enc); got != v.Token {
			t.Errorf("vector %d: token %s, want %s", i+1, got, v.Token)
		}
		if err := key.verify(toks[0], digest); err != nil {
			t.Errorf("vector %d: RFC token does not verify: %v", i+1, err)
		}
		parsed, err := ParseToken(unhex(t, v.Token))
		if err != nil {
			t.Fatalf("vector %d: parse RFC token: %v", i+1, err)
		}
		if err := key.verify(parsed, digest); err != nil {
			t.Errorf("vector %d: parsed RFC token does not verify: %v", i+1, err)
		}
		// our own (randomized) proof must verify too
		p2, _, err := newRequestDigest(s, key.Public(), digest, [][32]byte{nonce}, []oprf.Blind{blind})
		if err != nil {
			t.Fatal(err)
		}
		toks2, err := p2.Finalize(ours, ourProof)
		if err != nil {
			t.Fatalf("vector %d: finalize with our proof: %v", i+1, err)
		}
		if enc2, _ := toks2[0].MarshalBinary(); !bytes.Equal(enc2, enc) {
			t.Errorf("vector %d: our issuance gives another token", i+1)
		}
	}
}

// TestTokenChallenge builds the RFC 9577 §2.1 TokenChallenge by hand.
func TestTokenChallenge(t *testing.T) {
	ctx := sha256.Sum256([]byte("\x012026-11-24"))
	want := []byte{0xC1, 0xD0, 0x00, 15}
	want = append(want, "crowdlog-issuer"...)
	want = append(want, 32)
	want = append(want, ctx[:]...)
	want = append(want, 0x00, 10)
	want = append(want, "randomness"...)
	if got := TokenChallenge(TypeRistretto, KindRandomness, "2026-11-24"); !bytes.Equal(got, want) {
		t.Fatalf("TokenChallenge = %x, want %x", got, want)
	}
	if ChallengeDigest(TypeRistretto, KindRandomness, "2026-11-24") != sha256.Sum256(want) {
		t.Fatal("ChallengeDigest is not SHA-256 of the TokenChallenge")
	}
	if ChallengeDigest(TypeRistretto, KindReport, "2026-11-24") == sha256.Sum256(want) {
		t.Fatal("report and randomness challenges coincide")
	}
}

func randomNonces(t testing.TB, n int) [][32]byte {
	out := make([][32]byte, n)
	for i := range out {
		if _, err := rand.Read(out[i][:]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func issueTokens(t testing.TB, key *PrivateKey, kind Kind, epoch string, nonces [][32]byte) []*Token {
	t.Helper()
	p, blinded, err := NewRequest(key.Public(), kind, epoch, nonces)
	if err != nil {
		t.Fatal(err)
	}
	ev, proof, err := key.Issue(blinded)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := p.Finalize(ev, proof)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

func TestRoundTrip(t *testing.T) {
	key, err := GenerateKey(KindRandomness, "e1")
	if err != nil {
		t.Fatal(err)
	}
	if len(key.Public()) != 32 || key.KeyID() != sha256.Sum256(key.Public()) {
		t.Fatalf("public key of %d bytes / key id not SHA-256 of it", len(key.Public()))
	}
	nonces := randomNonces(t, 7)
	toks := issueTokens(t, key, KindRandomness, "e1", nonces)
	if len(toks) != 7 {
		t.Fatalf("%d tokens, want 7", len(toks))
	}
	seen := map[[32]byte]bool{}
	for i, tok := range toks {
		if tok.Nonce != nonces[i] || tok.Type != TypeRistretto || tok.KeyID != key.KeyID() {
			t.Fatalf("token %d: fields do not match the request", i)
		}
		if err := key.Verify(tok); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
		enc, err := tok.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if len(enc) != 2+32+32+32+64 {
			t.Fatalf("token of %d bytes, want 162", len(enc))
		}
		if tok.SpendID() != sha256.Sum256(enc) {
			t.Fatal("SpendID is not SHA-256 of the encoding")
		}
		seen[tok.SpendID()] = true
		back, err := ParseToken(enc)
		if err != nil {
			t.Fatal(err)
		}
		if err := key.Verify(back); err != nil {
			t.Fatalf("parsed token %d: %v", i, err)
		}
	}
	if len(seen) != 7 {
		t.Fatal("tokens share spend ids")
	}
	// a key survives marshal/parse and verifies the same tokens
	kb, err := key.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	key2, err := ParsePrivateKey(kb)
	if err != nil {
		t.Fatal(err)
	}
	if key2.Kind() != KindRandomness || key2.Epoch() != "e1" || key2.KeyID() != key.KeyID() {
		t.Fatal("parsed key differs")
	}
	if err := key2.Verify(toks[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := toks[0].MarshalBinary(); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyRejects(t *testing.T) {
	rnd, _ := GenerateKey(KindRandomness, "e1")
	rep, _ := GenerateKey(KindReport, "e1")
	rnd2, _ := GenerateKey(KindRandomness, "e2")
	tok := issueTokens(t, rnd, KindRandomness, "e1", randomNonces(t, 1))[0]
	if err := rep.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("randomness token under the report key: %v", err)
	}
	if err := rnd2.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("epoch e1 token under the e2 key: %v", err)
	}
	// a token of the right key but for another kind's challenge (client lied in the request)
	lie := issueTokens(t, rnd, KindReport, "e1", randomNonces(t, 1))[0]
	if err := rnd.Verify(lie); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("token with the report challenge under the randomness key: %v", err)
	}
	alter := []func(*Token){
		func(x *Token) { x.Nonce[0] ^= 1 },
		func(x *Token) { x.ChallengeDigest[5] ^= 1 },
		func(x *Token) { x.KeyID[31] ^= 1 },
		func(x *Token) { x.Authenticator[63] ^= 1 },
		func(x *Token) { x.Type = TypeP384 },
		func(x *Token) { x.Authenticator = x.Authenticator[:32] },
	}
	for i, f := range alter {
		c := *tok
		c.Authenticator = append([]byte(nil), tok.Authenticator...)
		f(&c)
		if err := rnd.Verify(&c); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("alteration %d accepted: %v", i, err)
		}
	}
	if err := rnd.Verify(nil); !errors.Is(err, ErrInvalidToken) {
		t.Error("nil token accepted")
	}
}

func TestFinalizeRejects(t *testing.T) {
	key, _ := GenerateKey(KindReport, "e1")
	other, _ := GenerateKey(KindReport, "e1")
	p, blinded, err := NewRequest(key.Public(), KindReport, "e1", randomNonces(t, 3))
	if err != nil {
		t.Fatal(err)
	}
	ev, proof, _ := other.Issue(blinded) // the issuer uses a key the client did not pin
	if _, err := p.Finalize(ev, proof); !errors.Is(err, ErrProof) {
		t.Fatalf("finalize under another key: %v, want ErrProof", err)
	}
	ev, proof, _ = key.Issue(blinded)
	if _, err := p.Finalize(ev[:2], proof); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("short answer: %v", err)
	}
	swapped := [][]byte{ev[1], ev[0], ev[2]}
	if _, err := p.Finalize(swapped, proof); !errors.Is(err, ErrProof) {
		t.Fatalf("swapped answer: %v, want ErrProof", err)
	}
	if _, err := p.Finalize(ev, proof); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Finalize(ev, proof); err == nil {
		t.Fatal("second finalize accepted")
	}
}

func TestIssueRejects(t *testing.T) {
	key, _ := GenerateKey(KindRandomness, "e1")
	id, _ := group.Ristretto255.Identity().MarshalBinaryCompress()
	cases := [][][]byte{nil, {id}, {make([]byte, 31)}, {bytes.Repeat([]byte{0xff}, 32)}}
	for i, c := range cases {
		if _, _, err := key.Issue(c); err == nil {
			t.Errorf("case %d: issued", i)
		}
	}
	if _, _, err := NewRequest(key.Public(), KindRandomness, "e1", nil); err == nil {
		t.Error("empty request")
	}
	if _, _, err := NewRequest(key.Public()[:31], KindRandomness, "e1", randomNonces(t, 1)); err == nil {
		t.Error("short public key")
	}
	if _, _, err := NewRequest(key.Public(), Kind(9), "e1", randomNonces(t, 1)); err == nil {
		t.Error("unknown kind")
	}
	if _, err := GenerateKey(Kind(0), "e1"); err == nil {
		t.Error("key of unknown kind")
	}
}

func TestReportNonce(t *testing.T) {
	report := []byte("some report bytes")
	want := sha256.Sum256(append([]byte("crowdlog-v1 report token"), report...))
	if ReportNonce(report) != want {
		t.Fatal("ReportNonce differs from SHA-256(label ‖ report)")
	}
}

func TestParseTokenRejects(t *testing.T) {
	key, _ := GenerateKey(KindRandomness, "e1")
	enc, _ := issueTokens(t, key, KindRandomness, "e1", randomNonces(t, 1))[0].MarshalBinary()
	bad := [][]byte{nil, enc[:1], enc[:161], append(append([]byte(nil), enc...), 0), append([]byte{0x00, 0x02}, enc[2:]...)}
	for i, b := range bad {
		if _, err := ParseToken(b); !errors.Is(err, protocol.ErrMalformed) {
			t.Errorf("case %d: %v", i, err)
		}
	}
	kb, _ := key.MarshalBinary()
	for _, b := range [][]byte{kb[:len(kb)-1], append(append([]byte(nil), kb...), 1), kb[1:]} {
		if _, err := ParsePrivateKey(b); !errors.Is(err, protocol.ErrMalformed) {
			t.Errorf("bad key: %v", err)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	key, _ := GenerateKey(KindRandomness, "e")
	p, blinded, _ := NewRequest(key.Public(), KindRandomness, "e", [][32]byte{{1}})
	ev, proof, _ := key.Issue(blinded)
	toks, _ := p.Finalize(ev, proof)
	enc, _ := toks[0].MarshalBinary()
	f.Add(enc)
	f.Add(enc[:40])
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := ParseToken(b)
		if err != nil {
			if !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		out, err := tok.MarshalBinary()
		if err != nil || !bytes.Equal(out, b) {
			t.Fatalf("parsed token does not re-encode: %v", err)
		}
		if err := key.Verify(tok); err == nil && !bytes.Equal(b, enc) {
			t.Fatal("a fuzzed token verified")
		}
	})
}

func FuzzParsePrivateKey(f *testing.F) {
	key, _ := GenerateKey(KindReport, "e")
	kb, _ := key.MarshalBinary()
	f.Add(kb)
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParsePrivateKey(b)
		if err != nil {
			if !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		out, err := k.MarshalBinary()
		if err != nil || !bytes.Equal(out, b) {
			t.Fatalf("parsed key does not re-encode: %v", err)
		}
	})
}

// FuzzIssue feeds arbitrary blinded elements to the issuer: errors, never
// panics.
func FuzzIssue(f *testing.F) {
	key, _ := GenerateKey(KindReport, "e")
	_, blinded, _ := NewRequest(key.Public(), KindReport, "e", [][32]byte{{1}})
	f.Add(blinded[0])
	f.Fuzz(func(t *testing.T, b []byte) {
		key.Issue([][]byte{b})
	})
}

// FuzzParsePrio3Epoch: any epoch string an issue request names either
// parses into a campaign and day that format back to it, or is refused.
func FuzzParsePrio3Epoch(f *testing.F) {
	f.Add(Prio3Epoch("kw-prio3", 13210))
	f.Add("a/b/1")
	f.Add("/1")
	f.Add("c/01")
	f.Fuzz(func(t *testing.T, s string) {
		c, d, ok := ParsePrio3Epoch(s)
		if ok && Prio3Epoch(c, d) != s {
			t.Fatalf("%q parsed as %q, %d", s, c, d)
		}
	})
}

// TestPrio3HelperToken: a helper token issued under the key derived for one
// campaign-day verifies under that key only, and DeriveKey is a function of
// (kind, epoch, seed).
func TestPrio3HelperToken(t *testing.T) {
	seed := make([]byte, SeedSize)
	seed[0] = 1
	epoch := Prio3Epoch("c", 7)
	k, err := DeriveKey(KindPrio3Helper, epoch, seed)
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := DeriveKey(KindPrio3Helper, epoch, seed)
	other, _ := DeriveKey(KindPrio3Helper, Prio3Epoch("c", 8), seed)
	if k.KeyID() != k2.KeyID() || k.KeyID() == other.KeyID() {
		t.Fatal("derived keys: not a function of the epoch")
	}
	nonce := Prio3Nonce("c", 7, [16]byte{1}, []byte("public"), []byte("sealed"))
	if nonce == Prio3Nonce("c", 7, [16]byte{2}, []byte("public"), []byte("sealed")) ||
		nonce == Prio3Nonce("c", 7, [16]byte{1}, []byte("public"), []byte("sealeD")) {
		t.Fatal("nonce does not bind the report id and sealed share")
	}
	p, blinded, err := NewRequest(k.Public(), KindPrio3Helper, epoch, [][32]byte{nonce})
	if err != nil {
		t.Fatal(err)
	}
	ev, proof, err := k.Issue(blinded)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := p.Finalize(ev, proof)
	if err != nil {
		t.Fatal(err)
	}
	if err := k2.Verify(toks[0]); err != nil {
		t.Fatal(err)
	}
	if err := other.Verify(toks[0]); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("another day's key: %v", err)
	}
	if _, err := DeriveKey(KindPrio3Helper, epoch, seed[:16]); err == nil {
		t.Fatal("short seed accepted")
	}
}
