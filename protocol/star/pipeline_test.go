package star

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// TestPipelineDigestBound: a pipeline digest changes the tag and the
// polynomial (shares of two definitions never combine), travels in the
// report (version 3, digest after k, round trip), is bound by the AEAD (a
// report relabelled to another digest does not open under its group's
// key) and a version-3 report with a zero digest is malformed.
func TestPipelineDigestBound(t *testing.T) {
	omega := bytes.Repeat([]byte{7}, 64)
	d1, d2 := sha256.Sum256([]byte("pipeline one")), sha256.Sum256([]byte("pipeline two"))
	base := Context{App: "query", Epoch: "e1", Policy: FTu, K: 3}
	none, _ := DeriveSealingIn(omega, base)
	c1, c2 := base, base
	c1.Pipeline, c2.Pipeline = d1, d2
	s1, err := DeriveSealingIn(omega, c1)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := DeriveSealingIn(omega, c2)
	if s1.Tag == none.Tag || s1.Tag == s2.Tag || bytes.Equal(s1.Commitment(), s2.Commitment()) {
		t.Fatal("the pipeline digest does not separate tags and polynomials")
	}
	// an app meaning and a digest: the meaning still counts
	cm := c1
	cm.Meaning = "url-level=domain"
	if sm, _ := DeriveSealingIn(omega, cm); sm.Tag == s1.Tag {
		t.Fatal("meaning ignored when a digest is set")
	}
	var shares []vss.Share
	var reps []*Report
	for range 3 {
		u, _ := NewUserSecret()
		r, err := s1.Seal(&u, "weather", "Weather")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := r.MarshalBinary()
		if b[0] != ReportVersionPipeline {
			t.Fatalf("version byte %d, want %d", b[0], ReportVersionPipeline)
		}
		back, err := ParseReport(b)
		if err != nil || back.Pipeline != d1 {
			t.Fatalf("round trip: %v, digest %x", err, back.Pipeline)
		}
		if b2, _ := back.MarshalBinary(); !bytes.Equal(b, b2) {
			t.Fatal("re-encoding differs")
		}
		shares = append(shares, back.Share)
		reps = append(reps, back)
	}
	sec, err := vss.Recover(shares, 3)
	if err != nil {
		t.Fatal(err)
	}
	key := KeyFromSecret(reps[0].Tag, sec)
	if _, err := OpenPayload(key, reps[0]); err != nil {
		t.Fatalf("open: %v", err)
	}
	forged := *reps[0]
	forged.Pipeline = d2
	if _, err := OpenPayload(key, &forged); err == nil {
		t.Fatal("a report relabelled to another pipeline digest opened")
	}
	forged.Pipeline = [32]byte{}
	if _, err := OpenPayload(key, &forged); err == nil {
		t.Fatal("a report stripped of its pipeline digest opened")
	}
	// every way of sealing carries the digest: the ARC seal and SealAt too
	ra, err := s1.SealARC([]byte("an ARC presentation tag"), "weather", "Weather")
	if err != nil || ra.Pipeline != d1 {
		t.Fatalf("SealARC: digest %x, %v", ra.Pipeline, err)
	}
	if _, err := OpenPayload(key, ra); err != nil {
		t.Fatalf("SealARC's report does not open under the group's key: %v", err)
	}
	rx, err := s1.SealAt(reps[0].Share.X, [16]byte{1}, "weather", "Weather")
	if err != nil || rx.Pipeline != d1 {
		t.Fatalf("SealAt: digest %x, %v", rx.Pipeline, err)
	}
	// without a digest: version 2, the layout before
	u, _ := NewUserSecret()
	r0, _ := none.Seal(&u, "weather", "Weather")
	b0, _ := r0.MarshalBinary()
	if b0[0] != protocol.Version {
		t.Fatalf("a report without a digest has version %d", b0[0])
	}
	// version 3 with an all-zero digest is malformed
	b, _ := reps[0].MarshalBinary()
	z := append([]byte{}, b...)
	off := 1 + 1 + len("query") + 1 + len("e1") + 1 + 2
	copy(z[off:off+32], make([]byte, 32))
	if _, err := ParseReport(z); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("zero digest in a version-3 report: %v", err)
	}
}
