package aggregator

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

func wrap(t testing.TB, key *onion.KeyPair, r *star.Report) []byte {
	t.Helper()
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	l, err := onion.SealLayer(key.PublicKey(), onion.Hop{Kind: onion.HopDeliver}, b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func sealing(t testing.TB, artifact string, pol star.Policy, k int) star.Sealing {
	omega := make([]byte, 64)
	copy(omega, artifact) // stands in for the OPRF output: one ω per artifact
	s, err := star.DeriveSealing(omega, "query", "e1", pol, k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestThresholdFTu: artifact i is reported by i users, each twice; exactly the
// artifacts with at least k users open, with every report as an impression.
func TestThresholdFTu(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	const k = 4
	p := NewPartition(0, 1, []*onion.KeyPair{key})
	got := map[string]int{}
	var dup []byte
	for users := 1; users <= 6; users++ {
		art := fmt.Sprintf("artifact-%d", users)
		s := sealing(t, art, star.FTu, k)
		for u := 0; u < users; u++ {
			sec, _ := star.NewUserSecret()
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

// TestPoisonedShare: a bad share among the first k neither blocks nor
// corrupts the tag: the optimistic recovery fails its C_0 check, the bad
// share is found by the Feldman check and dropped, and the key opens the
// honest reports. Without verification (baseline) the AEAD subset search
// gets there too, but opens the poisoned report's ciphertext as well.
func TestPoisonedShare(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	const k = 3
	for _, noVerify := range []bool{false, true} {
		p := NewPartition(0, 1, []*onion.KeyPair{key})
		p.noVerify = noVerify
		s := sealing(t, "weather", star.FTa, k)
		u, _ := star.NewUserSecret()
		r, _ := s.Seal(&u, "weather", "weather")
		r.Share.Y = protocol.G.RandomScalar(rand.Reader) // poisoned
		opened := 0
		opened += len(p.Apply(Message{Value: wrap(t, key, r)}))
		for i := 0; i < k; i++ {
			r, _ := s.Seal(&u, "weather", "weather")
			opened += len(p.Apply(Message{Value: wrap(t, key, r)}))
		}
		want, bad := k, int64(1)
		if noVerify {
			want, bad = k+1, 0
		}
		if opened != want || p.Stats.FailedRecover == 0 || p.Stats.Dropped["bad-share"] != bad || p.Stats.Reports != int64(want) {
			t.Fatalf("noVerify=%v: opened %d reports (want %d), failed recoveries %d, dropped %v",
				noVerify, opened, want, p.Stats.FailedRecover, p.Stats.Dropped)
		}
	}
}

// TestTamperedShareRejected: once a group is suspect, a tampered share is
// rejected on arrival — before it can take part in a recovery — and counted.
func TestTamperedShareRejected(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	const k = 3
	p := NewPartition(0, 1, []*onion.KeyPair{key})
	s := sealing(t, "weather", star.FTu, k)
	seal := func(tamper bool) []byte {
		u, _ := star.NewUserSecret()
		r, _ := s.Seal(&u, "weather", "weather")
		if tamper {
			r.Share.Y.Add(r.Share.Y, protocol.G.NewScalar().SetUint64(1))
		}
		return wrap(t, key, r)
	}
	// two honest users and a tampered share: the optimistic attempt fails
	for _, m := range [][]byte{seal(false), seal(true), seal(false)} {
		if out := p.Apply(Message{Value: m}); len(out) != 0 {
			t.Fatal("opened with a tampered share among k")
		}
	}
	if p.Stats.Dropped["bad-share"] != 1 || p.Stats.FailedRecover != 1 {
		t.Fatalf("after first attempt: dropped %v, failed %d", p.Stats.Dropped, p.Stats.FailedRecover)
	}
	// more tampered shares are rejected on arrival, with no recovery attempt
	for i := 0; i < 5; i++ {
		if out := p.Apply(Message{Value: seal(true)}); len(out) != 0 {
			t.Fatal("tampered share opened the tag")
		}
	}
	if p.Stats.Dropped["bad-share"] != 6 || p.Stats.FailedRecover != 1 || p.Stats.Reports != 2 {
		t.Fatalf("tampered shares on arrival: dropped %v, failed %d, reports %d", p.Stats.Dropped, p.Stats.FailedRecover, p.Stats.Reports)
	}
	// the third honest user opens exactly the three honest reports
	out := p.Apply(Message{Value: seal(false)})
	if len(out) != 3 || p.Stats.Recoveries != 1 {
		t.Fatalf("third honest user: %d items, %d recoveries", len(out), p.Stats.Recoveries)
	}
}

// TestPoisonerCannotBlock: a poisoner that knows the artifact floods its tag
// and commitment with bad shares before the honest users arrive. With share
// verification the honest artifact opens at exactly k honest users; the
// baseline AEAD subset search (MaxAttempts subsets per share) is blocked.
func TestPoisonerCannotBlock(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	const k, flood = 5, 30
	for _, noVerify := range []bool{false, true} {
		p := NewPartition(0, 1, []*onion.KeyPair{key})
		p.noVerify = noVerify
		s := sealing(t, "weather", star.FTu, k)
		for i := 0; i < flood; i++ {
			u, _ := star.NewUserSecret()
			r, _ := s.Seal(&u, "poison", "poison")
			r.Share.Y = protocol.G.RandomScalar(rand.Reader)
			if out := p.Apply(Message{Value: wrap(t, key, r)}); len(out) != 0 {
				t.Fatalf("noVerify=%v: bad shares alone opened the tag", noVerify)
			}
		}
		openedAt := 0
		for users := 1; users <= k; users++ {
			u, _ := star.NewUserSecret()
			r, _ := s.Seal(&u, "weather", "weather")
			for _, d := range p.Apply(Message{Value: wrap(t, key, r)}) {
				if d.Item != "weather" {
					t.Fatalf("noVerify=%v: poisoner's item %q released", noVerify, d.Item)
				}
				openedAt = users
			}
		}
		if noVerify {
			if openedAt != 0 {
				t.Fatalf("baseline: expected the flood to block recovery (opened at %d users)", openedAt)
			}
			continue
		}
		if openedAt != k || p.Stats.Dropped["bad-share"] != flood {
			t.Fatalf("verified: opened at %d honest users (want %d), dropped %v", openedAt, k, p.Stats.Dropped)
		}
	}
}

// TestPoisonerOwnPolynomial: a poisoner seals its own, consistent polynomial
// under the honest artifact's tag (different commitment). Its reports are
// kept apart: the honest artifact opens at exactly k honest users with only
// honest payloads, k−1 poisoner reports stay pending as their own group, and
// even k poisoner reports (k Sybils) open only their own group.
func TestPoisonerOwnPolynomial(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	const k = 4
	for _, poisoners := range []int{k - 1, k} {
		p := NewPartition(0, 1, []*onion.KeyPair{key})
		honest := sealing(t, "weather", star.FTu, k)
		evil := sealing(t, "evil", star.FTu, k).WithTag(honest.Tag)
		send := func(s star.Sealing, item string) []protocol.Decrypted {
			u, _ := star.NewUserSecret()
			r, _ := s.Seal(&u, item, item)
			return p.Apply(Message{Value: wrap(t, key, r)})
		}
		items := map[string]int{}
		openedAt := 0
		for i := 0; i < k; i++ { // interleaved: poisoner first in every round
			if i < poisoners {
				for _, d := range send(evil, "injected") {
					items[d.Item]++
				}
			}
			for _, d := range send(honest, "weather") {
				items[d.Item]++
				openedAt = i + 1
			}
		}
		if openedAt != k || items["weather"] != k {
			t.Fatalf("%d poisoners: honest opened at %d users with %d items (want %d)", poisoners, openedAt, items["weather"], k)
		}
		if p.Stats.Dropped["bad-share"] != 0 || p.Stats.Dropped["mismatch"] != 0 {
			t.Fatalf("%d poisoners: honest and poisoner reports mixed: %v", poisoners, p.Stats.Dropped)
		}
		wantInjected, wantPending := 0, 1
		if poisoners == k { // the Sybil limit: k fake users open their own group
			wantInjected, wantPending = k, 0
		}
		if items["injected"] != wantInjected || p.PendingTags() != wantPending {
			t.Fatalf("%d poisoners: injected %d (want %d), pending groups %d (want %d)",
				poisoners, items["injected"], wantInjected, p.PendingTags(), wantPending)
		}
	}
}

// TestBadCommitment: a commitment whose points do not decode is dropped as a
// group, never recovered, and does not disturb the honest group of its tag.
func TestBadCommitment(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	const k = 2
	p := NewPartition(0, 1, []*onion.KeyPair{key})
	s := sealing(t, "weather", star.FTa, k)
	u, _ := star.NewUserSecret()
	for i := 0; i < k+1; i++ {
		r, _ := s.Seal(&u, "junk", "junk")
		r.Commitment = bytes.Repeat([]byte{0xff}, len(r.Commitment))
		if out := p.Apply(Message{Value: wrap(t, key, r)}); len(out) != 0 {
			t.Fatal("junk commitment opened")
		}
	}
	if p.Stats.Dropped["bad-commitment"] != k+1 || p.PendingTags() != 0 {
		t.Fatalf("dropped %v, pending %d", p.Stats.Dropped, p.PendingTags())
	}
	opened := 0
	for i := 0; i < k; i++ {
		r, _ := s.Seal(&u, "weather", "weather")
		opened += len(p.Apply(Message{Value: wrap(t, key, r)}))
	}
	if opened != k {
		t.Fatalf("honest group opened %d of %d", opened, k)
	}
}

func TestMalformedDropped(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	other, _ := onion.GenerateKeyPair(2)
	p := NewPartition(0, 1, []*onion.KeyPair{key})
	s := sealing(t, "x", star.FTa, 1)
	u, _ := star.NewUserSecret()
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
	key, _ := onion.GenerateKeyPair(1)
	s := sealing(f, "x", star.FTa, 2)
	u, _ := star.NewUserSecret()
	r, _ := s.Seal(&u, "x", "x")
	f.Add(wrap(f, key, r), false)
	f.Add([]byte(`{"app":"a","epoch":"e"}`), true)
	f.Add([]byte(`{"op":"open-epoch","app":"query","epoch":"e1","partitions":1}`), true)
	f.Add([]byte(`{"op":"close-epoch","app":"query","epoch":"e1","partitions":1}`), true)
	f.Fuzz(func(t *testing.T, b []byte, control bool) {
		p := NewPartition(0, 1, []*onion.KeyPair{key})
		p.Apply(Message{Value: b, Control: control})
	})
}

// BenchmarkApply: aggregator cost per report (HPKE open, parse, share
// bookkeeping; per artifact one recovery and its AEAD opens), FT_u, one
// report per user, with verification (the default) and without (noVerify:
// no commitment check, AEAD subset search; both recover f(0) with
// vss.Interpolate). reports=k: every report is one of the k shares of
// its artifact's recovery (one batch check per k reports: the worst case);
// reports=3k: the last 2k reports of each artifact arrive after its
// recovery (y == f(x) each).
//
// The two modes run alternately over the same messages within each
// iteration, so load from other processes hits both alike. Metrics, per
// report: ns/op and verify-ns/report with verification, noverify-ns/report
// without; verify-% = throughput with verification as a percentage of
// throughput without (target ≥ 80).
func BenchmarkApply(b *testing.B) {
	key, _ := onion.GenerateKeyPair(1)
	for _, c := range []struct{ k, perArtifact int }{{2, 2}, {5, 5}, {10, 10}, {5, 15}} {
		artifacts := 1000 / c.perArtifact
		var msgs [][]byte
		for a := 0; a < artifacts; a++ {
			s := sealing(b, fmt.Sprintf("artifact-%d", a), star.FTu, c.k)
			for u := 0; u < c.perArtifact; u++ {
				sec, _ := star.NewUserSecret()
				r, _ := s.Seal(&sec, "x", "x")
				msgs = append(msgs, wrap(b, key, r))
			}
		}
		run := func(b *testing.B, noVerify bool) time.Duration {
			start := time.Now()
			p := NewPartition(0, 1, []*onion.KeyPair{key})
			p.noVerify = noVerify
			for _, m := range msgs {
				p.Apply(Message{Value: m})
			}
			d := time.Since(start)
			if p.Stats.Recoveries != int64(artifacts) || p.Stats.Decrypted != int64(len(msgs)) {
				b.Fatalf("noVerify=%v: %d recoveries, %d decrypted", noVerify, p.Stats.Recoveries, p.Stats.Decrypted)
			}
			return d
		}
		b.Run(fmt.Sprintf("k=%d/reports=%d", c.k, c.perArtifact), func(b *testing.B) {
			var with, without time.Duration
			reports := 0
			for i := 0; i < b.N; i += len(msgs) {
				if i/len(msgs)%2 == 0 {
					with += run(b, false)
					without += run(b, true)
				} else {
					without += run(b, true)
					with += run(b, false)
				}
				reports += len(msgs)
			}
			b.ReportMetric(float64(with.Nanoseconds())/float64(reports), "ns/op")
			b.ReportMetric(float64(with.Nanoseconds())/float64(reports), "verify-ns/report")
			b.ReportMetric(float64(without.Nanoseconds())/float64(reports), "noverify-ns/report")
			b.ReportMetric(100*float64(without)/float64(with), "verify-%")
		})
	}
}

// BenchmarkApplyAttacked: per report, when every artifact (k = 5) also
// receives one bad share before its honest users: each group's batch check
// fails, its k shares are checked one by one, and its last honest share is
// checked alone on arrival.
func BenchmarkApplyAttacked(b *testing.B) {
	key, _ := onion.GenerateKeyPair(1)
	const k = 5
	var msgs [][]byte
	for a := 0; a < 100; a++ {
		s := sealing(b, fmt.Sprintf("artifact-%d", a), star.FTu, k)
		for u := 0; u <= k; u++ {
			sec, _ := star.NewUserSecret()
			r, _ := s.Seal(&sec, "x", "x")
			if u == 0 {
				r.Share.Y = protocol.G.RandomScalar(rand.Reader)
			}
			msgs = append(msgs, wrap(b, key, r))
		}
	}
	for i := 0; i < b.N; i += len(msgs) {
		p := NewPartition(0, 1, []*onion.KeyPair{key})
		for _, m := range msgs {
			p.Apply(Message{Value: m})
		}
		if p.Stats.Recoveries != 100 {
			b.Fatalf("%d recoveries", p.Stats.Recoveries)
		}
	}
}
