package star

import (
	"crypto/rand"
	"errors"
	"testing"

	circloprf "github.com/cloudflare/circl/oprf"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/internal/oprftest"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

func TestSealRecoverOpen(t *testing.T) {
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	const k = 5
	for _, pol := range []Policy{FTa, FTu} {
		var reports []*Report
		for u := 0; u < k; u++ {
			user, _ := NewUserSecret()
			// every client evaluates the OPRF itself: blinding differs, ω must not
			s, err := DeriveSealing(oprftest.OmegaFor(t, key, "query", "e1", "weather"), "query", "e1", pol, k)
			if err != nil {
				t.Fatal(err)
			}
			for rep := 0; rep < 2; rep++ {
				r, err := s.Seal(&user, "weather", "Weather")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := r.MarshalBinary()
				r2, err := ParseReport(b)
				if err != nil {
					t.Fatal(err)
				}
				reports = append(reports, r2)
			}
		}
		// all reports share one tag
		for _, r := range reports {
			if r.Tag != reports[0].Tag {
				t.Fatalf("%v: tags differ across clients", pol)
			}
		}
		distinct := map[string]vss.Share{}
		for _, r := range reports {
			x, _ := r.Share.X.MarshalBinary()
			distinct[string(x)] = r.Share
		}
		wantDistinct := k
		if pol == FTa {
			wantDistinct = 2 * k
		}
		if len(distinct) != wantDistinct {
			t.Fatalf("%v: %d distinct shares, want %d", pol, len(distinct), wantDistinct)
		}
		var shares []vss.Share
		for _, s := range distinct {
			shares = append(shares, s)
		}
		if _, err := vss.Recover(shares[:k-1], k); !errors.Is(err, vss.ErrThreshold) {
			t.Fatalf("k-1 shares: err %v, want ErrThreshold", err)
		}
		sec, err := vss.Recover(shares, k)
		if err != nil {
			t.Fatal(err)
		}
		aead := KeyFromSecret(reports[0].Tag, sec)
		for _, r := range reports {
			p, err := OpenPayload(aead, r)
			if err != nil {
				t.Fatalf("%v: open: %v", pol, err)
			}
			if p.Primary != "weather" || p.Secondary != "Weather" {
				t.Fatalf("payload %+v", p)
			}
		}
		// k-1 genuine shares plus a wrong one give a key that fails the AEAD
		bad := append([]vss.Share{}, shares[:k-1]...)
		bad = append(bad, vss.Share{X: protocol.G.RandomNonZeroScalar(rand.Reader), Y: protocol.G.RandomScalar(rand.Reader)})
		sec, _ = vss.Recover(bad, k)
		if _, err := OpenPayload(KeyFromSecret(reports[0].Tag, sec), reports[0]); err == nil {
			t.Fatal("poisoned share opened the report")
		}
		// duplicate x is an error, not a panic
		if _, err := vss.Recover([]vss.Share{shares[0], shares[0], shares[1], shares[2], shares[3]}, k); err == nil {
			t.Fatal("duplicate shares accepted")
		}
	}
}

func TestDifferentArtifactsDifferentTags(t *testing.T) {
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	a, _ := DeriveSealing(oprftest.OmegaFor(t, key, "query", "e1", "a"), "query", "e1", FTu, 3)
	b, _ := DeriveSealing(oprftest.OmegaFor(t, key, "query", "e1", "b"), "query", "e1", FTu, 3)
	key2, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	c, _ := DeriveSealing(oprftest.OmegaFor(t, key2, "query", "e2", "a"), "query", "e2", FTu, 3)
	if a.Tag == b.Tag || a.Tag == c.Tag {
		t.Fatal("tags collide across artifacts or epochs")
	}
}

func BenchmarkSealReport(b *testing.B) {
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	s, _ := DeriveSealing(oprftest.OmegaFor(b, key, "query", "e", "weather"), "query", "e", FTu, 5)
	u, _ := NewUserSecret()
	for b.Loop() {
		if _, err := s.Seal(&u, "weather", "Weather"); err != nil {
			b.Fatal(err)
		}
	}
}
