package star

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

// TestDerivationIndependent recomputes the golden sealing's tag, AEAD key
// and the golden report's AEAD opening from the documented byte layout
// (docs/wire.md, "Sealing derivation") with the standard library's HKDF
// (RFC 5869) and SHA-256 and x/crypto's XChaCha20-Poly1305 only — none of
// the code under test — so the golden files pin the derivation rather than
// whatever the code wrote.
func TestDerivationIndependent(t *testing.T) {
	g := testvec.LoadGolden(t, "sealing")
	dec := func(name string) []byte {
		b, err := hex.DecodeString(g[name])
		if err != nil || len(b) == 0 {
			t.Fatalf("golden %s: %q", name, g[name])
		}
		return b
	}
	omega := dec("omega")
	// ctx = u8 len(app) ‖ app ‖ u8 len(epoch) ‖ epoch ‖ u8 policy ‖ u16 k: "query", "2006-03", FT_u, k = 3
	ctx := append([]byte{5}, "query"...)
	ctx = append(append(ctx, 7), "2006-03"...)
	ctx = append(ctx, 0x02, 0x00, 0x03)
	tag, err := hkdf.Key(sha256.New, omega, []byte("crowdlog-v2"), "crowdlog-v2 tag"+string(ctx), 32)
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(tag) != g["tag"] {
		t.Fatalf("tag: independent %x, golden %s", tag, g["tag"])
	}
	// the tag of another context differs (policy FT_a, then k = 5)
	for _, c := range [][]byte{append(ctx[:len(ctx)-3:len(ctx)-3], 0x01, 0x00, 0x03), append(ctx[:len(ctx)-3:len(ctx)-3], 0x02, 0x00, 0x05)} {
		other, _ := hkdf.Key(sha256.New, omega, []byte("crowdlog-v2"), "crowdlog-v2 tag"+string(c), 32)
		if hex.EncodeToString(other) == g["tag"] {
			t.Fatal("two release contexts share a tag")
		}
	}
	// key = SHA-256("crowdlog-v1 key" ‖ tag ‖ f(0))
	h := sha256.New()
	h.Write([]byte("crowdlog-v1 key"))
	h.Write(tag)
	h.Write(dec("secret_f0"))
	key := h.Sum(nil)
	if hex.EncodeToString(key) != g["aead_key"] {
		t.Fatalf("aead key: independent %x, golden %s", key, g["aead_key"])
	}
	// the golden report opens with AD = "crowdlog-v2 report" ‖ ctx ‖ id ‖ tag
	rep := testvec.LoadGolden(t, "report")
	id, _ := hex.DecodeString(rep["id"])
	ct, _ := hex.DecodeString(rep["ciphertext"])
	ad := append(append(append([]byte("crowdlog-v2 report"), ctx...), id...), tag...)
	a, err := chacha20poly1305.NewX(key)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := a.Open(nil, ct[:a.NonceSize()], ct[a.NonceSize():], ad)
	if err != nil {
		t.Fatalf("golden report does not open with the documented associated data: %v", err)
	}
	pay := testvec.LoadGolden(t, "payload")
	if hex.EncodeToString(pt) != pay["encoded"] {
		t.Fatalf("golden report opens to %x, golden payload %s", pt, pay["encoded"])
	}
	// changing any header field breaks the AEAD
	ad[len("crowdlog-v2 report")+1] ^= 1
	if _, err := a.Open(nil, ct[:a.NonceSize()], ct[a.NonceSize():], ad); err == nil {
		t.Fatal("report opened with an altered app in its associated data")
	}
}

// TestDerivationMeaningIndependent: with application options bound
// (Context.Meaning), ctx gains u8 len ‖ meaning; recomputed with the
// standard library's HKDF. Without a meaning the sealing is DeriveSealing's.
func TestDerivationMeaningIndependent(t *testing.T) {
	omega := testvec.FixedBytes("omega", 64)
	s, err := DeriveSealingIn(omega, Context{App: "click", Meaning: "url-level=full", Epoch: "2006-03", Policy: FTu, K: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := append([]byte{5}, "click"...)
	ctx = append(append(ctx, 7), "2006-03"...)
	ctx = append(ctx, 0x02, 0x00, 0x03, 14)
	ctx = append(ctx, "url-level=full"...)
	tag, _ := hkdf.Key(sha256.New, omega, []byte("crowdlog-v2"), "crowdlog-v2 tag"+string(ctx), 32)
	if hex.EncodeToString(tag) != hex.EncodeToString(s.Tag[:]) {
		t.Fatalf("tag with meaning: independent %x, code %x", tag, s.Tag)
	}
	plain, _ := DeriveSealing(omega, "click", "2006-03", FTu, 3)
	empty, _ := DeriveSealingIn(omega, Context{App: "click", Epoch: "2006-03", Policy: FTu, K: 3})
	if plain.Tag != empty.Tag || plain.Tag == s.Tag {
		t.Fatal("an empty meaning must derive DeriveSealing's tag, and a meaning another one")
	}
}
