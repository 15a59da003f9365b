package blind

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ed25519"
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
