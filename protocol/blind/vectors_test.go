package blind

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

// The vectors of docs/wire.md "PDD client messages", "Signed tasks". The
// test assembles the signed bytes and the task's JSON by hand from the
// layout the document gives (the domain, widths and field order written
// out here, not TaskSignedBytes), compares them with the document's
// blocks, checks the signature with crypto/ed25519 alone, and only then
// checks TaskSignedBytes, SignTask, VerifyTask and the Task's JSON
// against them. `go test ./protocol/blind -run Vector -wirevec.print`
// prints the blocks of the hand assembly.

const wireDoc = "../../docs/wire.md"

var fl = testvec.F

func TestWireVectorTask(t *testing.T) {
	doc := testvec.WireDoc(t, wireDoc)
	for _, name := range []string{"control-sign-seed", "pdd-x25519-private", "pdd-peer-x25519-private"} {
		if len(doc[name]) != 32 {
			t.Fatalf("docs/wire.md %s: %d bytes", name, len(doc[name]))
		}
	}
	key := ed25519.NewKeyFromSeed(doc["control-sign-seed"])
	pub := key.Public().(ed25519.PublicKey)
	var members [][]byte
	for _, name := range []string{"pdd-x25519-private", "pdd-peer-x25519-private"} {
		k, err := ecdh.X25519().NewPrivateKey(doc[name])
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, k.PublicKey().Bytes())
	}

	// by hand, from `"crowdlog pdd task v1" 00 ‖ str8 campaign ‖ i32 round
	// ‖ u32 group ‖ u32 member ‖ u32 t ‖ i32 deadline ‖ u32 n ‖ n × (u16
	// length ‖ member public key)`, big-endian
	be32 := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	signed := testvec.Fields{
		fl([]byte("crowdlog pdd task v1\x00"), `"crowdlog pdd task v1" 00`),
		fl(append([]byte{11}, "health-2006"...), `str8 campaign "health-2006"`),
		fl(be32(13210), "i32 round = 13210 (2006-03-03)"),
		fl(be32(7), "u32 group = 7"),
		fl(be32(0), "u32 member = 0"),
		fl(be32(2), "u32 t = 2"),
		fl(be32(13211), "i32 deadline = 13211"),
		fl(be32(2), "u32 n = 2 members"),
		fl([]byte{0, 32}, "u16 length = 32"),
		fl(members[0], "member 0's X25519 public key (of pdd-x25519-private)"),
		fl([]byte{0, 32}, "u16 length = 32"),
		fl(members[1], "member 1's X25519 public key (of pdd-peer-x25519-private)"),
	}
	sig := ed25519.Sign(key, signed.Bytes())
	sigF := testvec.Fields{fl(sig, "Ed25519 signature (control-sign-seed's key) over pdd-task-signed-bytes")}
	b64 := base64.StdEncoding.EncodeToString
	js := fmt.Sprintf(`{"round":13210,"group":7,"member":0,"members":["%s","%s"],"t":2,"deadline":13211,"sig":"%s"}`,
		b64(members[0]), b64(members[1]), b64(sig))
	if *testvec.PrintWireVectors {
		fmt.Print(signed.Block("pdd-task-signed-bytes"), "\n", sigF.Block("pdd-task-signature"), "\n",
			"```vector name=pdd-task text\n", js, "\n```\n\n")
	}
	testvec.DocEq(t, doc, "pdd-task-signed-bytes", signed.Bytes())
	testvec.DocEq(t, doc, "pdd-task-signature", sig)
	testvec.DocEq(t, doc, "pdd-task", []byte(js))
	if !ed25519.Verify(pub, doc["pdd-task-signed-bytes"], doc["pdd-task-signature"]) {
		t.Fatal("pdd-task-signature does not verify (crypto/ed25519) over pdd-task-signed-bytes")
	}
	for _, i := range []int{0, len("crowdlog pdd task v1"), len(signed.Bytes()) - 1} {
		c := bytes.Clone(doc["pdd-task-signed-bytes"])
		c[i] ^= 1
		if ed25519.Verify(pub, c, doc["pdd-task-signature"]) {
			t.Errorf("pdd-task-signature verifies with byte %d changed", i)
		}
	}

	// the package: the task decoded from the document's JSON, its signed
	// bytes, VerifyTask, SignTask and the JSON again
	var task Task
	if err := json.Unmarshal(doc["pdd-task"], &task); err != nil {
		t.Fatal(err)
	}
	testvec.DocEq(t, doc, "pdd-task-signed-bytes", TaskSignedBytes("health-2006", &task))
	if err := VerifyTask(pub, "health-2006", &task); err != nil {
		t.Error(err)
	}
	if VerifyTask(pub, "health-2007", &task) == nil {
		t.Error("the task verifies for another campaign")
	}
	again := Task{Round: 13210, Group: 7, Member: 0, Members: members, T: 2, Deadline: 13211}
	SignTask(key, "health-2006", &again)
	got, err := json.Marshal(again)
	if err != nil {
		t.Fatal(err)
	}
	testvec.DocEq(t, doc, "pdd-task", got)
}

// TestWireVectorCoordinatorMessages checks the vectors of docs/wire.md
// "PDD control records on `vectors`", "Roster and commitments": the
// bodies the coordinator signs into its control records, assembled by
// hand from the documented layouts (the roots are those of the document's
// pdd-deposit), then Parse and MarshalBinary against them.
func TestWireVectorCoordinatorMessages(t *testing.T) {
	doc := testvec.WireDoc(t, wireDoc)
	be16 := func(n uint16) []byte { return binary.BigEndian.AppendUint16(nil, n) }
	be32 := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	h := sha256.New()
	h.Write([]byte("crowdlog-v1 pdd keyword list\n"))
	for _, w := range []string{"flu", "fever", "cough"} {
		h.Write([]byte(w + "\n"))
	}
	listHash := h.Sum(nil)
	instance := testvec.Fields{
		fl(append([]byte{11}, "health-2006"...), `str8 campaign "health-2006"`),
		fl(be32(13210), "u32 round = 13210 (2006-03-03)"),
		fl(be32(7), "u32 group = 7"),
	}
	// by hand, from "02 ‖ 03 ‖ instance ‖ u16 n ‖ u16 t ‖ i32 deadline ‖
	// i32 recover by ‖ u32 groups ‖ u32 active ‖ u32 grouped ‖ u32 L ‖
	// list hash[32]"
	roster := append(testvec.Fields{fl([]byte{0x02}, "version 2"), fl([]byte{0x03}, "kind 3 (roster)")}, instance...)
	roster = append(roster,
		fl(be16(2), "u16 n = 2 members"), fl(be16(2), "u16 t = 2"),
		fl(be32(13211), "i32 deadline = 13211"), fl(be32(13212), "i32 recover by = 13212"),
		fl(be32(1), "u32 groups = 1"), fl(be32(2), "u32 active = 2"), fl(be32(2), "u32 grouped = 2"),
		fl(be32(3), "u32 L = 3"),
		fl(listHash, `list hash: SHA-256("crowdlog-v1 pdd keyword list\n" ‖ "flu\n" ‖ "fever\n" ‖ "cough\n")`))

	// the roots of member 0's deposit (the document's pdd-deposit)
	var dep struct {
		Body struct {
			Roots [][]byte `json:"roots"`
		} `json:"body"`
	}
	if err := json.Unmarshal(doc["pdd-deposit"], &dep); err != nil || len(dep.Body.Roots) != 2 {
		t.Fatalf("docs/wire.md pdd-deposit: %v, %d roots", err, len(dep.Body.Roots))
	}
	// "02 ‖ 06 ‖ instance ‖ u16 member ‖ u16 n ‖ n × root[32]"
	commit := append(testvec.Fields{fl([]byte{0x02}, "version 2"), fl([]byte{0x06}, "kind 6 (commitments)")}, instance...)
	commit = append(commit, fl(be16(0), "u16 member = 0 (the dealer)"), fl(be16(2), "u16 n = 2 roots"),
		fl(dep.Body.Roots[0], "root_0 (pdd-deposit's roots[0])"), fl(dep.Body.Roots[1], "root_1 (pdd-deposit's roots[1])"))
	if *testvec.PrintWireVectors {
		fmt.Print(roster.Block("pdd-roster"), "\n", commit.Block("pdd-commitments"), "\n")
	}
	testvec.DocEq(t, doc, "pdd-roster", roster.Bytes())
	testvec.DocEq(t, doc, "pdd-commitments", commit.Bytes())

	// the package: its parser and encoders
	in := Instance{Campaign: "health-2006", Round: 13210, Group: 7}
	m, err := Parse(doc["pdd-roster"])
	if err != nil || m.Roster == nil {
		t.Fatalf("Parse(pdd-roster): %+v, %v", m, err)
	}
	want := Roster{Instance: in, N: 2, T: 2, Deadline: 13211, RecoverBy: 13212, Groups: 1, Active: 2, Grouped: 2, L: 3}
	copy(want.ListHash[:], listHash)
	if *m.Roster != want {
		t.Errorf("Parse(pdd-roster): %+v, want %+v", *m.Roster, want)
	}
	rb, _ := want.MarshalBinary()
	testvec.DocEq(t, doc, "pdd-roster", rb)
	m, err = Parse(doc["pdd-commitments"])
	if err != nil || m.Commit == nil || m.Commit.Instance != in || m.Commit.Member != 0 || len(m.Commit.Roots) != 2 {
		t.Fatalf("Parse(pdd-commitments): %+v, %v", m, err)
	}
	c := &Commitments{Instance: in, Member: 0, Roots: [][32]byte{[32]byte(dep.Body.Roots[0]), [32]byte(dep.Body.Roots[1])}}
	cb, _ := c.MarshalBinary()
	testvec.DocEq(t, doc, "pdd-commitments", cb)
}

// TestWireVectorRecoveryAdvance checks the vectors of docs/wire.md "PDD
// client messages", "Recovery and clock-advance requests": the signed
// bytes and the envelopes written by hand from the documented layout
// (the purposes, the zero byte, the bodies' JSON), the signatures checked
// with crypto/ed25519 alone, then ParseRecovery, ParseAdvance, Verify and
// SignMessage against them.
func TestWireVectorRecoveryAdvance(t *testing.T) {
	doc := testvec.WireDoc(t, wireDoc)
	if len(doc["aggregator-sign-seed"]) != 32 {
		t.Fatalf("docs/wire.md aggregator-sign-seed: %d bytes", len(doc["aggregator-sign-seed"]))
	}
	aggKey := ed25519.NewKeyFromSeed(doc["aggregator-sign-seed"])
	opSeed := sha256.Sum256([]byte("crowdlog wire vector operator-sign.key"))
	opSeedF := testvec.Fields{fl(opSeed[:], `Ed25519 seed = SHA-256("crowdlog wire vector operator-sign.key")`)}
	opKey := ed25519.NewKeyFromSeed(opSeed[:])
	b64 := base64.StdEncoding.EncodeToString

	recBody := `{"Instance":{"Campaign":"health-2006","Round":13210,"Group":7},"N":3,"T":2,"Dropped":[2]}`
	recSigned := testvec.Fields{fl([]byte("crowdlog-v2 pdd recovery\x00"), `"crowdlog-v2 pdd recovery" 00`),
		fl([]byte(recBody), "the body's JSON")}
	recSig := ed25519.Sign(aggKey, recSigned.Bytes())
	rec := `{"body":` + recBody + `,"sig":"` + b64(recSig) + `"}`
	advBody := `{"day":13211}`
	advSigned := testvec.Fields{fl([]byte("crowdlog-v2 pdd advance\x00"), `"crowdlog-v2 pdd advance" 00`),
		fl([]byte(advBody), "the body's JSON")}
	advSig := ed25519.Sign(opKey, advSigned.Bytes())
	adv := `{"body":` + advBody + `,"sig":"` + b64(advSig) + `"}`
	if *testvec.PrintWireVectors {
		fmt.Print(recSigned.Block("pdd-recovery-signed-bytes"), "\n", "```vector name=pdd-recovery text\n", rec, "\n```\n\n",
			opSeedF.Block("operator-sign-seed"), "\n", advSigned.Block("pdd-advance-signed-bytes"), "\n",
			"```vector name=pdd-advance text\n", adv, "\n```\n\n")
	}
	testvec.DocEq(t, doc, "pdd-recovery-signed-bytes", recSigned.Bytes())
	testvec.DocEq(t, doc, "pdd-recovery", []byte(rec))
	testvec.DocEq(t, doc, "operator-sign-seed", opSeed[:])
	testvec.DocEq(t, doc, "pdd-advance-signed-bytes", advSigned.Bytes())
	testvec.DocEq(t, doc, "pdd-advance", []byte(adv))
	// a verifier: the body as received between "body": and ,"sig", the
	// signature over purpose ‖ 00 ‖ body; never under another purpose
	for _, v := range []struct {
		name, purpose string
		pub           ed25519.PublicKey
	}{{"pdd-recovery", "recovery", aggKey.Public().(ed25519.PublicKey)}, {"pdd-advance", "advance", opKey.Public().(ed25519.PublicKey)}} {
		var env struct {
			Body json.RawMessage `json:"body"`
			Sig  []byte          `json:"sig"`
		}
		if err := json.Unmarshal(doc[v.name], &env); err != nil {
			t.Fatal(err)
		}
		msg := append([]byte("crowdlog-v2 pdd "+v.purpose+"\x00"), env.Body...)
		if !bytes.Equal(msg, doc[v.name+"-signed-bytes"]) || !ed25519.Verify(v.pub, msg, env.Sig) {
			t.Errorf("%s: the signature does not verify (crypto/ed25519) over %s-signed-bytes", v.name, v.name)
		}
		if ed25519.Verify(v.pub, append([]byte("crowdlog-v2 pdd ping\x00"), env.Body...), env.Sig) {
			t.Errorf("%s: the signature verifies as a ping", v.name)
		}
	}

	// the package: parsers, Verify, SignMessage
	r, s, err := ParseRecovery(doc["pdd-recovery"])
	if err != nil {
		t.Fatal(err)
	}
	if r.Instance != (Instance{Campaign: "health-2006", Round: 13210, Group: 7}) || r.N != 3 || r.T != 2 || len(r.Dropped) != 1 || r.Dropped[0] != 2 {
		t.Errorf("ParseRecovery: %+v", r)
	}
	if err := s.Verify(aggKey.Public().(ed25519.PublicKey), PurposeRecovery); err != nil {
		t.Error(err)
	}
	if s.Verify(aggKey.Public().(ed25519.PublicKey), PurposeAdvance) == nil {
		t.Error("the recovery request verifies as an advance")
	}
	got, err := SignMessage(aggKey, PurposeRecovery, r)
	if err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(got)
	testvec.DocEq(t, doc, "pdd-recovery", gb)
	a, s, err := ParseAdvance(doc["pdd-advance"])
	if err != nil || a.Day != 13211 {
		t.Fatalf("ParseAdvance: %+v, %v", a, err)
	}
	if err := s.Verify(opKey.Public().(ed25519.PublicKey), PurposeAdvance); err != nil {
		t.Error(err)
	}
	got, err = SignMessage(opKey, PurposeAdvance, AdvanceRequest{Day: 13211})
	if err != nil {
		t.Fatal(err)
	}
	gb, _ = json.Marshal(got)
	testvec.DocEq(t, doc, "pdd-advance", gb)
}
