package protocol_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/cloudflare/circl/group"
	circloprf "github.com/cloudflare/circl/oprf"
	"golang.org/x/crypto/chacha20poly1305"

	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// The Privacy Pass and ARC vectors of docs/wire.md: issuer
// keys, TokenChallenge, tokens, the issuer's messages, the randomness
// request's tokens section, the report trailer and ARC for FT_u. As for
// the other vectors, each is cut by hand, decoded and re-encoded with the
// package's code, and re-derived from the documented inputs with
// independent primitives: crypto/sha256, crypto/ed25519, circl's group
// (ristretto255 for the tokens and the share x, P-256 for ARC) and circl's
// oprf for the token authenticators.

// u64 reads 8 bytes big-endian.
func (c *cut) u64() uint64 { return binary.BigEndian.Uint64(c.n(8)) }

// str16 reads u16 len ‖ bytes.
func (c *cut) str16() []byte { return c.n(c.u16()) }

const (
	tokType    = 0xC1D0
	docIssuer  = "crowdlog-issuer"
	docTSms    = 1141214400000 // 2006-03-01T12:00:00Z
	budgetText = "over budget: epoch 2006-03 allows 10 randomness tokens per identity, 10 already issued"
	spentText  = "randomness token already spent: 1 of 2 tokens for epoch 2006-03 were spent by another request"
)

// tokenKeyFile is the documented key file encoding.
func tokenKeyFile(kind byte, sk group.Scalar) []byte {
	b := append([]byte("crowdlog-token-key"), 2, 0xc1, 0xd0, kind, byte(len(docEpoch)))
	return append(append(b, docEpoch...), enc(sk)...)
}

// tokenChallenge is the documented TokenChallenge of kind (1 randomness,
// 2 report) in the document's epoch.
func tokenChallenge(kind byte, origin string) []byte {
	rc := sha256.Sum256(append([]byte{kind}, docEpoch...))
	b := binary.BigEndian.AppendUint16(nil, tokType)
	b = append(binary.BigEndian.AppendUint16(b, uint16(len(docIssuer))), docIssuer...)
	b = append(append(b, 32), rc[:]...)
	return append(binary.BigEndian.AppendUint16(b, uint16(len(origin))), origin...)
}

// fullEvaluate is RFC 9497 Evaluate (the token authenticator of input)
// with circl's oprf directly under the scalar sk.
func fullEvaluate(w *wire, sk group.Scalar, input []byte) []byte {
	k := new(circloprf.PrivateKey)
	if err := k.UnmarshalBinary(circloprf.SuiteRistretto255, enc(sk)); err != nil {
		w.t.Fatal(err)
	}
	out, err := circloprf.NewVerifiableServer(circloprf.SuiteRistretto255, k).FullEvaluate(input)
	if err != nil {
		w.t.Fatal(err)
	}
	return out
}

// docTokenKeys derives the two documented token keys and parses them with
// the package.
func docTokenKeys(w *wire) (rsk, psk group.Scalar, rk, pk *token.PrivateKey) {
	t := w.t
	rsk = deriveKeyPair(w.get("token-randomness-key-seed"), "PrivacyPass")
	psk = deriveKeyPair(w.get("token-report-key-seed"), "PrivacyPass")
	var err error
	if rk, err = token.ParsePrivateKey(tokenKeyFile(1, rsk)); err != nil {
		t.Fatalf("token.ParsePrivateKey of the documented randomness key: %v", err)
	}
	if pk, err = token.ParsePrivateKey(tokenKeyFile(2, psk)); err != nil {
		t.Fatalf("token.ParsePrivateKey of the documented report key: %v", err)
	}
	return rsk, psk, rk, pk
}

func checkTokens(w *wire) {
	t := w.t
	rsk, psk, rk, pk := docTokenKeys(w)
	w.eq("token-randomness-private-key", tokenKeyFile(1, rsk), "\"crowdlog-token-key\" ‖ 02 ‖ C1D0 ‖ 01 ‖ str8(epoch) ‖ DeriveKeyPair(seed, \"PrivacyPass\")")
	w.eq("token-randomness-private-key", enc(rk), "token.PrivateKey re-encoding")
	if rk.Kind() != token.KindRandomness || rk.Epoch() != docEpoch || rk.Type() != tokType {
		t.Errorf("token-randomness-private-key parses to kind %v, epoch %q, type %x", rk.Kind(), rk.Epoch(), rk.Type())
	}
	pub := encE(g.NewElement().MulGen(rsk))
	w.eq("token-randomness-public-key", pub, "skI·G")
	w.eq("token-randomness-public-key", rk.Public(), "token.PrivateKey.Public")
	kid := sha256.Sum256(pub)
	w.eq("token-randomness-key-id", kid[:], "SHA-256(pkI)")
	if k := rk.KeyID(); !bytes.Equal(k[:], kid[:]) {
		t.Error("token.PrivateKey.KeyID differs from SHA-256(pkI)")
	}
	ppub := encE(g.NewElement().MulGen(psk))
	w.eq("token-report-public-key", ppub, "skI·G of the report seed")
	w.eq("token-report-public-key", pk.Public(), "token.PrivateKey.Public")

	// challenges
	ch := tokenChallenge(1, "randomness")
	w.eq("token-challenge-randomness", ch, "u16 type ‖ str16(issuer) ‖ str8(SHA-256(01 ‖ epoch)) ‖ str16(\"randomness\")")
	w.eq("token-challenge-randomness", token.TokenChallenge(tokType, token.KindRandomness, docEpoch), "token.TokenChallenge")
	dg := sha256.Sum256(ch)
	w.eq("token-challenge-digest-randomness", dg[:], "SHA-256(TokenChallenge)")
	if d := token.ChallengeDigest(tokType, token.KindRandomness, docEpoch); !bytes.Equal(d[:], dg[:]) {
		t.Error("token.ChallengeDigest differs from SHA-256 of the documented challenge")
	}
	dgr := sha256.Sum256(tokenChallenge(2, "report"))
	w.eq("token-challenge-digest-report", dgr[:], "SHA-256(TokenChallenge of kind report)")

	// the two randomness tokens
	var inputs, blinded, toks [][]byte
	var blinds []group.Scalar
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("token-randomness-%d", i)
		nonce := w.get(fmt.Sprintf("token-nonce-%d", i))
		c := w.cut(name)
		if c.u16() != tokType || !bytes.Equal(c.n(32), nonce) || !bytes.Equal(c.n(32), dg[:]) || !bytes.Equal(c.n(32), kid[:]) {
			t.Errorf("%s: not type C1D0, token-nonce-%d, the randomness challenge digest, the key id", name, i)
		}
		auth := c.n(64)
		c.done()
		tb := w.get(name)
		in := tb[:98]
		if want := fullEvaluate(w, rsk, in); !bytes.Equal(auth, want) {
			t.Errorf("%s: authenticator is not RFC 9497 Evaluate(skI, input) (circl oprf)", name)
		}
		r := scalar(t, w.get(fmt.Sprintf("token-blind-%d", i)))
		bl := g.NewElement().Mul(hashToGroup(in), r)
		if fin := finalizeOPRF(in, r, g.NewElement().Mul(bl, rsk)); !bytes.Equal(fin, auth) {
			t.Errorf("%s: authenticator is not Finalize of the unblinded evaluation", name)
		}
		inputs, blinded, blinds, toks = append(inputs, in), append(blinded, encE(bl)), append(blinds, r), append(toks, tb)
		tk, err := token.ParseToken(tb)
		if err != nil || tk.Type != tokType || !bytes.Equal(tk.Nonce[:], nonce) || tk.ChallengeDigest != dg || tk.KeyID != kid || !bytes.Equal(tk.Authenticator, auth) {
			t.Fatalf("%s parses to %+v, %v", name, tk, err)
		}
		w.eq(name, enc(tk), "re-encoding")
		if err := rk.Verify(tk); err != nil {
			t.Errorf("%s does not verify under the documented randomness key: %v", name, err)
		}
		if err := pk.Verify(tk); !errors.Is(err, token.ErrInvalidToken) {
			t.Errorf("%s verifies under the report key: %v", name, err)
		}
		bad := *tk
		bad.Nonce[0] ^= 1
		if err := rk.Verify(&bad); !errors.Is(err, token.ErrInvalidToken) {
			t.Errorf("%s with another nonce verifies: %v", name, err)
		}
	}
	id0 := sha256.Sum256(toks[0])
	w.eq("token-spend-id-0", id0[:], "SHA-256(token)")
	if tk, _ := token.ParseToken(toks[0]); tk != nil && tk.SpendID() != id0 {
		t.Error("token.SpendID differs from SHA-256 of the encoding")
	}

	// the identity and its signed request
	priv := ed25519.NewKeyFromSeed(w.get("issuer-identity-seed"))
	ipub := priv.Public().(ed25519.PublicKey)
	w.eq("issuer-identity-public", ipub, "Ed25519 public key of the seed")
	c := w.cut("issue-request-randomness")
	if c.u8() != 2 || c.u8() != 1 || c.str8() != docEpoch || c.u64() != docTSms || !bytes.Equal(c.n(32), ipub) || c.u16() != 2 {
		t.Error("issue-request-randomness: not version 2, kind 1, 2006-03, 2006-03-01T12:00:00Z, the identity, 2 elements")
	}
	for i := range blinded {
		if !bytes.Equal([]byte(c.str8()), blinded[i]) {
			t.Errorf("issue-request-randomness: element %d is not r_%d·HashToGroup(input_%d)", i, i, i)
		}
	}
	sig := c.n(64)
	c.done()
	req := w.get("issue-request-randomness")
	signed := append([]byte("crowdlog-v1 issue request\x00"), req[:len(req)-64]...)
	w.eq("issue-request-randomness-signed-bytes", signed, "\"crowdlog-v1 issue request\" 00 ‖ body")
	if !ed25519.Verify(ipub, w.get("issue-request-randomness-signed-bytes"), sig) {
		t.Error("issue-request-randomness: the signature does not verify over the documented signed bytes (crypto/ed25519)")
	}
	if !bytes.Equal(ed25519.Sign(priv, signed), sig) {
		t.Error("issue-request-randomness: the signature is not Ed25519(identity, signed bytes)")
	}
	q, err := token.ParseIssueRequest(req)
	if err != nil || q.Kind != token.KindRandomness || q.Epoch != docEpoch || q.Timestamp.UnixMilli() != docTSms || !bytes.Equal(q.Identity, ipub) || len(q.Blinded) != 2 {
		t.Fatalf("issue-request-randomness parses to %+v, %v", q, err)
	}
	if err := q.VerifySignature(); err != nil {
		t.Errorf("issue-request-randomness: %v", err)
	}
	// what a retry keeps: kind ‖ str8(epoch) ‖ u16 n ‖ the elements, not
	// the timestamp, identity or signature
	content := append([]byte("crowdlog-v1 issue content\x00"), req[1:10]...)
	content = append(content, req[50:len(req)-64]...)
	cid := sha256.Sum256(content)
	w.eq("issue-request-randomness-content-id", cid[:], `SHA-256("crowdlog-v1 issue content" 00 ‖ kind ‖ str8(epoch) ‖ u16 n ‖ n × str8(B_i))`)
	if q.ContentID() != cid {
		t.Error("token.IssueRequest.ContentID differs from the documented hash")
	}
	w.eq("issue-request-randomness", enc(q), "re-encoding")
	q.Kind = token.KindReport
	if err := q.VerifySignature(); !errors.Is(err, token.ErrBadSignature) {
		t.Errorf("the request's signature verifies for kind report: %v", err)
	}

	// the issuer's answer: Z_i = skI·B_i, one proof, the tokens finalize
	c = w.cut("issue-response-randomness")
	if c.u8() != 2 || c.u8() != 0 || c.u8() != 1 || c.u32() != 2 || c.u32() != 10 || c.u16() != 2 {
		t.Error("issue-response-randomness: not version 2, ok, kind 1, used 2, limit 10, 2 elements")
	}
	var zs [][]byte
	for i := range blinded {
		z := []byte(c.str8())
		if want := encE(g.NewElement().Mul(element(t, blinded[i]), rsk)); !bytes.Equal(z, want) {
			t.Errorf("issue-response-randomness: element %d is not skI·B_%d", i, i)
		}
		zs = append(zs, z)
		if fin := finalizeOPRF(inputs[i], blinds[i], element(t, z)); !bytes.Equal(fin, toks[i][98:]) {
			t.Errorf("Finalize of issue-response-randomness element %d is not token-randomness-%d's authenticator", i, i)
		}
	}
	proof := []byte(c.str8())
	c.done()
	if len(proof) != 64 || !verifyDLEQ(t, pub, blinded, zs, proof) {
		t.Error("issue-response-randomness: the batch DLEQ proof does not verify under pkI (RFC 9497 §2.2.2, recomputed here)")
	}
	resp, err := token.ParseIssueResponse(w.get("issue-response-randomness"))
	if err != nil || resp.Refused() || resp.Kind != token.KindRandomness || resp.Used != 2 || resp.Limit != 10 || len(resp.Evaluated) != 2 || !bytes.Equal(resp.Proof, proof) {
		t.Fatalf("issue-response-randomness parses to %+v, %v", resp, err)
	}
	w.eq("issue-response-randomness", enc(resp), "re-encoding")
	if ev, pr, err := rk.Issue(blinded); err != nil || !bytes.Equal(ev[0], zs[0]) || !bytes.Equal(ev[1], zs[1]) || !verifyDLEQ(t, pub, blinded, ev, pr) {
		t.Errorf("token.PrivateKey.Issue of the documented blinded elements differs: %v", err)
	}

	c = w.cut("issue-response-refused-budget")
	if c.u8() != 2 || c.u8() != 1 || string(c.str16()) != budgetText {
		t.Error("issue-response-refused-budget: not version 2, status 1, the documented message")
	}
	c.done()
	if got := token.BudgetError(docEpoch, token.KindRandomness, 10, 10).Error(); got != budgetText {
		t.Errorf("token.BudgetError says %q", got)
	}
	br, err := token.ParseIssueResponse(w.get("issue-response-refused-budget"))
	if err != nil || !errors.Is(br.Err(), token.ErrBudget) {
		t.Errorf("issue-response-refused-budget parses to %+v, %v", br, err)
	} else {
		w.eq("issue-response-refused-budget", enc(br), "re-encoding")
	}

	// keys
	c = w.cut("issuer-keys-request")
	if c.u8() != 2 || c.str8() != docEpoch {
		t.Error("issuer-keys-request: not version 2, 2006-03")
	}
	c.done()
	kq, err := token.ParseKeysRequest(w.get("issuer-keys-request"))
	if err != nil || kq.Epoch != docEpoch {
		t.Errorf("issuer-keys-request parses to %+v, %v", kq, err)
	} else {
		w.eq("issuer-keys-request", enc(kq), "re-encoding")
	}
	apub := w.get("arc-public-key")
	c = w.cut("issuer-keys-response")
	if c.u8() != 2 || c.u8() != 0 || c.str8() != docEpoch || !bytes.Equal([]byte(c.str8()), pub) || !bytes.Equal([]byte(c.str8()), ppub) || !bytes.Equal(c.str16(), apub) {
		t.Error("issuer-keys-response: not version 2, ok, 2006-03, the randomness key, the report key, the ARC key")
	}
	c.done()
	kr, err := token.ParseKeysResponse(w.get("issuer-keys-response"))
	if err != nil || kr.Refused() || kr.Epoch != docEpoch || !bytes.Equal(kr.Randomness, pub) || !bytes.Equal(kr.Report, ppub) || !bytes.Equal(kr.ARC, apub) {
		t.Errorf("issuer-keys-response parses to %+v, %v", kr, err)
	} else {
		w.eq("issuer-keys-response", enc(kr), "re-encoding")
	}
}

func checkRandomnessTokens(w *wire) {
	t := w.t
	plain := w.get("oprf-randomness-request")
	all := w.get("oprf-randomness-request-tokens")
	if !bytes.HasPrefix(all, plain) {
		t.Fatal("oprf-randomness-request-tokens does not start with oprf-randomness-request")
	}
	c := &cut{t: t, name: "oprf-randomness-request-tokens", b: all[len(plain):]}
	if c.u16() != 2 || !bytes.Equal(c.str16(), w.get("token-randomness-0")) || !bytes.Equal(c.str16(), w.get("token-randomness-1")) {
		t.Error("oprf-randomness-request-tokens: the section is not u16 2 ‖ str16(token-randomness-0) ‖ str16(token-randomness-1)")
	}
	c.done()
	q, err := oprf.ParseRandomnessRequest(all)
	if err != nil || q.Epoch != docEpoch || len(q.Elements) != 2 || len(q.Tokens) != 2 || !bytes.Equal(q.Tokens[1], w.get("token-randomness-1")) {
		t.Fatalf("oprf-randomness-request-tokens parses to %+v, %v", q, err)
	}
	w.eq("oprf-randomness-request-tokens", enc(q), "re-encoding")
	empty := append(append([]byte{}, plain...), 0, 0)
	if _, err := oprf.ParseRandomnessRequest(empty); err == nil {
		t.Error("a randomness request with an empty tokens section parses")
	}
	el := plain[len(plain)-64 : len(plain)-32]
	h := sha256.New()
	h.Write([]byte("crowdlog-v1 randomness spend"))
	h.Write([]byte{byte(len(docEpoch))})
	h.Write([]byte(docEpoch))
	h.Write(el)
	w.eq("oprf-spend-binding-0", h.Sum(nil), "SHA-256(\"crowdlog-v1 randomness spend\" ‖ str8(epoch) ‖ B_0)")
	b := oprf.SpendBinding(docEpoch, q.Elements[0])
	w.eq("oprf-spend-binding-0", b[:], "oprf.SpendBinding")

	c = w.cut("oprf-randomness-response-spent")
	if c.u8() != 2 || c.u8() != 1 || string(c.str16()) != spentText {
		t.Error("oprf-randomness-response-spent: not version 2, status 1, the documented message")
	}
	c.done()
	r, err := oprf.ParseRandomnessResponse(w.get("oprf-randomness-response-spent"))
	if err != nil || !r.Refused() || !errors.Is(oprf.TokenRefusal(r.Refusal), oprf.ErrTokenSpent) || !strings.HasPrefix(spentText, oprf.ErrTokenSpent.Error()) {
		t.Errorf("oprf-randomness-response-spent parses to %+v, %v (not oprf.ErrTokenSpent)", r, err)
	} else {
		w.eq("oprf-randomness-response-spent", enc(r), "re-encoding")
	}
}

// ARC over P-256 (draft-ietf-privacypass-arc-crypto, ARCV1-P256), with
// circl's group directly.
var p256 = group.P256

func p256Scalar(b []byte) group.Scalar {
	return p256.NewScalar().SetBigInt(new(big.Int).SetBytes(b))
}

func p256Element(w *wire, b []byte) group.Element {
	e := p256.NewElement()
	if err := e.UnmarshalBinary(b); err != nil {
		w.t.Fatalf("P-256 element %x: %v", b, err)
	}
	return e
}

func p256Enc(e group.Element) []byte {
	b, err := e.MarshalBinaryCompress()
	if err != nil {
		panic(err)
	}
	return b
}

func p256Lin(terms ...any) group.Element { // s0, E0, s1, E1, …: Σ s_i·E_i
	acc := p256.Identity()
	for i := 0; i < len(terms); i += 2 {
		acc = p256.NewElement().Add(acc, p256.NewElement().Mul(terms[i+1].(group.Element), terms[i].(group.Scalar)))
	}
	return acc
}

func checkARC(w *wire) {
	t := w.t
	gen := p256.Generator()
	genH := p256.HashToElement(p256Enc(gen), []byte("HashToGroup-ARCV1-P256generatorH"))
	skb := w.get("arc-private-key")
	if len(skb) != 128 {
		t.Fatalf("arc-private-key: %d bytes, want 4 × 32", len(skb))
	}
	x0, x1, x2, xb := p256Scalar(skb[:32]), p256Scalar(skb[32:64]), p256Scalar(skb[64:96]), p256Scalar(skb[96:])
	X0, X1, X2 := p256Lin(x0, gen, xb, genH), p256Lin(x1, genH), p256Lin(x2, genH)
	w.eq("arc-public-key", append(append(p256Enc(X0), p256Enc(X1)...), p256Enc(X2)...), "X0 = x0·G + x0Blinding·H ‖ X1 = x1·H ‖ X2 = x2·H")
	ask, err := arc.ParsePrivateKey(skb)
	if err != nil {
		t.Fatalf("arc-private-key: %v", err)
	}
	w.eq("arc-private-key", enc(ask), "re-encoding")
	w.eq("arc-public-key", enc(ask.Public()), "arc.PrivateKey.Public")
	if pp, err := arc.ParsePublicKey(w.get("arc-public-key")); err != nil || !bytes.Equal(enc(pp), w.get("arc-public-key")) {
		t.Errorf("arc-public-key: %v", err)
	}

	// the request
	cs := w.get("arc-client-secrets")
	m1, r1, r2 := p256Scalar(cs[:32]), p256Scalar(cs[32:64]), p256Scalar(cs[64:])
	m2 := p256.HashToScalar([]byte("crowdlog-v1 arc request"), []byte("HashToScalar-ARCV1-P256requestContext"))
	c := w.cut("arc-credential-request")
	if !bytes.Equal(c.n(33), p256Enc(p256Lin(m1, gen, r1, genH))) || !bytes.Equal(c.n(33), p256Enc(p256Lin(m2, gen, r2, genH))) {
		t.Error("arc-credential-request: m1Enc or m2Enc is not m·G + r·H of arc-client-secrets")
	}
	c.n(5 * 32)
	c.done()
	creq, err := arc.ParseCredentialRequest(w.get("arc-credential-request"))
	if err != nil {
		t.Fatalf("arc-credential-request: %v", err)
	}
	w.eq("arc-credential-request", enc(creq), "re-encoding")
	if _, err := ask.Issue(strings.NewReader(strings.Repeat("x", 1024)), creq); err != nil {
		t.Errorf("arc-credential-request: the issuer refuses it (its proof): %v", err)
	}
	// inside the signed IssueRequest of kind 3
	priv := ed25519.NewKeyFromSeed(w.get("issuer-identity-seed"))
	ipub := priv.Public().(ed25519.PublicKey)
	c = w.cut("issue-request-arc")
	if c.u8() != 2 || c.u8() != 3 || c.str8() != docEpoch || c.u64() != docTSms+1000 || !bytes.Equal(c.n(32), ipub) || !bytes.Equal(c.str16(), w.get("arc-credential-request")) {
		t.Error("issue-request-arc: not version 2, kind 3, 2006-03, 2006-03-01T12:00:01Z, the identity, arc-credential-request")
	}
	sig := c.n(64)
	c.done()
	qb := w.get("issue-request-arc")
	if !ed25519.Verify(ipub, append([]byte("crowdlog-v1 issue request\x00"), qb[:len(qb)-64]...), sig) {
		t.Error("issue-request-arc: the signature does not verify over \"crowdlog-v1 issue request\" 00 ‖ body (crypto/ed25519)")
	}
	q, err := token.ParseIssueRequest(qb)
	if err != nil || q.Kind != token.KindARC || q.VerifySignature() != nil || !bytes.Equal(q.ARC, w.get("arc-credential-request")) {
		t.Fatalf("issue-request-arc parses to %+v, %v", q, err)
	}
	w.eq("issue-request-arc", enc(q), "re-encoding")

	// the response, recomputed from the key and the client's secrets
	c = w.cut("issue-response-arc")
	if c.u8() != 2 || c.u8() != 0 || c.u8() != 3 || c.u32() != 1 || c.u32() != 1 || c.u16() != 454 {
		t.Error("issue-response-arc: not version 2, ok, kind 3, used 1, limit 1, 454 bytes")
	}
	var e [6]group.Element
	var eb [6][]byte
	for i := range e {
		eb[i] = c.n(33)
		e[i] = p256Element(w, eb[i])
	}
	c.n(8 * 32)
	c.done()
	U, encU, X0a, X1a, X2a, Ha := e[0], e[1], e[2], e[3], e[4], e[5]
	if !X0a.IsEqual(p256Lin(xb, Ha)) || !X1a.IsEqual(p256Lin(x1, Ha)) || !X2a.IsEqual(p256Lin(x2, Ha)) {
		t.Error("issue-response-arc: X0Aux, X1Aux, X2Aux are not b·x0Blinding·H, b·X1, b·X2 for HAux = b·H")
	}
	// b·(X0 + x1·m1Enc + x2·m2Enc) with b·G = U and b·H = HAux
	mx := p256.NewScalar().Add(p256.NewScalar().Add(x0, p256.NewScalar().Mul(x1, m1)), p256.NewScalar().Mul(x2, m2))
	hx := p256.NewScalar().Add(p256.NewScalar().Add(xb, p256.NewScalar().Mul(x1, r1)), p256.NewScalar().Mul(x2, r2))
	if !encU.IsEqual(p256Lin(mx, U, hx, Ha)) {
		t.Error("issue-response-arc: encUPrime is not b·(X0 + x1·m1Enc + x2·m2Enc)")
	}
	cresp, err := token.ParseIssueResponse(w.get("issue-response-arc"))
	if err != nil || cresp.Kind != token.KindARC || cresp.Used != 1 || cresp.Limit != 1 {
		t.Fatalf("issue-response-arc parses to %+v, %v", cresp, err)
	}
	w.eq("issue-response-arc", enc(cresp), "re-encoding")
	ar, err := arc.ParseCredentialResponse(cresp.ARC)
	if err != nil || !bytes.Equal(enc(ar), cresp.ARC) {
		t.Errorf("the credential response of issue-response-arc: %v", err)
	}

	// the credential: m1 ‖ U ‖ U' ‖ X1
	up := p256Lin(mx, U)
	minus := func(a, b group.Element) group.Element { return p256.NewElement().Add(a, p256.NewElement().Neg(b)) }
	unb := minus(minus(minus(encU, X0a), p256Lin(r1, X1a)), p256Lin(r2, X2a))
	if !up.IsEqual(unb) {
		t.Error("encUPrime − X0Aux − r1·X1Aux − r2·X2Aux is not (x0 + x1·m1 + x2·m2)·U")
	}
	w.eq("arc-credential", append(append(append(append([]byte{}, cs[:32]...), eb[0]...), p256Enc(up)...), p256Enc(X1)...), "m1 ‖ U ‖ U' ‖ X1")
	cred, err := arc.ParseCredential(w.get("arc-credential"))
	if err != nil {
		t.Fatalf("arc-credential: %v", err)
	}
	w.eq("arc-credential", enc(cred), "re-encoding")
	// the package's client, holding the documented secrets, accepts the
	// documented response (its proof) and finalizes the same credential:
	// arc draws each secret as 48 bytes reduced mod p, so 16 zero bytes ‖
	// the 32-byte scalar draws exactly that scalar (then random prover nonces)
	var stream []byte
	for i := 0; i < 3; i++ {
		stream = append(append(stream, make([]byte, 16)...), cs[32*i:32*i+32]...)
	}
	stream = append(stream, bytes.Repeat([]byte{0x5a}, 4096)...)
	secrets, req2, err := arc.NewCredentialRequest(bytes.NewReader(stream))
	if err != nil || !bytes.Equal(enc(req2)[:66], w.get("arc-credential-request")[:66]) {
		t.Fatalf("arc.NewCredentialRequest from the documented secrets gives other commitments: %v", err)
	}
	if fc, err := secrets.Finalize(ask.Public(), creq, ar); err != nil || !bytes.Equal(enc(fc), w.get("arc-credential")) {
		t.Errorf("arc Finalize of issue-response-arc (its proof against arc-public-key and the request): %v", err)
	}

	// the presentation for the sealing's context
	tag := w.get("star-tag")
	ctx := append(append([]byte("crowdlog-v1 arc"), starCtx(docApp, docEpoch, 2, 3)...), tag...)
	w.eq("arc-presentation-context", ctx, "\"crowdlog-v1 arc\" ‖ ctx ‖ tag")
	if s, err := star.DeriveSealing(w.get("star-omega"), docApp, docEpoch, star.FTu, 3); err != nil {
		t.Fatal(err)
	} else {
		w.eq("arc-presentation-context", s.ARCContext(), "star.Sealing.ARCContext")
	}
	pb := w.get("arc-presentation")
	if len(pb) != 357 || arc.PresentationSize(1) != 357 || arc.PresentationSize(2) != 357+129 {
		t.Errorf("arc-presentation: %d bytes; sizes for limits 1, 2: %d, %d (documented 357 + 129·k)", len(pb), arc.PresentationSize(1), arc.PresentationSize(2))
	}
	genT := p256.HashToElement(ctx, []byte("HashToGroup-ARCV1-P256Tag"))
	wantTag := p256Enc(p256Lin(p256.NewScalar().Inv(m1), genT)) // nonce 0
	c = w.cut("arc-presentation")
	c.n(3 * 33)
	atag := c.n(33)
	if !bytes.Equal(atag, wantTag) {
		t.Error("arc-presentation: tag is not m1⁻¹·HashToGroup(context, \"Tag\")")
	}
	c.n(33 + 6*32)
	c.done()
	p, err := arc.ParsePresentation(pb)
	if err != nil || len(p.D) != 0 || !bytes.Equal(p.Tag(), atag) {
		t.Fatalf("arc-presentation parses to %+v, %v", p, err)
	}
	w.eq("arc-presentation", enc(p), "re-encoding")
	if err := ask.VerifyPresentation(p, ctx, 1); err != nil {
		t.Errorf("arc-presentation does not verify under arc-private-key with limit 1: %v", err)
	}
	if err := ask.VerifyPresentation(p, append(append([]byte("crowdlog-v1 arc"), starCtx(docApp, docEpoch, 1, 3)...), tag...), 1); !errors.Is(err, arc.ErrInvalidPresentation) {
		t.Errorf("arc-presentation verifies for the FT_a context: %v", err)
	}
	x := g.HashToScalar(atag, []byte("crowdlog-v1 arc x"))
	w.eq("arc-share-x", enc(x), "ristretto255 HashToScalar(tag, \"crowdlog-v1 arc x\")")
	w.eq("arc-share-x", enc(star.ARCShareX(atag)), "star.ARCShareX")
	u := sha256.Sum256(append([]byte("crowdlog-v1 arc unit"), atag...))
	w.eq("arc-unit-id", u[:16], "SHA-256(\"crowdlog-v1 arc unit\" ‖ tag)[:16]")
	uu := star.ARCUnitID(atag)
	w.eq("arc-unit-id", uu[:], "star.ARCUnitID")
}

func checkReportTrailer(w *wire) {
	t := w.t
	const k = 3
	_, psk, _, pk := docTokenKeys(w)
	omega, tag := w.get("star-omega"), w.get("star-tag")
	ctx := starCtx(docApp, docEpoch, 2, k)
	seed := hkdf32(t, omega, "crowdlog-v2 poly"+string(ctx))
	var coeffs []group.Scalar
	for i := 0; i < k; i++ {
		coeffs = append(coeffs, g.HashToScalar(append(append([]byte{}, seed...), u16(i)...), []byte("crowdlog-v1 poly")))
	}
	x := scalar(t, w.get("arc-share-x"))
	y := g.NewScalar()
	for i := k - 1; i >= 0; i-- {
		y.Mul(y, x)
		y.Add(y, coeffs[i])
	}
	all := w.get("star-report-arc")
	c := w.cut("star-report-arc")
	if c.u8() != 2 || c.str8() != docApp || c.str8() != docEpoch || c.u8() != 2 || c.u16() != k {
		t.Error("star-report-arc: not version 2, query, 2006-03, FT_u, k = 3")
	}
	id := c.n(16)
	if !bytes.Equal(c.n(32), tag) || !bytes.Equal(c.n(32), enc(x)) || !bytes.Equal(c.n(32), enc(y)) {
		t.Error("star-report-arc: tag is not star-tag, or the share is not (arc-share-x, f(arc-share-x))")
	}
	if c.u16() != k || !bytes.Equal(c.n(32*k), w.get("star-commitment")) {
		t.Error("star-report-arc: commitment is not star-commitment")
	}
	ct := c.n(c.u32())
	unsigned := all[:len(all)-len(c.b)]
	tok := c.str16()
	pres := c.str16()
	c.done()
	// the payload opens under the sealing's key and carries the ARC unit id
	h := sha256.New()
	h.Write([]byte("crowdlog-v1 key"))
	h.Write(tag)
	h.Write(enc(coeffs[0]))
	a, err := chacha20poly1305.NewX(h.Sum(nil))
	if err != nil {
		t.Fatal(err)
	}
	ad := append(append(append([]byte("crowdlog-v2 report"), ctx...), id...), tag...)
	pt, err := a.Open(nil, ct[:24], ct[24:], ad)
	if err != nil {
		t.Fatalf("star-report-arc does not open under the sealing's key: %v", err)
	}
	pc := &cut{t: t, name: "star-report-arc payload", b: pt}
	if pc.u8() != 2 || string(pc.str16()) != "new york weather" || string(pc.str16()) != "New York  Weather" || !bytes.Equal(pc.n(16), w.get("arc-unit-id")) {
		t.Error("star-report-arc's payload is not version 2, the artifact, its original form, arc-unit-id")
	}
	pc.done()
	// the token: nonce = SHA-256(label ‖ unsigned), the report key, the report challenge
	nh := sha256.Sum256(append([]byte("crowdlog-v1 report token"), unsigned...))
	w.eq("report-token-nonce", nh[:], "SHA-256(\"crowdlog-v1 report token\" ‖ the report without its trailer)")
	if n := token.ReportNonce(unsigned); !bytes.Equal(n[:], nh[:]) {
		t.Error("token.ReportNonce differs")
	}
	pkid := sha256.Sum256(w.get("token-report-public-key"))
	dgr := sha256.Sum256(tokenChallenge(2, "report"))
	tc := &cut{t: t, name: "star-report-arc token", b: tok}
	if tc.u16() != tokType || !bytes.Equal(tc.n(32), nh[:]) || !bytes.Equal(tc.n(32), dgr[:]) || !bytes.Equal(tc.n(32), pkid[:]) {
		t.Error("star-report-arc's token is not type C1D0, report-token-nonce, the report challenge digest, the report key's id")
	}
	if auth := tc.n(64); !bytes.Equal(auth, fullEvaluate(w, psk, tok[:98])) {
		t.Error("star-report-arc's token authenticator is not RFC 9497 Evaluate under the report key (circl oprf)")
	}
	tc.done()
	w.eq("arc-presentation", pres, "the trailer's presentation")
	// the code reads the same
	r, err := star.ParseReport(all)
	if err != nil {
		t.Fatalf("star-report-arc does not parse: %v", err)
	}
	if !bytes.Equal(r.ID[:], id) || !r.Share.X.IsEqual(x) || !bytes.Equal(r.Token, tok) || !bytes.Equal(r.Presentation, pres) {
		t.Errorf("star-report-arc parses to other fields: %+v", r)
	}
	if ub, err := r.UnsignedBytes(); err != nil || !bytes.Equal(ub, unsigned) {
		t.Errorf("star.Report.UnsignedBytes is not the report up to its ciphertext: %v", err)
	}
	w.eq("star-report-arc", enc(r), "re-encoding")
	tk, err := token.ParseToken(r.Token)
	if err != nil || pk.Verify(tk) != nil {
		t.Errorf("star-report-arc's token does not verify under the report key: %v", err)
	}
	w.eq("arc-presentation-context", r.ARCContext(), "star.Report.ARCContext")
	ap, err := arc.ParsePresentation(r.Presentation)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckARCShare(ap.Tag()); err != nil {
		t.Errorf("star-report-arc: %v", err)
	}
	ask, err := arc.ParsePrivateKey(w.get("arc-private-key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ask.VerifyPresentation(ap, r.ARCContext(), 1); err != nil {
		t.Errorf("star-report-arc's presentation does not verify for the report's context: %v", err)
	}
}
