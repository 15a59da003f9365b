package prio3

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/cloudflare/circl/hpke"

	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// The vectors of docs/wire.md "Prio3 campaign settings". The test
// assembles the signed bytes and the campaign digest's input by hand from
// the layout the document gives (literal domains, field order and widths
// written out here, no encoder of this package), compares them with the
// document's blocks, checks the signature with crypto/ed25519 alone, and
// only then checks SignSettings, ParseSignedSettings, Verify and Digest
// against them. `go test ./protocol/prio3 -run Vector -wirevec.print`
// prints the blocks of the hand assembly.

const wireDoc = "../../docs/wire.md"

var fl = testvec.F

func be32(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
func be64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func TestWireVectorSettings(t *testing.T) {
	doc := testvec.WireDoc(t, wireDoc)
	seedB := sha256.Sum256([]byte("crowdlog wire vector prio3-leader-sign.key"))
	seed := testvec.Fields{fl(seedB[:], `Ed25519 seed = SHA-256("crowdlog wire vector prio3-leader-sign.key")`)}
	key := ed25519.NewKeyFromSeed(seed.Bytes())
	pub := key.Public().(ed25519.PublicKey)
	pubF := testvec.Fields{fl(pub, "Ed25519 public key (prio3-leader-sign.key.pub)")}

	// the keyword list flu, fever, cough, hashed as the document says
	words := []string{"flu", "fever", "cough"}
	h := sha256.New()
	h.Write([]byte("crowdlog-v1 pdd keyword list\n"))
	for _, w := range words {
		h.Write([]byte(w + "\n"))
	}
	listHash := h.Sum(nil)
	reportKey := doc["onion-key-aggregator-public"]
	if len(reportKey) != 32 {
		t.Fatalf("docs/wire.md onion-key-aggregator-public: %d bytes", len(reportKey))
	}

	// by hand, from "u8 version ‖ u8 type 6 ‖ str8 campaign ‖ u8 kind ‖
	// u32 L ‖ u8 bits ‖ u32 max weight ‖ u32 chunk ‖ u64 S ‖ list hash[32] ‖
	// u64 min batch size ‖ u64 ε (IEEE 754 bits) ‖ u8 n ‖ n × (u8 key id ‖
	// X25519 report key[32]) ‖ u64 status ε_c ‖ u64 status δ ‖
	// signature[64]"; version 1, the chunk
	// resolved: round(√(L·bits)) = round(√12) = 3
	const domain = "crowdlog prio3 campaign settings v1\x00"
	measurement := testvec.Fields{
		fl(append([]byte{11}, "health-2006"...), `str8 campaign "health-2006"`),
		fl([]byte{1}, "kind 1 (sumvec)"),
		fl(be32(3), "u32 L = 3"),
		fl([]byte{4}, "u8 bits = 4"),
		fl(be32(0), "u32 max weight = 0 (sumvec has none)"),
		fl(be32(3), "u32 chunk = 3 (0 resolved: round(√(L·bits)))"),
		fl(be64(20), "u64 S = 20"),
		fl(listHash, `list hash: SHA-256("crowdlog-v1 pdd keyword list\n" ‖ "flu\n" ‖ "fever\n" ‖ "cough\n")`),
	}
	body := append(testvec.Fields{
		fl([]byte{0x01}, "version 1 (prio3.WireVersion)"),
		fl([]byte{0x07}, "type 7 (settings)"),
	}, measurement...)
	body = append(body,
		fl(be64(100), "u64 min batch size = 100"),
		fl(be64(math.Float64bits(1.5)), "u64 ε = 1.5 (IEEE 754 bits)"),
		fl([]byte{1}, "u8 n = 1 report key"),
		fl([]byte{3}, "key id 3"),
		fl(reportKey, "X25519 report key (onion-key-aggregator-public)"),
		fl(be64(math.Float64bits(0.15)), "u64 status ε_c = 0.15 (IEEE 754 bits)"),
		fl(be64(math.Float64bits(1e-6)), "u64 status δ = 1e-6 (IEEE 754 bits)"),
	)
	signed := append(testvec.Fields{fl([]byte(domain), `"crowdlog prio3 campaign settings v1" 00`)}, body...)
	sig := ed25519.Sign(key, signed.Bytes())
	enc := append(body, fl(sig, "Ed25519 signature over the signed bytes"))
	digestIn := append(testvec.Fields{fl([]byte("crowdlog prio3 campaign digest v1\x00"), `"crowdlog prio3 campaign digest v1" 00`)}, measurement...)
	digestB := sha256.Sum256(digestIn.Bytes())
	digest := testvec.Fields{fl(digestB[:], "campaign digest: SHA-256 of the digest domain ‖ the measurement fields above")}
	if *testvec.PrintWireVectors {
		fmt.Print(seed.Block("prio3-leader-sign-seed"), "\n", pubF.Block("prio3-leader-sign-public"), "\n",
			signed.Block("prio3-settings-signed-bytes"), "\n", enc.Block("prio3-settings-signed"), "\n", digest.Block("prio3-campaign-digest"), "\n")
	}
	testvec.DocEq(t, doc, "prio3-leader-sign-seed", seed.Bytes())
	testvec.DocEq(t, doc, "prio3-leader-sign-public", pub)
	testvec.DocEq(t, doc, "prio3-settings-signed-bytes", signed.Bytes())
	testvec.DocEq(t, doc, "prio3-campaign-digest", digest.Bytes())
	_, docSig := testvec.CheckSigned(t, doc, domain, "prio3-settings-signed-bytes", "prio3-settings-signed", pub)
	if !bytes.Equal(docSig, sig) {
		t.Errorf("prio3-settings-signed: signature %x, crypto/ed25519 gives %x (RFC 8032 signatures are deterministic)", docSig, sig)
	}

	// the package: its encoder from the same inputs (chunk 0: resolved),
	// its parser, Verify and Digest
	s := &Settings{Campaign: "health-2006", Measurement: Config{Kind: KindSumVec, Length: 3, Bits: 4, L1: 20},
		MinBatchSize: 100, Epsilon: 1.5, LeaderKeys: []LeaderKey{{ID: 3, Key: [32]byte(reportKey)}},
		StatusEpsilon: 0.15, StatusDelta: 1e-6}
	copy(s.ListHash[:], listHash)
	got, err := SignSettings(key, s)
	if err != nil {
		t.Fatal(err)
	}
	testvec.DocEq(t, doc, "prio3-settings-signed", got)
	if d := s.Digest(); !bytes.Equal(d[:], doc["prio3-campaign-digest"]) {
		t.Errorf("Settings.Digest %x, the document %x", d, doc["prio3-campaign-digest"])
	}
	a, err := ParseSignedSettings(doc["prio3-settings-signed"])
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(pub); err != nil {
		t.Error(err)
	}
	want := *s
	want.Measurement.Chunk = 3
	if a.Settings.Campaign != want.Campaign || a.Settings.Measurement != want.Measurement || a.Settings.ListHash != want.ListHash ||
		a.Settings.MinBatchSize != 100 || a.Settings.Epsilon != 1.5 || a.Settings.StatusEpsilon != 0.15 || a.Settings.StatusDelta != 1e-6 || len(a.Settings.LeaderKeys) != 1 || a.Settings.LeaderKeys[0] != want.LeaderKeys[0] {
		t.Errorf("ParseSignedSettings: %+v, want %+v", a.Settings, want)
	}
}

// TestWireVectorReport checks the vectors of docs/wire.md "Prio3 report
// and helper token": a report's plaintext, its helper token nonce, and the
// leader's signed AggregateReq forwarding it to the helper, each
// assembled by hand from the documented layouts (the shares are
// placeholders: the framing does not look inside them).
func TestWireVectorReport(t *testing.T) {
	doc := testvec.WireDoc(t, wireDoc)
	seedB := sha256.Sum256([]byte("crowdlog wire vector prio3-leader-sign.key"))
	key := ed25519.NewKeyFromSeed(seedB[:])
	pub := key.Public().(ed25519.PublicKey)
	fill := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	var id ReportID
	for i := range id {
		id[i] = byte(0xa0 + i)
	}
	public, leader, sealed := fill(0x11, 64), fill(0x22, 16), fill(0x33, 112)
	be16 := func(n uint16) []byte { return binary.BigEndian.AppendUint16(nil, n) }
	campaign := fl(append([]byte{11}, "health-2006"...), `str8 campaign "health-2006"`)
	day := fl(be32(13210), "u32 day = 13210 (2006-03-03)")

	// by hand, from "u8 version ‖ str8 campaign ‖ u32 day ‖ id[16] ‖
	// str32 public share ‖ str32 leader share ‖ str32 sealed helper share ‖
	// str16 helper token [‖ str16 leader token]"
	report := testvec.Fields{
		fl([]byte{0x01}, "version 1 (prio3.WireVersion)"), campaign, day,
		fl(id[:], "report id a0 a1 … af"),
		fl(be32(64), "u32 length = 64"), fl(public, "public share (placeholder: 64 × 11)"),
		fl(be32(16), "u32 length = 16"), fl(leader, "leader share (placeholder: 16 × 22)"),
		fl(be32(112), "u32 length = 112"), fl(sealed, "sealed helper share (placeholder: 112 × 33)"),
		fl(be16(0), "u16 helper token length = 0 (none; no leader token)"),
	}
	// "SHA-256("crowdlog-v1 prio3 helper token" ‖ str8 campaign ‖ u32 day ‖
	// id[16] ‖ SHA-256(public share) ‖ SHA-256(sealed helper share))"
	ps, hs := sha256.Sum256(public), sha256.Sum256(sealed)
	nonceIn := testvec.Fields{fl([]byte("crowdlog-v1 prio3 helper token"), `"crowdlog-v1 prio3 helper token"`), campaign, day,
		fl(id[:], "report id"), fl(ps[:], "SHA-256(public share)"), fl(hs[:], "SHA-256(sealed helper share)")}
	nonceB := sha256.Sum256(nonceIn.Bytes())
	nonce := testvec.Fields{fl(nonceB[:], "helper token nonce = SHA-256 of the input above")}

	// the AggregateReq forwarding it (leader prep share: placeholder), by
	// hand from "version ‖ type 1 ‖ str8 campaign ‖ u32 day ‖ u32 key epoch
	// ‖ u32 n ‖ n × item", signed as "version ‖ type 5 ‖ id[16] ‖ u64 issued
	// (Unix ms) ‖ str32 body ‖ signature[64]" over "crowdlog prio3 leader
	// request v1" 00 ‖ id ‖ issued ‖ body
	body := testvec.Fields{
		fl([]byte{0x01}, "version 1"), fl([]byte{0x01}, "type 1 (AggregateReq)"), campaign, day,
		fl(be32(1), "u32 key epoch = 1"), fl(be32(1), "u32 n = 1 report"),
		fl(id[:], "report id"),
		fl(be32(64), "u32 length = 64"), fl(public, "public share"),
		fl(be32(112), "u32 length = 112"), fl(sealed, "sealed helper share"),
		fl(be32(16), "u32 length = 16"), fl(fill(0x44, 16), "leader prep share (placeholder: 16 × 44)"),
		fl(be16(0), "u16 helper token length = 0"),
	}
	var reqID [16]byte
	for i := range reqID {
		reqID[i] = byte(0xc0 + i)
	}
	const issued = 1141430400000 // 2006-03-04T00:00:00Z, Unix ms
	const domain = "crowdlog prio3 leader request v1\x00"
	signed := append(testvec.Fields{fl([]byte(domain), `"crowdlog prio3 leader request v1" 00`),
		fl(reqID[:], "request id c0 c1 … cf"), fl(be64(issued), "u64 issued = 1141430400000 (2006-03-04T00:00:00Z, Unix ms)")}, body...)
	sig := ed25519.Sign(key, signed.Bytes())
	req := append(testvec.Fields{fl([]byte{0x01}, "version 1"), fl([]byte{0x05}, "type 5 (signed leader request)"),
		fl(reqID[:], "request id"), fl(be64(issued), "u64 issued"),
		fl(be32(uint32(len(body.Bytes()))), fmt.Sprintf("u32 body length = %d", len(body.Bytes())))}, body...)
	req = append(req, fl(sig, "Ed25519 signature (prio3-leader-sign-seed's key) over prio3-leader-request-signed-bytes"))
	if *testvec.PrintWireVectors {
		fmt.Print(report.Block("prio3-report"), "\n", nonce.Block("prio3-helper-nonce"), "\n",
			signed.Block("prio3-leader-request-signed-bytes"), "\n", req.Block("prio3-leader-request"), "\n")
	}
	testvec.DocEq(t, doc, "prio3-report", report.Bytes())
	testvec.DocEq(t, doc, "prio3-helper-nonce", nonce.Bytes())
	testvec.DocEq(t, doc, "prio3-leader-request-signed-bytes", signed.Bytes())
	testvec.DocEq(t, doc, "prio3-leader-request", req.Bytes())
	// the verifier (the helper): the signature is the last 64 bytes, over
	// the domain ‖ id ‖ issued ‖ body cut from the request
	docReq := doc["prio3-leader-request"]
	if len(docReq) < 30+ed25519.SignatureSize {
		t.Fatalf("prio3-leader-request: %d bytes", len(docReq))
	}
	n := int(binary.BigEndian.Uint32(docReq[26:30]))
	if 30+n+ed25519.SignatureSize != len(docReq) {
		t.Fatalf("prio3-leader-request: body length %d does not end 64 bytes before the end", n)
	}
	msg := append(append([]byte(domain), docReq[2:26]...), docReq[30:30+n]...)
	if !bytes.Equal(msg, doc["prio3-leader-request-signed-bytes"]) || !ed25519.Verify(pub, msg, docReq[30+n:]) {
		t.Fatal("prio3-leader-request: the signature does not verify (crypto/ed25519) over the domain ‖ id ‖ issued ‖ body")
	}

	// the package: encoders from the same inputs, parsers, Verify, nonce
	r := &Report{Campaign: "health-2006", Day: 13210, ID: id, PublicShare: public, LeaderShare: leader, SealedHelper: sealed}
	got, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	testvec.DocEq(t, doc, "prio3-report", got)
	pr, err := ParseReport(doc["prio3-report"])
	if err != nil {
		t.Fatal(err)
	}
	if hn := pr.HelperNonce(); !bytes.Equal(hn[:], doc["prio3-helper-nonce"]) {
		t.Errorf("Report.HelperNonce %x, the document %x", hn, doc["prio3-helper-nonce"])
	}
	agg := &AggregateReq{Campaign: "health-2006", Day: 13210, KeyEpoch: 1,
		Items: []PrepItem{{ID: id, PublicShare: public, SealedHelper: sealed, LeaderPrep: fill(0x44, 16)}}}
	aggB, err := agg.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	q := &SignedReq{ID: reqID, Issued: time.UnixMilli(issued), Body: aggB}
	copy(q.Sig[:], ed25519.Sign(key, q.signed()))
	qb, err := q.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	testvec.DocEq(t, doc, "prio3-leader-request", qb)
	pq, err := ParseSignedReq(doc["prio3-leader-request"])
	if err != nil {
		t.Fatal(err)
	}
	if err := pq.Verify(pub); err != nil || pq.Kind() != 1 {
		t.Errorf("ParseSignedReq: kind %d, Verify %v", pq.Kind(), err)
	}
	pa, err := ParseAggregateReq(pq.Body)
	if err != nil || len(pa.Items) != 1 || pa.Items[0].ID != id || pa.KeyEpoch != 1 {
		t.Errorf("ParseAggregateReq: %+v, %v", pa, err)
	}
}

// TestWireVectorLeaderHelper checks the vectors of docs/wire.md "Prio3
// upload, aggregate response, collect request and aggregate share": the
// helper's AggregateResp, the leader's CollectReq, the helper's AggShare
// and its HPKE AAD, and the AAD of a report's sealed helper share, each
// assembled by hand from the documented layouts (the prep message and
// the sealed aggregate share are placeholders: the framing does not look
// inside them), then the package's encoders and parsers against them.
func TestWireVectorLeaderHelper(t *testing.T) {
	doc := testvec.WireDoc(t, wireDoc)
	fill := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	var id, id2 ReportID
	for i := range id {
		id[i], id2[i] = byte(0xa0+i), byte(0xb0+i)
	}
	campaign := fl(append([]byte{11}, "health-2006"...), `str8 campaign "health-2006"`)
	day := fl(be32(13210), "u32 day = 13210 (2006-03-03)")
	head := func(typ byte, what string) testvec.Fields {
		return testvec.Fields{fl([]byte{0x01}, "version 1 (prio3.WireVersion)"), fl([]byte{typ}, what), campaign, day}
	}
	// "version ‖ type 2 ‖ str8 campaign ‖ u32 day ‖ u32 n ‖ n × (id[16] ‖
	// str8 reason ‖ str32 prep message)"
	resp := append(head(0x02, "type 2 (AggregateResp)"),
		fl(be32(2), "u32 n = 2 results"),
		fl(id[:], "report id a0 a1 … af"), fl([]byte{0}, "str8 reason: empty (prepared)"),
		fl(be32(16), "u32 length = 16"), fl(fill(0x55, 16), "prep message (placeholder: 16 × 55)"),
		fl(id2[:], "report id b0 b1 … bf"), fl(append([]byte{13}, "token_missing"...), `str8 reason "token_missing" (rejected)`),
		fl(be32(0), "u32 length = 0 (no prep message)"))
	// the batch checksum of the one report prepared: SHA-256(id)
	sum := sha256.Sum256(id[:])
	// "version ‖ type 3 ‖ str8 campaign ‖ u32 day ‖ u64 count ‖ checksum[32]"
	collect := append(head(0x03, "type 3 (CollectReq)"),
		fl(be64(1), "u64 count = 1 report"), fl(sum[:], "checksum: XOR of SHA-256(id) over the batch = SHA-256(a0 … af)"))
	// "version ‖ type 4 ‖ str8 campaign ‖ u32 day ‖ u8 role ‖ u64 count ‖
	// checksum[32] ‖ str8 reason ‖ u64 ε (IEEE 754 bits) ‖ str32 sealed"
	// and its AAD "version ‖ type 4 ‖ str8 campaign ‖ u32 day ‖ u8 role ‖
	// u64 count ‖ checksum[32] ‖ u64 ε"
	aad := append(head(0x04, "type 4 (AggShare)"),
		fl([]byte{1}, "u8 role = 1 (helper)"), fl(be64(1), "u64 count = 1"), fl(sum[:], "checksum"),
		fl(be64(math.Float64bits(1.5)), "u64 ε = 1.5 (IEEE 754 bits)"))
	share := append(head(0x04, "type 4 (AggShare)"),
		fl([]byte{1}, "u8 role = 1 (helper)"), fl(be64(1), "u64 count = 1"), fl(sum[:], "checksum"),
		fl([]byte{0}, "str8 reason: empty (a share)"),
		fl(be64(math.Float64bits(1.5)), "u64 ε = 1.5 (IEEE 754 bits)"),
		fl(be32(80), "u32 length = 80"), fl(fill(0x66, 80), "sealed share (placeholder: 80 × 66)"))
	// the sealed helper share's AAD: "version ‖ str8 campaign ‖ u32 day ‖
	// id[16] ‖ str32 public share" (public share as in prio3-report)
	haad := testvec.Fields{fl([]byte{0x01}, "version 1"), campaign, day, fl(id[:], "report id a0 a1 … af"),
		fl(be32(64), "u32 length = 64"), fl(fill(0x11, 64), "public share (placeholder: 64 × 11, as prio3-report)")}
	if *testvec.PrintWireVectors {
		fmt.Print(resp.Block("prio3-aggregate-response"), "\n", collect.Block("prio3-collect-request"), "\n",
			share.Block("prio3-aggregate-share"), "\n", aad.Block("prio3-aggregate-share-aad"), "\n",
			haad.Block("prio3-helper-share-aad"), "\n")
	}
	testvec.DocEq(t, doc, "prio3-aggregate-response", resp.Bytes())
	testvec.DocEq(t, doc, "prio3-collect-request", collect.Bytes())
	testvec.DocEq(t, doc, "prio3-aggregate-share", share.Bytes())
	testvec.DocEq(t, doc, "prio3-aggregate-share-aad", aad.Bytes())
	testvec.DocEq(t, doc, "prio3-helper-share-aad", haad.Bytes())

	// the package: encoders from the same inputs, parsers
	p := &AggregateResp{Campaign: "health-2006", Day: 13210, Results: []PrepResult{{ID: id, Message: fill(0x55, 16)}, {ID: id2, Reason: "token_missing"}}}
	pb, _ := p.MarshalBinary()
	testvec.DocEq(t, doc, "prio3-aggregate-response", pb)
	if pp, err := ParseAggregateResp(doc["prio3-aggregate-response"]); err != nil || len(pp.Results) != 2 || pp.Results[1].Reason != "token_missing" || pp.Results[1].ID != id2 {
		t.Errorf("ParseAggregateResp: %+v, %v", pp, err)
	}
	var ck Checksum
	ck.Add(id)
	q := &CollectReq{Campaign: "health-2006", Day: 13210, Count: 1, Checksum: ck}
	qb, _ := q.MarshalBinary()
	testvec.DocEq(t, doc, "prio3-collect-request", qb)
	if pq, err := ParseCollectReq(doc["prio3-collect-request"]); err != nil || *pq != *q {
		t.Errorf("ParseCollectReq: %+v, %v", pq, err)
	}
	a := &AggShare{Role: 1, Campaign: "health-2006", Day: 13210, Count: 1, Checksum: ck, Epsilon: 1.5, Sealed: fill(0x66, 80)}
	ab, _ := a.MarshalBinary()
	testvec.DocEq(t, doc, "prio3-aggregate-share", ab)
	testvec.DocEq(t, doc, "prio3-aggregate-share-aad", a.aad())
	if pa, err := ParseAggShare(doc["prio3-aggregate-share"]); err != nil || pa.Role != 1 || pa.Count != 1 || pa.Checksum != ck || pa.Epsilon != 1.5 || !bytes.Equal(pa.Sealed, a.Sealed) {
		t.Errorf("ParseAggShare: %+v, %v", pa, err)
	}
	r := &Report{Campaign: "health-2006", Day: 13210, ID: id, PublicShare: fill(0x11, 64)}
	testvec.DocEq(t, doc, "prio3-helper-share-aad", r.helperAAD())
}

// TestWireVectorUpload checks the vector of docs/wire.md "Prio3 upload":
// the report of prio3-report sealed to the aggregator key of the onion
// vectors with circl's HPKE directly (the ephemeral key drawn from a
// fixed stream), then that a receiver with the private key opens it with
// circl's HPKE to prio3-report and that OpenReport does.
func TestWireVectorUpload(t *testing.T) {
	doc := testvec.WireDoc(t, wireDoc)
	scheme := hpke.KEM_X25519_HKDF_SHA256.Scheme()
	sk, err := scheme.UnmarshalBinaryPrivateKey(doc["onion-key-aggregator-private"])
	if err != nil {
		t.Fatal(err)
	}
	pk, err := scheme.UnmarshalBinaryPublicKey(doc["onion-key-aggregator-public"])
	if err != nil {
		t.Fatal(err)
	}
	suite := hpke.NewSuite(hpke.KEM_X25519_HKDF_SHA256, hpke.KDF_HKDF_SHA256, hpke.AEAD_ChaCha20Poly1305)
	info := []byte("crowdlog-v1 prio3 report")
	hdr := []byte{0x01, 0x03}
	snd, err := suite.NewSender(pk, info)
	if err != nil {
		t.Fatal(err)
	}
	enc, sealer, err := snd.Setup(testvec.FixedReader("wire prio3-upload"))
	if err != nil {
		t.Fatal(err)
	}
	ct, err := sealer.Seal(doc["prio3-report"], hdr)
	if err != nil {
		t.Fatal(err)
	}
	up := testvec.Fields{fl([]byte{0x01}, "version 1 (prio3.WireVersion)"), fl([]byte{0x03}, "key id 3 (onion-key-aggregator-public)"),
		fl(enc, "enc: the HPKE ephemeral X25519 key"),
		fl(ct, fmt.Sprintf("HPKE ciphertext of prio3-report (%d bytes) ‖ 16-byte tag, AAD 01 03", len(doc["prio3-report"])))}
	if *testvec.PrintWireVectors {
		fmt.Print(up.Block("prio3-upload"), "\n")
	}
	testvec.DocEq(t, doc, "prio3-upload", up.Bytes())
	// a receiver, with circl's HPKE alone
	docUp := doc["prio3-upload"]
	if len(docUp) < 2+32+16 {
		t.Fatalf("prio3-upload: %d bytes", len(docUp))
	}
	rcv, err := suite.NewReceiver(sk, info)
	if err != nil {
		t.Fatal(err)
	}
	op, err := rcv.Setup(docUp[2:34])
	if err != nil {
		t.Fatal(err)
	}
	pt, err := op.Open(docUp[34:], docUp[:2])
	if err != nil || !bytes.Equal(pt, doc["prio3-report"]) {
		t.Fatalf("prio3-upload does not open (circl HPKE, AAD 01 03) to prio3-report: %v", err)
	}
	// the package
	r, err := OpenReport([]*onion.KeyPair{{ID: 3, Public: pk, Private: sk}}, docUp)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := r.MarshalBinary(); !bytes.Equal(b, doc["prio3-report"]) {
		t.Errorf("OpenReport(prio3-upload) re-encodes to %x, want prio3-report", b)
	}
	if _, err := OpenReport([]*onion.KeyPair{{ID: 4, Public: pk, Private: sk}}, docUp); err == nil {
		t.Error("OpenReport opened the upload with a key of another id")
	}
}
