package onion

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

// TestRFC9180Vectors runs RFC 9180 A.2.1 (our Suite, Base mode) through
// circl's HPKE with the RFC's ikmR/ikmE: the derived keys, enc and the
// ciphertexts of consecutive seals must match, and our Suite's receiver
// must open them.
func TestRFC9180Vectors(t *testing.T) {
	var v struct {
		Mode, KemID, KdfID, AeadID        int
		Info, IkmR, IkmE, SkRm, PkRm, Enc string
		Encryptions                       []struct{ Aad, Ct, Pt string }
	}
	testvec.ReadJSON(t, "testdata/rfc9180-x25519-sha256-chacha20poly1305-base.json", &v)
	pk, sk := kemScheme.DeriveKeyPair(testvec.MustHex(t, v.IkmR))
	if b, _ := pk.MarshalBinary(); hex.EncodeToString(b) != v.PkRm {
		t.Fatalf("pkRm = %x, RFC %s", b, v.PkRm)
	}
	if b, _ := sk.MarshalBinary(); hex.EncodeToString(b) != v.SkRm {
		t.Fatalf("skRm = %x, RFC %s", b, v.SkRm)
	}
	snd, err := Suite.NewSender(pk, testvec.MustHex(t, v.Info))
	if err != nil {
		t.Fatal(err)
	}
	enc, sealer, err := snd.Setup(bytes.NewReader(testvec.MustHex(t, v.IkmE)))
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(enc) != v.Enc {
		t.Fatalf("enc = %x, RFC %s", enc, v.Enc)
	}
	rcv, _ := Suite.NewReceiver(sk, testvec.MustHex(t, v.Info))
	opener, err := rcv.Setup(enc)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range v.Encryptions {
		ct, err := sealer.Seal(testvec.MustHex(t, e.Pt), testvec.MustHex(t, e.Aad))
		if err != nil || hex.EncodeToString(ct) != e.Ct {
			t.Fatalf("encryption %d: ct = %x (%v), RFC %s", i, ct, err, e.Ct)
		}
		pt, err := opener.Open(testvec.MustHex(t, e.Ct), testvec.MustHex(t, e.Aad))
		if err != nil || hex.EncodeToString(pt) != e.Pt {
			t.Fatalf("encryption %d: open = %x (%v)", i, pt, err)
		}
	}
}
