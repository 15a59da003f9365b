package protocol

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"

	"github.com/cloudflare/circl/oprf"
)

// TestFeldman: every client of an artifact sends the same commitment; its
// shares verify, a tampered share does not, the recovered secret matches
// C_0 and a secret recovered through a tampered share does not.
func TestFeldman(t *testing.T) {
	key, _ := oprf.GenerateKey(OPRFSuite, rand.Reader)
	for _, k := range []int{1, 2, 5, 17} {
		t.Run(fmt.Sprint("k=", k), func(t *testing.T) {
			var reports []*Report
			for u := 0; u < k; u++ {
				s, _ := DeriveSealing(omegaFor(t, key, "query", "e1", "weather"), "query", "e1", FTu, k)
				user, _ := NewUserSecret()
				r, _ := s.Seal(&user, "weather", "weather")
				b, _ := r.MarshalBinary()
				if reports = append(reports, nil); true {
					reports[u], _ = ParseReport(b)
				}
				if len(r.Commitment) != CommitmentSize(k) || !bytes.Equal(reports[u].Commitment, reports[0].Commitment) {
					t.Fatal("honest clients of one artifact must send one commitment")
				}
			}
			c, err := NewCommitment(reports[0].Commitment, k)
			if err != nil {
				t.Fatal(err)
			}
			var shares []Share
			for _, r := range reports {
				if ok, err := c.VerifyShare(r.Share); !ok || err != nil {
					t.Fatalf("honest share rejected (%v)", err)
				}
				shares = append(shares, r.Share)
			}
			sec, _ := Recover(shares, k)
			if ok, _ := c.VerifySecret(sec); !ok {
				t.Fatal("recovered secret does not match C_0")
			}
			bad := Share{X: shares[0].X, Y: G.NewScalar().Add(shares[0].Y, G.NewScalar().SetUint64(1))}
			if ok, _ := c.VerifyShare(bad); ok {
				t.Fatal("tampered share verified")
			}
			shares[0] = bad
			sec, _ = Recover(shares, k)
			if ok, _ := c.VerifySecret(sec); ok {
				t.Fatal("secret recovered through a tampered share matches C_0")
			}
			// another artifact's commitment rejects this artifact's shares
			s2, _ := DeriveSealing(omegaFor(t, key, "query", "e1", "other"), "query", "e1", FTu, k)
			c2, _ := NewCommitment(s2.Commitment(), k)
			if ok, _ := c2.VerifyShare(reports[0].Share); ok {
				t.Fatal("share verified against another polynomial's commitment")
			}
		})
	}
	// invalid points fail verification with an error, never a panic
	junk := bytes.Repeat([]byte{0xff}, CommitmentSize(3))
	c, _ := NewCommitment(junk, 3)
	if ok, err := c.VerifyShare(Share{X: G.RandomNonZeroScalar(rand.Reader), Y: G.RandomScalar(rand.Reader)}); ok || !errors.Is(err, ErrMalformed) {
		t.Fatalf("junk commitment: %v %v", ok, err)
	}
	if _, err := NewCommitment(junk, 4); !errors.Is(err, ErrMalformed) {
		t.Fatal("commitment of the wrong length accepted")
	}
}

// BenchmarkVerifyShare: Feldman check of one share (one k-point
// multi-scalar multiplication and one fixed-base multiplication). warm: the
// commitment's points decoded and their tables built once, before the loop
// (what the aggregator pays per share of a group it already checked);
// cold: a fresh Commitment every call, so decoding the k points and
// building their tables is included.
func BenchmarkVerifyShare(b *testing.B) {
	for _, k := range []int{2, 5, 10} {
		key, _ := oprf.GenerateKey(OPRFSuite, rand.Reader)
		s, _ := DeriveSealing(omegaFor(b, key, "query", "e", "weather"), "query", "e", FTa, k)
		u, _ := NewUserSecret()
		r, _ := s.Seal(&u, "weather", "weather")
		b.Run(fmt.Sprint("k=", k, "/warm"), func(b *testing.B) {
			c, _ := NewCommitment(r.Commitment, k)
			c.VerifyShare(r.Share)
			for b.Loop() {
				if ok, _ := c.VerifyShare(r.Share); !ok {
					b.Fatal("rejected")
				}
			}
		})
		b.Run(fmt.Sprint("k=", k, "/cold"), func(b *testing.B) {
			for b.Loop() {
				c, _ := NewCommitment(r.Commitment, k)
				if ok, _ := c.VerifyShare(r.Share); !ok {
					b.Fatal("rejected")
				}
			}
		})
	}
}

// BenchmarkVerifySecret: a recovered secret against C_0 (decode C_0 and one
// fixed-base multiplication); the aggregator's former optimistic check.
func BenchmarkVerifySecret(b *testing.B) {
	key, _ := oprf.GenerateKey(OPRFSuite, rand.Reader)
	s, _ := DeriveSealing(omegaFor(b, key, "query", "e", "weather"), "query", "e", FTa, 5)
	secret := s.poly.Secret()
	commit := s.Commitment()
	for b.Loop() {
		c, _ := NewCommitment(commit, 5)
		if ok, _ := c.VerifySecret(secret); !ok {
			b.Fatal("rejected")
		}
	}
}
