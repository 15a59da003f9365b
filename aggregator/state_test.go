package aggregator

import (
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
)

func wrap(t testing.TB, key *protocol.KeyPair, r *protocol.Report) []byte {
	t.Helper()
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	l, err := protocol.SealLayer(key.PublicKey(), protocol.Hop{Kind: protocol.HopDeliver}, b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func sealing(t testing.TB, artifact string, pol protocol.Policy, k int) protocol.Sealing {
	omega := make([]byte, 64)
	copy(omega, artifact) // stands in for the OPRF output: one ω per artifact
	s, err := protocol.DeriveSealing(omega, "query", "e1", pol, k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestThresholdFTu: artifact i is reported by i users, each twice; exactly the
// artifacts with at least k users open, with every report as an impression.
func TestThresholdFTu(t *testing.T) {
	key, _ := protocol.GenerateKeyPair(1)
	const k = 4
	p := NewPartition(0, 1, []*protocol.KeyPair{key})
	got := map[string]int{}
	var dup []byte
	for users := 1; users <= 6; users++ {
		art := fmt.Sprintf("artifact-%d", users)
		s := sealing(t, art, protocol.FTu, k)
		for u := 0; u < users; u++ {
			sec, _ := protocol.NewUserSecret()
			for rep := 0; rep < 2; rep++ {
				r, _ := s.Seal(&sec, art, art)
				l := wrap(t, key, r)
				dup = l
				for _, d := range p.Apply(Message{Value: l}) {
					got[d.Item]++
				}
			}
		}
	}
	// a replayed report (relay redelivery) is dropped
	if out := p.Apply(Message{Value: dup}); len(out) != 0 || p.Stats.Dropped["duplicate"] != 1 {
		t.Fatalf("duplicate not dropped: %v %v", out, p.Stats.Dropped)
	}
	for users := 1; users <= 6; users++ {
		art := fmt.Sprintf("artifact-%d", users)
		want := 0
		if users >= k {
			want = 2 * users
		}
		if got[art] != want {
			t.Errorf("%s: %d impressions, want %d", art, got[art], want)
		}
	}
	out := p.Apply(Message{Control: true, Value: []byte(`{"app":"query","epoch":"e1","partitions":1}`)})
	if len(out) != 2 || out[0].Kind != protocol.KindSummary || out[1].Kind != protocol.KindClosed {
		t.Fatalf("close: %+v", out)
	}
	// three undecrypted tags: 1, 2, 3 users with 2, 4, 6 reports
	want := map[[2]uint64]uint64{{2, 1}: 1, {4, 2}: 1, {6, 3}: 1}
	for _, r := range out[0].Summary {
		if want[[2]uint64{r.Reports, r.Shares}] != r.Tags {
			t.Errorf("summary row %+v unexpected", r)
		}
	}
	if len(out[0].Summary) != 3 || p.PendingTags() != 0 {
		t.Fatalf("summary %+v, pending %d", out[0].Summary, p.PendingTags())
	}
}

// TestPoisonedShare: a bad share among the first k does not block the tag.
func TestPoisonedShare(t *testing.T) {
	key, _ := protocol.GenerateKeyPair(1)
	const k = 3
	p := NewPartition(0, 1, []*protocol.KeyPair{key})
	s := sealing(t, "weather", protocol.FTa, k)
	u, _ := protocol.NewUserSecret()
	r, _ := s.Seal(&u, "weather", "weather")
	r.Share.Y = protocol.G.RandomScalar(rand.Reader) // poisoned
	opened := 0
	opened += len(p.Apply(Message{Value: wrap(t, key, r)}))
	for i := 0; i < k; i++ {
		r, _ := s.Seal(&u, "weather", "weather")
		opened += len(p.Apply(Message{Value: wrap(t, key, r)}))
	}
	if opened != k+1 || p.Stats.FailedRecover == 0 {
		t.Fatalf("opened %d reports (want %d), failed recoveries %d", opened, k+1, p.Stats.FailedRecover)
	}
}

func TestMalformedDropped(t *testing.T) {
	key, _ := protocol.GenerateKeyPair(1)
	other, _ := protocol.GenerateKeyPair(2)
	p := NewPartition(0, 1, []*protocol.KeyPair{key})
	s := sealing(t, "x", protocol.FTa, 1)
	u, _ := protocol.NewUserSecret()
	r, _ := s.Seal(&u, "x", "x")
	for _, v := range [][]byte{nil, {1}, []byte("garbage garbage garbage garbage garbage garbage"), wrap(t, other, r)} {
		if out := p.Apply(Message{Value: v}); out != nil {
			t.Fatal("malformed message emitted output")
		}
	}
	if p.Stats.Dropped["malformed"] != 3 || p.Stats.Dropped["unknown-key"] != 1 {
		t.Fatalf("dropped %v", p.Stats.Dropped)
	}
	if out := p.Apply(Message{Value: wrap(t, key, r)}); len(out) != 1 {
		t.Fatal("valid report after malformed ones did not open at k=1")
	}
}

func FuzzApply(f *testing.F) {
	key, _ := protocol.GenerateKeyPair(1)
	s := sealing(f, "x", protocol.FTa, 2)
	u, _ := protocol.NewUserSecret()
	r, _ := s.Seal(&u, "x", "x")
	f.Add(wrap(f, key, r), false)
	f.Add([]byte(`{"app":"a","epoch":"e"}`), true)
	f.Fuzz(func(t *testing.T, b []byte, control bool) {
		p := NewPartition(0, 1, []*protocol.KeyPair{key})
		p.Apply(Message{Value: b, Control: control})
	})
}

// BenchmarkApply: aggregator cost per report (HPKE open, parse, share
// bookkeeping; one recovery and AEAD open per k reports at k=5, FT_u).
func BenchmarkApply(b *testing.B) {
	key, _ := protocol.GenerateKeyPair(1)
	const k = 5
	var msgs [][]byte
	for a := 0; a < 200; a++ {
		s := sealing(b, fmt.Sprintf("artifact-%d", a), protocol.FTu, k)
		for u := 0; u < k; u++ {
			sec, _ := protocol.NewUserSecret()
			r, _ := s.Seal(&sec, "x", "x")
			msgs = append(msgs, wrap(b, key, r))
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i += len(msgs) {
		p := NewPartition(0, 1, []*protocol.KeyPair{key})
		for _, m := range msgs {
			p.Apply(Message{Value: m})
		}
	}
}
