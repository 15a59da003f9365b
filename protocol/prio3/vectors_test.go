package prio3

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

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
	// X25519 report key[32]) ‖ signature[64]"; version 1, the chunk
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
		fl([]byte{0x06}, "type 6 (settings)"),
	}, measurement...)
	body = append(body,
		fl(be64(100), "u64 min batch size = 100"),
		fl(be64(math.Float64bits(1.5)), "u64 ε = 1.5 (IEEE 754 bits)"),
		fl([]byte{1}, "u8 n = 1 report key"),
		fl([]byte{3}, "key id 3"),
		fl(reportKey, "X25519 report key (onion-key-aggregator-public)"),
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
		MinBatchSize: 100, Epsilon: 1.5, LeaderKeys: []LeaderKey{{ID: 3, Key: [32]byte(reportKey)}}}
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
		a.Settings.MinBatchSize != 100 || a.Settings.Epsilon != 1.5 || len(a.Settings.LeaderKeys) != 1 || a.Settings.LeaderKeys[0] != want.LeaderKeys[0] {
		t.Errorf("ParseSignedSettings: %+v, want %+v", a.Settings, want)
	}
}
