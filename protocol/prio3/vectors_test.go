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

	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
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
