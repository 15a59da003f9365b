package pipelinespec

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

// The vectors of docs/wire.md "Signed pipeline announcement" and "Signed
// pipeline answer". Each test assembles the signed bytes by hand from the
// layout the document gives (literal domain strings, length prefixes and
// field order written out here, no encoder of this package), compares
// them with the document's blocks, checks the document's signature over
// them with crypto/ed25519 alone, and only then checks that the package's
// encoder gives the same bytes from the same inputs and its parser and
// Verify accept them. `go test ./protocol/pipelinespec -run Vector
// -wirevec.print` prints the blocks of the hand assembly.

const wireDoc = "../../docs/wire.md"

// vectorSeed is the vectors' aggregator signing key seed (RFC 8032 §5.1.5
// private key): SHA-256 of a fixed label, so anyone can derive it again.
func vectorSeed() []byte {
	s := sha256.Sum256([]byte("crowdlog wire vector aggregator-sign.key"))
	return s[:]
}

// The fixed inputs of the vectors.
const (
	vecProcess   = "K7QZ3M2XW5RTE4NA" // as aggregator.processID draws one: 16 base32 characters
	vecCanonical = "crowdlog-v1 pipeline\napp=query\noptions=\npolicy=ft-u\nshamir_k=3\n"
)

func vecNonce() []byte {
	n := make([]byte, 32)
	for i := range n {
		n[i] = byte(i)
	}
	return n
}

// vecContext is the requested context: the definition's digest in hex,
// its app and an epoch.
func vecContext() string {
	d := sha256.Sum256([]byte(vecCanonical))
	return hex.EncodeToString(d[:]) + "/query/2006-03"
}

func u16b(n int) []byte    { return binary.BigEndian.AppendUint16(nil, uint16(n)) }
func u64b(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
func str8b(s string) []byte {
	return append([]byte{byte(len(s))}, s...)
}

var fl = testvec.F

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func q(s string) string { return fmt.Sprintf("%q", s) }

// vecKeys checks the key blocks both vectors share (print: print them).
func vecKeys(t *testing.T, doc map[string][]byte, print bool) (ed25519.PrivateKey, ed25519.PublicKey) {
	t.Helper()
	seed := testvec.Fields{fl(vectorSeed(), `Ed25519 seed = SHA-256("crowdlog wire vector aggregator-sign.key")`)}
	key := ed25519.NewKeyFromSeed(seed.Bytes())
	pub := key.Public().(ed25519.PublicKey)
	pubF := testvec.Fields{fl(pub, "Ed25519 public key (aggregator-sign.key.pub)")}
	if print && *testvec.PrintWireVectors {
		fmt.Print(seed.Block("aggregator-sign-seed"), "\n", pubF.Block("aggregator-sign-public"), "\n")
	}
	testvec.DocEq(t, doc, "aggregator-sign-seed", seed.Bytes())
	testvec.DocEq(t, doc, "aggregator-sign-public", pub)
	return key, pub
}

func TestWireVectorSignedAnnouncement(t *testing.T) {
	doc := testvec.WireDoc(t, wireDoc)
	key, pub := vecKeys(t, doc, true)

	// by hand, from "u8 version 1 ‖ u8 type 1 ‖ str8 process ‖ u16 n ‖
	// n × (u16 length ‖ canonical text) ‖ signature[64]", signed over
	// "crowdlog pipeline announcement v1\0" ‖ everything before it
	const domain = "crowdlog pipeline announcement v1\x00"
	body := testvec.Fields{
		fl([]byte{0x01}, "version 1"),
		fl([]byte{0x01}, "type 1 (signed announcement)"),
		fl(str8b(vecProcess), "str8 process "+q(vecProcess)),
		fl(u16b(1), "u16 n = 1 definition"),
		fl(u16b(len(vecCanonical)), fmt.Sprintf("u16 length = %d", len(vecCanonical))),
		fl([]byte(vecCanonical), "canonical text (star-pipeline-canonical)"),
	}
	signed := append(testvec.Fields{fl([]byte(domain), `"crowdlog pipeline announcement v1" 00`)}, body...)
	sig := ed25519.Sign(key, signed.Bytes())
	enc := append(body, testvec.Field{B: sig, Note: "Ed25519 signature over the signed bytes"})
	if *testvec.PrintWireVectors {
		fmt.Print(signed.Block("pipeline-announcement-signed-bytes"), "\n", enc.Block("pipeline-announcement-signed"), "\n")
	}
	testvec.DocEq(t, doc, "pipeline-announcement-signed-bytes", signed.Bytes())
	_, docSig := testvec.CheckSigned(t, doc, domain, "pipeline-announcement-signed-bytes", "pipeline-announcement-signed", pub)
	if !bytes.Equal(docSig, sig) {
		t.Errorf("pipeline-announcement-signed: signature %x, crypto/ed25519 gives %x (RFC 8032 signatures are deterministic)", docSig, sig)
	}

	// the package: its encoder from the same inputs, its parser and Verify
	spec, err := Parse(vecCanonical)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Canonical() != vecCanonical || spec != (Spec{App: "query", Policy: "ft-u", ShamirK: 3}) {
		t.Fatalf("the vectors' definition parses to %+v", spec)
	}
	got, err := SignPipelines(key, vecProcess, []Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	testvec.DocEq(t, doc, "pipeline-announcement-signed", got)
	a, err := ParseSignedPipelines(doc["pipeline-announcement-signed"])
	if err != nil {
		t.Fatal(err)
	}
	if a.Process != vecProcess || len(a.Pipelines) != 1 || a.Pipelines[0] != vecCanonical || a.Verify(pub) != nil {
		t.Errorf("ParseSignedPipelines/Verify: %+v, %v", a, a.Verify(pub))
	}
}

func TestWireVectorSignedAnswer(t *testing.T) {
	doc := testvec.WireDoc(t, wireDoc)
	key, pub := vecKeys(t, doc, false)
	nonce, context := vecNonce(), vecContext()
	// the inputs the document names: its definition and digest
	testvec.DocEq(t, doc, "star-pipeline-canonical", []byte(vecCanonical))
	testvec.DocEq(t, doc, "star-pipeline-digest", mustHex(t, context[:64]))
	nonceF := testvec.Fields{fl(nonce, "the request's nonce: bytes 00 01 … 1f")}
	testvec.DocEq(t, doc, "pipeline-answer-nonce", nonce)

	// by hand, from "u8 version 2 ‖ u8 type 2 ‖ str8 process ‖ str8 nonce ‖
	// u16 length ‖ context ‖ u8 flags ‖ u64 admitted ‖ u8 m ‖ m × (str8
	// reason ‖ u64 refused) ‖ u16 n ‖ n × (u16 length ‖ canonical text) ‖
	// signature[64]", reasons in increasing byte order, signed over
	// "crowdlog pipeline answer v2\0" ‖ everything before it
	const domain = "crowdlog pipeline answer v2\x00"
	body := testvec.Fields{
		fl([]byte{0x02}, "version 2"),
		fl([]byte{0x02}, "type 2 (signed answer)"),
		fl(str8b(vecProcess), "str8 process "+q(vecProcess)),
		fl([]byte{32}, "u8 nonce length = 32"),
		fl(nonce, "nonce (pipeline-answer-nonce, echoed)"),
		fl(u16b(len(context)), fmt.Sprintf("u16 context length = %d", len(context))),
		fl([]byte(context), `context "DIGEST/query/2006-03", DIGEST = star-pipeline-digest in hex (echoed)`),
		fl([]byte{0x00}, "flags 0 (not withheld)"),
		fl(u64b(41), "u64 admitted = 41"),
		fl([]byte{2}, "u8 m = 2 refusal reasons"),
		fl(str8b("bad-token"), `str8 reason "bad-token"`),
		fl(u64b(1), "u64 refused = 1"),
		fl(str8b("spent-token"), `str8 reason "spent-token"`),
		fl(u64b(2), "u64 refused = 2"),
		fl(u16b(1), "u16 n = 1 definition"),
		fl(u16b(len(vecCanonical)), fmt.Sprintf("u16 length = %d", len(vecCanonical))),
		fl([]byte(vecCanonical), "canonical text (star-pipeline-canonical)"),
	}
	signed := append(testvec.Fields{fl([]byte(domain), `"crowdlog pipeline answer v2" 00`)}, body...)
	sig := ed25519.Sign(key, signed.Bytes())
	enc := append(body, testvec.Field{B: sig, Note: "Ed25519 signature over the signed bytes"})
	if *testvec.PrintWireVectors {
		fmt.Print(nonceF.Block("pipeline-answer-nonce"), "\n", signed.Block("pipeline-answer-signed-bytes"), "\n", enc.Block("pipeline-answer-signed"), "\n")
	}
	testvec.DocEq(t, doc, "pipeline-answer-signed-bytes", signed.Bytes())
	docBody, docSig := testvec.CheckSigned(t, doc, domain, "pipeline-answer-signed-bytes", "pipeline-answer-signed", pub)
	if !bytes.Equal(docSig, sig) {
		t.Errorf("pipeline-answer-signed: signature %x, crypto/ed25519 gives %x (RFC 8032 signatures are deterministic)", docSig, sig)
	}

	// what a client checks after the signature, cut by hand: the echoed
	// nonce and context are the ones it sent
	r := docBody[2:]
	r = r[1+int(r[0]):] // process
	gotNonce := r[1 : 1+int(r[0])]
	r = r[1+int(r[0]):]
	gotContext := string(r[2 : 2+int(binary.BigEndian.Uint16(r))])
	if !bytes.Equal(gotNonce, nonce) || gotContext != context {
		t.Errorf("pipeline-answer-signed echoes nonce %x, context %q", gotNonce, gotContext)
	}

	// the package: its encoder from the same inputs, its parser, Verify
	// and Answers
	in := SignedAnswer{Process: vecProcess, Nonce: nonce, Context: context, Pipelines: []string{vecCanonical},
		Counts: Counts{Admitted: 41, Refused: map[string]int64{"spent-token": 2, "bad-token": 1}}}
	got, err := SignAnswer(key, in)
	if err != nil {
		t.Fatal(err)
	}
	testvec.DocEq(t, doc, "pipeline-answer-signed", got)
	a, err := ParseSignedAnswer(doc["pipeline-answer-signed"])
	if err != nil {
		t.Fatal(err)
	}
	if a.Process != vecProcess || a.Context != context || a.Withheld || a.Counts.Admitted != 41 || len(a.Counts.Refused) != 2 ||
		a.Counts.Refused["bad-token"] != 1 || a.Counts.Refused["spent-token"] != 2 || len(a.Pipelines) != 1 || a.Pipelines[0] != vecCanonical {
		t.Errorf("ParseSignedAnswer: %+v", a)
	}
	if err := a.Verify(pub); err != nil || !a.Answers(nonce, context) {
		t.Errorf("Verify: %v, Answers: %v", err, a.Answers(nonce, context))
	}
	other := bytes.Clone(nonce)
	other[31] ^= 1
	if a.Answers(other, context) {
		t.Error("the answer answers another nonce")
	}
}
