package star

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"

	circloprf "github.com/cloudflare/circl/oprf"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/internal/oprftest"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// TestFeldman: every client of an artifact sends the same commitment; its
// shares verify, a tampered share does not, the recovered secret matches
// C_0 and a secret recovered through a tampered share does not.
func TestFeldman(t *testing.T) {
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	for _, k := range []int{1, 2, 5, 17} {
		t.Run(fmt.Sprint("k=", k), func(t *testing.T) {
			var reports []*Report
			for u := 0; u < k; u++ {
				s, _ := DeriveSealing(oprftest.OmegaFor(t, key, "query", "e1", "weather"), "query", "e1", FTu, k)
				user, _ := NewUserSecret()
				r, _ := s.Seal(&user, "weather", "weather")
				b, _ := r.MarshalBinary()
				if reports = append(reports, nil); true {
					reports[u], _ = ParseReport(b)
				}
				if len(r.Commitment) != vss.CommitmentSize(k) || !bytes.Equal(reports[u].Commitment, reports[0].Commitment) {
					t.Fatal("honest clients of one artifact must send one commitment")
				}
			}
			c, err := vss.NewCommitment(reports[0].Commitment, k)
			if err != nil {
				t.Fatal(err)
			}
			var shares []vss.Share
			for _, r := range reports {
				if ok, err := c.VerifyShare(r.Share); !ok || err != nil {
					t.Fatalf("honest share rejected (%v)", err)
				}
				shares = append(shares, r.Share)
			}
			sec, _ := vss.Recover(shares, k)
			if ok, _ := c.VerifySecret(sec); !ok {
				t.Fatal("recovered secret does not match C_0")
			}
			bad := vss.Share{X: shares[0].X, Y: protocol.G.NewScalar().Add(shares[0].Y, protocol.G.NewScalar().SetUint64(1))}
			if ok, _ := c.VerifyShare(bad); ok {
				t.Fatal("tampered share verified")
			}
			shares[0] = bad
			sec, _ = vss.Recover(shares, k)
			if ok, _ := c.VerifySecret(sec); ok {
				t.Fatal("secret recovered through a tampered share matches C_0")
			}
			// another artifact's commitment rejects this artifact's shares
			s2, _ := DeriveSealing(oprftest.OmegaFor(t, key, "query", "e1", "other"), "query", "e1", FTu, k)
			c2, _ := vss.NewCommitment(s2.Commitment(), k)
			if ok, _ := c2.VerifyShare(reports[0].Share); ok {
				t.Fatal("share verified against another polynomial's commitment")
			}
		})
	}
	// invalid points fail verification with an error, never a panic
	junk := bytes.Repeat([]byte{0xff}, vss.CommitmentSize(3))
	c, _ := vss.NewCommitment(junk, 3)
	if ok, err := c.VerifyShare(vss.Share{X: protocol.G.RandomNonZeroScalar(rand.Reader), Y: protocol.G.RandomScalar(rand.Reader)}); ok || !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("junk commitment: %v %v", ok, err)
	}
	if _, err := vss.NewCommitment(junk, 4); !errors.Is(err, protocol.ErrMalformed) {
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
		key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
		s, _ := DeriveSealing(oprftest.OmegaFor(b, key, "query", "e", "weather"), "query", "e", FTa, k)
		u, _ := NewUserSecret()
		r, _ := s.Seal(&u, "weather", "weather")
		b.Run(fmt.Sprint("k=", k, "/warm"), func(b *testing.B) {
			c, _ := vss.NewCommitment(r.Commitment, k)
			c.VerifyShare(r.Share)
			for b.Loop() {
				if ok, _ := c.VerifyShare(r.Share); !ok {
					b.Fatal("rejected")
				}
			}
		})
		b.Run(fmt.Sprint("k=", k, "/cold"), func(b *testing.B) {
			for b.Loop() {
				c, _ := vss.NewCommitment(r.Commitment, k)
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
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	s, _ := DeriveSealing(oprftest.OmegaFor(b, key, "query", "e", "weather"), "query", "e", FTa, 5)
	secret := s.poly.Secret()
	commit := s.Commitment()
	for b.Loop() {
		c, _ := vss.NewCommitment(commit, 5)
		if ok, _ := c.VerifySecret(secret); !ok {
			b.Fatal("rejected")
		}
	}
}
