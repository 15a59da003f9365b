package star

import (
	"crypto/sha256"
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

// goldenPipelineCanonical is the canonical text of the pipeline definition
// of the vectors (pipelines/pipeline.Canonical of app query, no options,
// ft-u with k = 3), written out by hand; its SHA-256 is the digest.
const goldenPipelineCanonical = "crowdlog-v1 pipeline\napp=query\noptions=\npolicy=ft-u\nshamir_k=3\n"

// TestGoldenReportPipeline: the sealing of goldenSealing's ω and context
// bound to a pipeline digest, and the report of star-report's payload
// (primary, secondary; the unit id of the new tag) sealed under it with
// star-report's fixed id and nonce: version 3, the digest after k.
func TestGoldenReportPipeline(t *testing.T) {
	omega := testvec.FixedBytes("omega", 64)
	digest := sha256.Sum256([]byte(goldenPipelineCanonical))
	c := Context{App: "query", Epoch: "2006-03", Policy: FTu, K: 3, Pipeline: digest}
	s, err := DeriveSealingIn(omega, c)
	if err != nil {
		t.Fatal(err)
	}
	var u UserSecret
	copy(u[:], testvec.FixedBytes("user", 32))
	x := s.ShareX(&u)
	unit := s.UnitID(&u)
	p := Payload{Primary: "new york weather", Secondary: "New York  Weather", Unit: unit}
	pb, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.seal(testvec.FixedReader("report"), &u, x, p.Primary, p.Secondary)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx := append(contextBytes(c.App, c.Epoch, c.Policy, c.K), 0)
	ctx = append(ctx, digest[:]...)
	testvec.Golden(t, "report-pipeline", map[string]string{
		"canonical_text": goldenPipelineCanonical,
		"pipeline":       hex.EncodeToString(digest[:]),
		"ctx":            hex.EncodeToString(ctx),
		"tag":            hex.EncodeToString(s.Tag[:]),
		"commitment":     hex.EncodeToString(s.Commitment()),
		"secret_f0":      testvec.ScalarHex(s.poly.Secret()),
		"aead_key":       hex.EncodeToString(s.key[:]),
		"share_x":        testvec.ScalarHex(r.Share.X),
		"share_y":        testvec.ScalarHex(r.Share.Y),
		"unit_id":        hex.EncodeToString(unit[:]),
		"payload":        hex.EncodeToString(pb),
		"id":             hex.EncodeToString(r.ID[:]),
		"ciphertext":     hex.EncodeToString(r.Ciphertext),
		"encoded":        hex.EncodeToString(rb),
	})
	if *testvec.Update {
		return
	}
	want := testvec.LoadGolden(t, "report-pipeline")
	back, err := ParseReport(testvec.MustHex(t, want["encoded"]))
	if err != nil {
		t.Fatalf("golden pipeline report does not parse: %v", err)
	}
	if back.Pipeline != digest || back.Tag != s.Tag {
		t.Fatalf("golden pipeline report carries digest %x, tag %x; want %x, %x", back.Pipeline, back.Tag, digest, s.Tag)
	}
	pl, err := OpenPayload(s.key, back)
	if err != nil || pl != p {
		t.Fatalf("golden pipeline report opens to %+v, %v; want %+v", pl, err, p)
	}
}
