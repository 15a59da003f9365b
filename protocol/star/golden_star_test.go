package star

import (
	"encoding/hex"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// goldenSealing is the fixed artifact of the vectors: ω = SHA-512 of a
// label (any 64 bytes), app "query", epoch "2006-03", FT_u, k = 3.
func goldenSealing(t *testing.T) (Sealing, []byte, UserSecret) {
	omega := testvec.FixedBytes("omega", 64)
	s, err := DeriveSealing(omega, "query", "2006-03", FTu, 3)
	if err != nil {
		t.Fatal(err)
	}
	var u UserSecret
	copy(u[:], testvec.FixedBytes("user", 32))
	return s, omega, u
}

// TestGoldenSealing: what ω determines — tag, commitment, AEAD key — and
// what the user secret adds — FT_u share x, unit id — plus OPRF input,
// hash-mode ω and the Kafka tag bucket.
func TestGoldenSealing(t *testing.T) {
	s, omega, u := goldenSealing(t)
	x := s.ShareX(&u)
	share := s.poly.Eval(x)
	unit := s.UnitID(&u)
	testvec.Golden(t, "sealing", map[string]string{
		"app_text": "query", "epoch_text": "2006-03", "policy": "02", "k": "0003",
		"omega":                           hex.EncodeToString(omega),
		"user_secret":                     hex.EncodeToString(u[:]),
		"tag":                             hex.EncodeToString(s.Tag[:]),
		"commitment":                      hex.EncodeToString(s.Commitment()),
		"commitment_hash":                 func() string { h := vss.CommitmentHash(s.Commitment()); return hex.EncodeToString(h[:]) }(),
		"secret_f0":                       testvec.ScalarHex(s.poly.Secret()),
		"aead_key":                        hex.EncodeToString(s.key[:]),
		"share_x":                         testvec.ScalarHex(share.X),
		"share_y":                         testvec.ScalarHex(share.Y),
		"unit_id":                         hex.EncodeToString(unit[:]),
		"tag_bucket":                      hex.EncodeToString(onion.TagBucket(s.Tag)),
		"oprf_input":                      hex.EncodeToString(oprf.OPRFInput("query", "2006-03", "new york weather")),
		"local_omega_of_new_york_weather": hex.EncodeToString(LocalOmega("query", "2006-03", "new york weather")),
	})
}

// TestGoldenPayloadAndReport: the AEAD plaintext and a whole report with a
// fixed id and nonce; the golden bytes decode back to the same fields and
// open under the golden key.
func TestGoldenPayloadAndReport(t *testing.T) {
	s, _, u := goldenSealing(t)
	p := Payload{Primary: "new york weather", Secondary: "New York  Weather", Unit: s.UnitID(&u)}
	pb, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	testvec.Golden(t, "payload", map[string]string{"primary_text": p.Primary, "secondary_text": p.Secondary,
		"unit": hex.EncodeToString(p.Unit[:]), "encoded": hex.EncodeToString(pb)})

	r, err := s.seal(testvec.FixedReader("report"), &u, s.ShareX(&u), p.Primary, p.Secondary)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	testvec.Golden(t, "report", map[string]string{"id": hex.EncodeToString(r.ID[:]),
		"ciphertext": hex.EncodeToString(r.Ciphertext), "encoded": hex.EncodeToString(rb)})
	if *testvec.Update {
		return
	}
	want := testvec.LoadGolden(t, "report")
	back, err := ParseReport(testvec.MustHex(t, want["encoded"]))
	if err != nil {
		t.Fatalf("golden report does not parse: %v", err)
	}
	pl, err := OpenPayload(s.key, back)
	if err != nil || pl != p {
		t.Fatalf("golden report opens to %+v, %v; want %+v", pl, err, p)
	}
}
