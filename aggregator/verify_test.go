package aggregator

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// TestEveryDecryptedShareVerified: reports of one artifact arrive in random
// order: k honest users, and 3 more users whose reports are each tampered
// (y changed) with probability 1/2, before and after the threshold, under
// FT_a (every report a new share) and FT_u (3 reports per user, a tampered
// repeat keeps its user's x). Ground truth from the raw data: no tampered
// report is decrypted, every report of the k honest users is, and every
// report is either decrypted or dropped as "bad-share". (Under FT_u an
// untampered repeat of a user whose share was tampered may go with it.)
func TestEveryDecryptedShareVerified(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	for _, pol := range []star.Policy{star.FTa, star.FTu} {
		for _, k := range []int{1, 2, 5} {
			for trial := 0; trial < 4; trial++ {
				t.Run(fmt.Sprintf("%v/k=%d/%d", pol, k, trial), func(t *testing.T) {
					p := NewPartition(0, 1, []*onion.KeyPair{key})
					s := sealing(t, "weather", pol, k)
					type sent struct {
						r              *star.Report
						tampered, core bool
					}
					var msgs []sent
					for u := 0; u < k+3; u++ {
						sec, _ := star.NewUserSecret()
						for rep := 0; rep < 3; rep++ {
							r, _ := s.Seal(&sec, "weather", "weather")
							tampered := u >= k && mrand.IntN(2) == 0
							if tampered {
								r.Share.Y = protocol.G.NewScalar().Add(r.Share.Y, protocol.G.NewScalar().SetUint64(1))
							}
							msgs = append(msgs, sent{r, tampered, u < k})
						}
					}
					mrand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
					opened := map[string]bool{}
					for _, m := range msgs {
						for _, d := range p.Apply(Message{Value: wrap(t, key, m.r)}) {
							opened[d.Report] = true
						}
					}
					for _, m := range msgs {
						o := opened[hex.EncodeToString(m.r.ID[:])]
						if m.tampered && o {
							t.Fatal("a report with a tampered share was decrypted")
						}
						if m.core && !o {
							t.Fatal("an honest user's report was not decrypted")
						}
					}
					if p.Stats.Recoveries != 1 || int64(len(opened))+p.Stats.Dropped["bad-share"] != int64(len(msgs)) ||
						len(p.Stats.Dropped) > 1 {
						t.Fatalf("recoveries %d, opened %d, dropped %v of %d reports", p.Stats.Recoveries, len(opened), p.Stats.Dropped, len(msgs))
					}
				})
			}
		}
	}
}

// TestLaterTamperedShare: after the key is recovered, a report whose share
// is not on the committed polynomial is dropped, not decrypted, even though
// its ciphertext would open; honest later reports still open.
func TestLaterTamperedShare(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	const k = 3
	p := NewPartition(0, 1, []*onion.KeyPair{key})
	s := sealing(t, "weather", star.FTa, k)
	u, _ := star.NewUserSecret()
	opened := 0
	for i := 0; i < k; i++ {
		r, _ := s.Seal(&u, "weather", "weather")
		opened += len(p.Apply(Message{Value: wrap(t, key, r)}))
	}
	if opened != k || p.Stats.FailedRecover != 0 {
		t.Fatalf("honest threshold: opened %d, failed %d", opened, p.Stats.FailedRecover)
	}
	for i := 0; i < 4; i++ {
		r, _ := s.Seal(&u, "weather", "weather")
		if i%2 == 1 {
			r.Share.Y = protocol.G.RandomScalar(rand.Reader)
		}
		n := len(p.Apply(Message{Value: wrap(t, key, r)}))
		if want := 1 - i%2; n != want {
			t.Fatalf("later report %d (tampered=%v): %d items", i, i%2 == 1, n)
		}
	}
	if p.Stats.Dropped["bad-share"] != 2 || p.Stats.Decrypted != k+2 || p.Stats.Reports != k+2 {
		t.Fatalf("dropped %v, decrypted %d, reports %d", p.Stats.Dropped, p.Stats.Decrypted, p.Stats.Reports)
	}
}

// TestTamperedRepeat: under FT_u a user repeats its share; a repeat with the
// same x but another y, pending when the group opens, is dropped and its
// report not decrypted.
func TestTamperedRepeat(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	const k = 3
	p := NewPartition(0, 1, []*onion.KeyPair{key})
	s := sealing(t, "weather", star.FTu, k)
	var out []protocol.Decrypted
	for u := 0; u < k; u++ {
		sec, _ := star.NewUserSecret()
		r, _ := s.Seal(&sec, "weather", "weather")
		out = append(out, p.Apply(Message{Value: wrap(t, key, r)})...)
		if u == 0 { // a repeat of user 0 with a tampered y
			r2, _ := s.Seal(&sec, "weather", "weather")
			r2.Share.Y = protocol.G.NewScalar().Add(r2.Share.Y, protocol.G.NewScalar().SetUint64(1))
			out = append(out, p.Apply(Message{Value: wrap(t, key, r2)})...)
		}
	}
	if len(out) != k || p.Stats.Dropped["bad-share"] != 1 || p.Stats.Reports != k {
		t.Fatalf("opened %d (want %d), dropped %v, reports %d", len(out), k, p.Stats.Dropped, p.Stats.Reports)
	}
}
