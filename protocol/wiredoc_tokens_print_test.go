package protocol_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
	"testing"
	"time"

	"github.com/cloudflare/circl/group"
	"golang.org/x/crypto/chacha20poly1305"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// genScalar is a fixed ristretto255 scalar for the printed vectors (blinds,
// the DLEQ nonce).
func genScalar(label string) group.Scalar {
	return g.HashToScalar([]byte(label), []byte("crowdlog wire test scalar"))
}

// proveDLEQ is RFC 9497 §2.2.1 GenerateProof with a fixed r.
func proveDLEQ(k group.Scalar, pk []byte, cs, ds [][]byte, r group.Scalar) []byte {
	lp := func(b []byte) []byte { return append(u16(len(b)), b...) }
	h := sha512.New()
	h.Write(lp(pk))
	h.Write(lp([]byte("Seed-" + voprfContext)))
	seed := h.Sum(nil)
	m := g.Identity()
	for i := range cs {
		in := lp(seed)
		in = append(in, u16(i)...)
		in = append(in, lp(cs[i])...)
		in = append(in, lp(ds[i])...)
		in = append(in, "Composite"...)
		d := hashToScalar(in)
		e := g.NewElement()
		e.UnmarshalBinary(cs[i])
		m.Add(m, g.NewElement().Mul(e, d))
	}
	z := g.NewElement().Mul(m, k)
	t2 := g.NewElement().MulGen(r)
	t3 := g.NewElement().Mul(m, r)
	var in []byte
	for _, e := range [][]byte{pk, encE(m), encE(z), encE(t2), encE(t3)} {
		in = append(in, lp(e)...)
	}
	in = append(in, "Challenge"...)
	c := hashToScalar(in)
	s := g.NewScalar().Sub(r, g.NewScalar().Mul(c, k))
	return append(enc(c), enc(s)...)
}

// tokInput is token_authenticator_input: type ‖ nonce ‖ digest ‖ key id.
func tokInput(typ uint16, nonce, digest, keyID []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, typ)
	b = append(b, nonce...)
	b = append(b, digest...)
	return append(b, keyID...)
}

// printTokenVectors prints the issue-17 blocks of docs/wire.md (tokens,
// issuer messages, the randomness request's tokens, ARC, the report
// trailer) for -wiredoc.print: fixed seeds and streams, the fixed DLEQ
// nonce of proveDLEQ, and the packages' encoders. It checks nothing;
// checkTokens, checkRandomnessTokens, checkARC and checkReportTrailer do.
func printTokenVectors(t *testing.T) {
	V := field{[]byte{2}, "version 2"}
	E := docEpoch
	// token keys
	rseed := label32("token randomness key seed")
	pseed := label32("token report key seed")
	rsk := deriveKeyPair(rseed, "PrivacyPass")
	psk := deriveKeyPair(pseed, "PrivacyPass")
	keyEnc := func(kind byte, sk group.Scalar) []byte {
		b := append([]byte("crowdlog-token-key"), 2, 0xc1, 0xd0, kind, byte(len(E)))
		return append(append(b, E...), enc(sk)...)
	}
	rk, err := token.ParsePrivateKey(keyEnc(1, rsk))
	if err != nil {
		t.Fatal(err)
	}
	pk, err := token.ParsePrivateKey(keyEnc(2, psk))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("---- tokens")
	block("token-randomness-key-seed", field{rseed, "seed"})
	kb := keyEnc(1, rsk)
	block("token-randomness-private-key", field{kb[:18], `"crowdlog-token-key"`}, field{kb[18:19], "version 2"}, field{kb[19:21], "token type 0xC1D0"},
		field{kb[21:22], "kind 1 (randomness)"}, field{kb[22:23], "u8 len epoch"}, field{kb[23:30], `epoch "2006-03"`}, field{kb[30:], "skI (scalar, little-endian)"})
	block("token-randomness-public-key", field{rk.Public(), "pkI = skI·G"})
	kid := rk.KeyID()
	block("token-randomness-key-id", field{kid[:], "token_key_id = SHA-256(pkI)"})
	block("token-report-key-seed", field{pseed, "seed"})
	block("token-report-public-key", field{pk.Public(), "pkI of the report-token key"})
	ch := token.TokenChallenge(token.TypeRistretto, token.KindRandomness, E)
	rc := sha256.Sum256(append([]byte{1}, E...))
	_ = rc
	block("token-challenge-randomness", field{ch[:2], "token_type 0xC1D0"}, field{ch[2:4], "u16 len issuer_name"}, field{ch[4:19], `issuer_name "crowdlog-issuer"`},
		field{ch[19:20], "u8 len redemption_context = 32"}, field{ch[20:52], "redemption_context = SHA-256(01 ‖ \"2006-03\")"}, field{ch[52:54], "u16 len origin_info"}, field{ch[54:], `origin_info "randomness"`})
	dg := token.ChallengeDigest(token.TypeRistretto, token.KindRandomness, E)
	block("token-challenge-digest-randomness", field{dg[:], "challenge_digest = SHA-256(TokenChallenge)"})
	dgr := token.ChallengeDigest(token.TypeRistretto, token.KindReport, E)
	block("token-challenge-digest-report", field{dgr[:], "challenge_digest of kind report, epoch 2006-03"})

	// randomness tokens: two nonces, two blinds
	n0, n1 := label32("token nonce 0"), label32("token nonce 1")
	b0, b1 := genScalar("token blind 0"), genScalar("token blind 1")
	block("token-nonce-0", field{n0, "nonce of token 0"})
	block("token-nonce-1", field{n1, "nonce of token 1"})
	block("token-blind-0", field{enc(b0), "blind r_0 (scalar, little-endian)"})
	block("token-blind-1", field{enc(b1), "blind r_1"})
	var blinded, evald [][]byte
	var toks [][]byte
	for i, n := range [][]byte{n0, n1} {
		in := tokInput(token.TypeRistretto, n, dg[:], kid[:])
		r := []group.Scalar{b0, b1}[i]
		bl := g.NewElement().Mul(hashToGroup(in), r)
		z := g.NewElement().Mul(bl, rsk)
		blinded = append(blinded, encE(bl))
		evald = append(evald, encE(z))
		auth := finalizeOPRF(in, r, z)
		toks = append(toks, append(in, auth...))
	}
	proof := proveDLEQ(rsk, rk.Public(), blinded, evald, genScalar("token proof r"))
	if !verifyDLEQ(t, rk.Public(), blinded, evald, proof) {
		t.Fatal("proof")
	}
	for i, tb := range toks {
		tk, err := token.ParseToken(tb)
		if err != nil || rk.Verify(tk) != nil {
			t.Fatal("token", i, err)
		}
		block(fmt.Sprintf("token-randomness-%d", i), field{tb[:2], "token_type 0xC1D0"}, field{tb[2:34], fmt.Sprintf("nonce = token-nonce-%d", i)},
			field{tb[34:66], "challenge_digest"}, field{tb[66:98], "token_key_id"}, field{tb[98:], "authenticator (64 bytes)"})
	}
	id0 := sha256.Sum256(toks[0])
	block("token-spend-id-0", field{id0[:], "SHA-256(token-randomness-0)"})

	// identity and issue request
	iseed := label32("issuer identity seed")
	ipriv := ed25519.NewKeyFromSeed(iseed)
	block("issuer-identity-seed", field{iseed, "Ed25519 seed (RFC 8032 private key)"})
	block("issuer-identity-public", field{ipriv.Public().(ed25519.PublicKey), "Ed25519 public key (the identity)"})
	ts := time.Date(2006, 3, 1, 12, 0, 0, 0, time.UTC)
	q := &token.IssueRequest{Kind: token.KindRandomness, Epoch: E, Timestamp: ts, Blinded: blinded}
	if err := q.Sign(ipriv); err != nil {
		t.Fatal(err)
	}
	qb := enc(q)
	block("issue-request-randomness", V, field{qb[1:2], "kind 1 (randomness)"}, field{qb[2:3], "u8 len epoch"}, field{qb[3:10], `epoch "2006-03"`},
		field{qb[10:18], "u64 timestamp, Unix ms (2006-03-01T12:00:00Z)"}, field{qb[18:50], "identity (Ed25519 public key)"}, field{qb[50:52], "u16 count = 2"},
		field{qb[52:53], "u8 len = 32"}, field{qb[53:85], "blinded element 0"}, field{qb[85:86], "u8 len = 32"}, field{qb[86:118], "blinded element 1"},
		field{qb[118:], "Ed25519 signature"})
	block("issue-request-randomness-signed-bytes", field{[]byte("crowdlog-v1 issue request\x00"), `"crowdlog-v1 issue request" 00`}, field{qb[:118], "the request before its signature"})
	cid := q.ContentID()
	block("issue-request-randomness-content-id", field{cid[:], `SHA-256("crowdlog-v1 issue content" 00 ‖ 01 ‖ str8("2006-03") ‖ 0002 ‖ str8(B_0) ‖ str8(B_1))`})
	rs := enc(&token.IssueResponse{Kind: token.KindRandomness, Evaluated: evald, Proof: proof, Used: 2, Limit: 10})
	block("issue-response-randomness", V, field{rs[1:2], "status 0 (ok)"}, field{rs[2:3], "kind 1 (randomness)"}, field{rs[3:7], "u32 used = 2"}, field{rs[7:11], "u32 limit = 10"},
		field{rs[11:13], "u16 count = 2"}, field{rs[13:14], "u8 len = 32"}, field{rs[14:46], "evaluated element 0 = skI·blinded_0"}, field{rs[46:47], "u8 len = 32"},
		field{rs[47:79], "evaluated element 1"}, field{rs[79:80], "u8 len proof = 64"}, field{rs[80:112], "proof c"}, field{rs[112:], "proof s"})
	msg := token.BudgetError(E, token.KindRandomness, 10, 10).Error()
	rf := enc(&token.IssueResponse{Refusal: protocol.Refusal{Error: msg}})
	block("issue-response-refused-budget", V, field{rf[1:2], "status 1 (refused)"}, field{rf[2:4], "u16 len"}, field{rf[4:], fmt.Sprintf("%q", msg)})
	kq := enc(&token.KeysRequest{Epoch: E})
	block("issuer-keys-request", fs(V, str8(E, "epoch"))...)

	// randomness request with tokens (the oprf vector's elements)
	go1 := golden(t, "oprf/testdata/golden-randomness.json")
	orq, _ := oprf.ParseRandomnessRequest(fhex(go1["request"]))
	orq.Tokens = toks
	ob := enc(orq)
	block("oprf-randomness-request-tokens", field{ob[:75], "oprf-randomness-request, unchanged"}, field{ob[75:77], "u16 token count = 2"},
		field{ob[77:79], "u16 len = 162"}, field{ob[79:241], "token-randomness-0"}, field{ob[241:243], "u16 len = 162"}, field{ob[243:], "token-randomness-1"})
	sb := oprf.SpendBinding(E, orq.Elements[0])
	block("oprf-spend-binding-0", field{sb[:], `SHA-256("crowdlog-v1 randomness spend" ‖ str8(epoch) ‖ element 0)`})
	smsg := fmt.Errorf("%w: %d of %d tokens for epoch %s were spent by another request", oprf.ErrTokenSpent, 1, 2, E).Error()
	sr := enc(&oprf.RandomnessResponse{Refusal: protocol.Refusal{Error: smsg}})
	block("oprf-randomness-response-spent", V, field{sr[1:2], "status 1 (refused)"}, field{sr[2:4], "u16 len"}, field{sr[4:], fmt.Sprintf("%q", smsg)})

	// ARC
	fmt.Println("---- arc")
	ask, err := arc.GenerateKey(testvec.FixedReader("wire arc key"))
	if err != nil {
		t.Fatal(err)
	}
	askb := enc(ask)
	apub := enc(ask.Public())
	block("arc-private-key", field{askb[:32], "x0 (scalar, big-endian)"}, field{askb[32:64], "x1"}, field{askb[64:96], "x2"}, field{askb[96:], "x0Blinding"})
	block("arc-public-key", field{apub[:33], "X0 = x0·G + x0Blinding·H"}, field{apub[33:66], "X1 = x1·H"}, field{apub[66:], "X2 = x2·H"})
	kr := enc(&token.KeysResponse{Epoch: E, Randomness: rk.Public(), Report: pk.Public(), ARC: apub})
	_ = kq
	block("issuer-keys-response", fs(V, field{kr[1:2], "status 0 (ok)"}, str8(E, "epoch"), field{kr[10:11], "u8 len = 32"}, field{kr[11:43], "randomness-token key (token-randomness-public-key)"},
		field{kr[43:44], "u8 len = 32"}, field{kr[44:76], "report-token key (token-report-public-key)"}, field{kr[76:78], "u16 len = 99"}, field{kr[78:], "ARC public key (arc-public-key)"})...)
	// client secrets: read the reader's first three 48-byte draws
	rd := testvec.FixedReader("wire arc request")
	secrets, creq, err := arc.NewCredentialRequest(rd)
	if err != nil {
		t.Fatal(err)
	}
	rd2 := testvec.FixedReader("wire arc request")
	var ms [3][]byte
	for i := range ms {
		var b [48]byte
		io.ReadFull(rd2, b[:])
		v := new(big.Int).Mod(new(big.Int).SetBytes(b[:]), p256n)
		ms[i] = v.FillBytes(make([]byte, 32))
	}
	block("arc-client-secrets", field{ms[0], "m1 (scalar, big-endian)"}, field{ms[1], "r1"}, field{ms[2], "r2"})
	cqb := enc(creq)
	block("arc-credential-request", field{cqb[:33], "m1Enc = m1·G + r1·H"}, field{cqb[33:66], "m2Enc = m2·G + r2·H"}, field{cqb[66:], "request proof (5 scalars)"})
	cresp, err := ask.Issue(testvec.FixedReader("wire arc issue"), creq)
	if err != nil {
		t.Fatal(err)
	}
	crb := enc(cresp)
	qa := &token.IssueRequest{Kind: token.KindARC, Epoch: E, Timestamp: ts.Add(time.Second), ARC: cqb}
	qa.Sign(ipriv)
	qab := enc(qa)
	block("issue-request-arc", V, field{qab[1:2], "kind 3 (ARC)"}, field{qab[2:3], "u8 len epoch"}, field{qab[3:10], `epoch "2006-03"`},
		field{qab[10:18], "u64 timestamp, Unix ms (2006-03-01T12:00:01Z)"}, field{qab[18:50], "identity"}, field{qab[50:52], "u16 len = 226"},
		field{qab[52:278], "arc-credential-request"}, field{qab[278:], "Ed25519 signature"})
	rab := enc(&token.IssueResponse{Kind: token.KindARC, ARC: crb, Used: 1, Limit: 1})
	block("issue-response-arc", V, field{rab[1:2], "status 0 (ok)"}, field{rab[2:3], "kind 3 (ARC)"}, field{rab[3:7], "u32 used = 1"}, field{rab[7:11], "u32 limit = 1"},
		field{rab[11:13], "u16 len = 454"}, field{rab[13:46], "U = b·G"}, field{rab[46:79], "encUPrime"}, field{rab[79:112], "X0Aux"}, field{rab[112:145], "X1Aux"},
		field{rab[145:178], "X2Aux"}, field{rab[178:211], "HAux = b·H"}, field{rab[211:], "response proof (8 scalars)"})
	cred, err := secrets.Finalize(ask.Public(), creq, cresp)
	if err != nil {
		t.Fatal(err)
	}
	cb := enc(cred)
	block("arc-credential", field{cb[:32], "m1"}, field{cb[32:65], "U"}, field{cb[65:98], "U' = (x0 + x1·m1 + x2·m2)·U"}, field{cb[98:], "X1"})

	// the FT_u report with the ARC presentation and a report token
	gs := golden(t, "star/testdata/golden-sealing.json")
	omega := fhex(gs["omega"])
	s, err := star.DeriveSealing(omega, docApp, E, star.FTu, 3)
	if err != nil {
		t.Fatal(err)
	}
	actx := s.ARCContext()
	block("arc-presentation-context", field{actx[:15], `"crowdlog-v1 arc"`}, field{actx[15:32], "star-ctx"}, field{actx[32:], "star-tag"})
	pres, err := cred.Present(testvec.FixedReader("wire arc present"), actx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := ask.VerifyPresentation(pres, actx, 1); err != nil {
		t.Fatal(err)
	}
	pb := enc(pres)
	block("arc-presentation", field{pb[:33], "U"}, field{pb[33:66], "UPrimeCommit"}, field{pb[66:99], "m1Commit"}, field{pb[99:132], "tag = (m1 + 0)⁻¹·HashToGroup(context, \"Tag\")"},
		field{pb[132:165], "nonceCommit"}, field{pb[165:197], "challenge"}, field{pb[197:], "responses (5 scalars; limit 1: no bit commitments)"})
	atag := pres.Tag()
	x := star.ARCShareX(atag)
	block("arc-share-x", field{enc(x), `x = HashToScalar(tag, "crowdlog-v1 arc x")`})
	unit := star.ARCUnitID(atag)
	block("arc-unit-id", field{unit[:], `SHA-256("crowdlog-v1 arc unit" ‖ tag)[:16]`})
	// the report by hand
	ctx := starCtx(docApp, E, 2, 3)
	seed := hkdf32(t, omega, "crowdlog-v2 poly"+string(ctx))
	var co []group.Scalar
	for i := 0; i < 3; i++ {
		co = append(co, g.HashToScalar(append(append([]byte{}, seed...), u16(i)...), []byte("crowdlog-v1 poly")))
	}
	y := g.NewScalar()
	for i := 2; i >= 0; i-- {
		y.Mul(y, x)
		y.Add(y, co[i])
	}
	h := sha256.New()
	h.Write([]byte("crowdlog-v1 key"))
	h.Write(s.Tag[:])
	h.Write(enc(co[0]))
	key := h.Sum(nil)
	rep := &star.Report{App: docApp, Epoch: E, Policy: star.FTu, K: 3, Tag: s.Tag, Share: vss.Share{X: x, Y: y}, Commitment: s.Commitment()}
	copy(rep.ID[:], testvec.FixedBytes("wire arc report id", 16))
	pl := star.Payload{Primary: "new york weather", Secondary: "New York  Weather", Unit: unit}
	plb := enc(&pl)
	nonce := testvec.FixedBytes("wire arc report nonce", 24)
	aead, _ := chacha20poly1305.NewX(key)
	ad := append(append(append([]byte("crowdlog-v2 report"), ctx...), rep.ID[:]...), s.Tag[:]...)
	rep.Ciphertext = append(nonce, aead.Seal(nil, nonce, plb, ad)...)
	uns, _ := rep.UnsignedBytes()
	rn := token.ReportNonce(uns)
	block("report-token-nonce", field{rn[:], `SHA-256("crowdlog-v1 report token" ‖ report without trailer)`})
	pkid := pk.KeyID()
	pin := tokInput(token.TypeRistretto, rn[:], dgr[:], pkid[:])
	pr := genScalar("report token blind")
	zz := g.NewElement().Mul(g.NewElement().Mul(hashToGroup(pin), pr), psk)
	rtok := append(pin, finalizeOPRF(pin, pr, zz)...)
	tk, _ := token.ParseToken(rtok)
	if err := pk.Verify(tk); err != nil {
		t.Fatal(err)
	}
	rep.Token, rep.Presentation = rtok, pb
	rb := enc(rep)
	o := 1 + 6 + 8 + 3
	nu := len(uns)
	block("star-report-arc", fs(V, str8(docApp, "app"), str8(E, "epoch"), field{[]byte{2}, "policy FT_u"}, field{u16(3), "u16 k = 3"},
		field{rb[o : o+16], "id"}, field{rb[o+16 : o+48], "tag (star-tag)"}, field{rb[o+48 : o+80], "share x = arc-share-x"}, field{rb[o+80 : o+112], "share y = f(x)"},
		field{rb[o+112 : o+114], "u16 commitment count = k"}, field{rb[o+114 : o+210], "C_0 ‖ C_1 ‖ C_2 (star-commitment)"},
		field{rb[o+210 : o+214], "u32 len ciphertext = 94"}, field{rb[o+214 : o+238], "nonce"}, field{rb[o+238 : nu-16], "XChaCha20 ciphertext of the payload (unit = arc-unit-id)"}, field{rb[nu-16 : nu], "Poly1305 tag"},
		field{rb[nu : nu+2], "u16 len token = 162"}, field{rb[nu+2 : nu+164], "report token (kind report, nonce = report-token-nonce)"},
		field{rb[nu+164 : nu+166], "u16 len presentation = 357"}, field{rb[nu+166:], "arc-presentation"})...)
}

// p256n is the P-256 group order (arc reduces 48-byte draws modulo it).
var p256n, _ = new(big.Int).SetString("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551", 16)
