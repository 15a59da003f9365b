package token

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/cloudflare/circl/oprf"

	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

// The vectors of docs/wire.md "Prio3 report and helper token": the
// issuers' KeysResponse with its optional trailing Prio3 keys. The test
// derives the keys with circl's RFC 9497 DeriveKeyPair (not DeriveKey)
// and assembles the responses by hand from the documented layout, compares
// them with the document's blocks, then checks DeriveKey,
// KeysResponse.MarshalBinary and ParseKeysResponse against them. `go test
// ./protocol/token -run Vector -wirevec.print` prints the blocks.

const wireDoc = "../../docs/wire.md"

func TestWireVectorKeysResponsePrio3(t *testing.T) {
	doc := testvec.WireDoc(t, wireDoc)
	fl := testvec.F
	const epoch = "health-2006/13210"
	pk := func(label string, kind byte) (seed, pub []byte) {
		s := sha256.Sum256([]byte(label))
		info := append([]byte("PrivacyPass\x00"), kind)
		sk, err := oprf.DeriveKey(oprf.SuiteRistretto255, oprf.VerifiableMode, s[:], append(info, epoch...))
		if err != nil {
			t.Fatal(err)
		}
		p, err := sk.Public().MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return s[:], p
	}
	helperSeed, helperPub := pk("crowdlog wire vector prio3-helper-token.seed", 4)
	leaderSeed, leaderPub := pk("crowdlog wire vector prio3-leader-token.seed", 5)

	// by hand: 02 ‖ 00 ‖ str8(epoch) ‖ str8(randomness pkI) ‖ str8(report
	// pkI) ‖ str16(ARC key) ‖ str8(prio3-helper key) [‖ str8(prio3-leader key)]
	head := testvec.Fields{
		fl([]byte{0x02}, "version 2"), fl([]byte{0x00}, "status 0 (ok)"),
		fl(append([]byte{byte(len(epoch))}, epoch...), `str8 epoch "health-2006/13210" (campaign/day)`),
		fl([]byte{0x00}, "str8 randomness key: empty (not this issuer's)"),
		fl([]byte{0x00}, "str8 report key: empty"),
		fl([]byte{0x00, 0x00}, "str16 ARC key: empty"),
	}
	helper := append(append(testvec.Fields{}, head...),
		fl([]byte{32}, "u8 len = 32"), fl(helperPub, "prio3-helper key pkI (kind 4)"))
	leader := append(append(testvec.Fields{}, head...),
		fl([]byte{0x00}, "str8 prio3-helper key: empty"),
		fl([]byte{32}, "u8 len = 32"), fl(leaderPub, "prio3-leader key pkI (kind 5)"))
	seeds := testvec.Fields{fl(helperSeed, `helper operator's seed = SHA-256("crowdlog wire vector prio3-helper-token.seed")`),
		fl(leaderSeed, `leader operator's seed = SHA-256("crowdlog wire vector prio3-leader-token.seed")`)}
	if *testvec.PrintWireVectors {
		fmt.Print(seeds.Block("prio3-token-seeds"), "\n", helper.Block("issuer-keys-response-prio3-helper"), "\n",
			leader.Block("issuer-keys-response-prio3-leader"), "\n")
	}
	testvec.DocEq(t, doc, "prio3-token-seeds", seeds.Bytes())
	testvec.DocEq(t, doc, "issuer-keys-response-prio3-helper", helper.Bytes())
	testvec.DocEq(t, doc, "issuer-keys-response-prio3-leader", leader.Bytes())

	// the package: DeriveKey, the encoder, the parser
	hk, err := DeriveKey(KindPrio3Helper, epoch, helperSeed)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := DeriveKey(KindPrio3Leader, epoch, leaderSeed)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*KeysResponse{
		"issuer-keys-response-prio3-helper": {Epoch: epoch, Prio3Helper: hk.Public()},
		"issuer-keys-response-prio3-leader": {Epoch: epoch, Prio3Leader: lk.Public()},
	} {
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		testvec.DocEq(t, doc, name, b)
		p, err := ParseKeysResponse(doc[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Epoch != epoch || !bytes.Equal(p.Prio3Helper, r.Prio3Helper) || !bytes.Equal(p.Prio3Leader, r.Prio3Leader) ||
			len(p.Randomness)+len(p.Report)+len(p.ARC) != 0 {
			t.Errorf("%s parses to %+v", name, p)
		}
	}
}
