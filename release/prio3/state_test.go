package prio3

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

const (
	tCampaign = "flu"
	tLen      = 6
	tMin      = 3
)

var tDay = p3.Day(20000)

func newTestState(t testing.TB) (*State, *onion.KeyPair) {
	t.Helper()
	ck := genKey(t, 9)
	s, err := NewState(p3.Collector{Campaign: tCampaign, Measurement: p3.Config{Kind: p3.KindSumVec, Length: tLen, Bits: 4},
		Key: ck, MinBatchSize: tMin})
	if err != nil {
		t.Fatal(err)
	}
	return s, ck
}

// apply feeds msgs and returns the batches released, in order.
func apply(s *State, msgs ...[]byte) []Batch {
	var out []Batch
	for _, m := range msgs {
		if b, ok := s.Apply(m); ok {
			out = append(out, b)
		}
	}
	return out
}

func wantDropped(t *testing.T, s *State, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	for k, v := range s.Dropped {
		if v != 0 {
			got[k] = v
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("dropped %v, want %v", got, want)
	}
}

// TestPairing: the leader's and the helper's shares of a day, in either
// order, release the day once with their sum; duplicates (re-sealed, as
// after a leader restart) and late shares are dropped.
func TestPairing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	truth := []int64{0, 7, 45, 0, 1, 3}
	for _, helperFirst := range []bool{false, true} {
		s, ck := newTestState(t)
		lv, hv := split(rng, truth)
		roles, vecs := []byte{0, 1}, [][]int64{lv, hv}
		if helperFirst {
			roles, vecs = []byte{1, 0}, [][]int64{hv, lv}
		}
		first := craft(t, ck.PublicKey(), roles[0], tCampaign, tDay, 5, 1, vecs[0])
		resealed := craft(t, ck.PublicKey(), roles[0], tCampaign, tDay, 5, 1, vecs[0]) // as after a leader restart
		second := craft(t, ck.PublicKey(), roles[1], tCampaign, tDay, 5, 1, vecs[1])
		late := craft(t, ck.PublicKey(), roles[1], tCampaign, tDay, 5, 1, vecs[1])
		got := apply(s, first, first, resealed, second, late)
		want := Batch{Campaign: tCampaign, Day: tDay, Count: 5, Checksum: p3.Checksum{1}, Totals: truth}
		if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
			t.Fatalf("helper first %v: released %+v, want one %+v", helperFirst, got, want)
		}
		wantDropped(t, s, map[string]int64{DropDuplicate: 2, DropLate: 1})
		if s.Open() != 0 {
			t.Fatalf("%d days open after release", s.Open())
		}
	}
}

// TestWrongRolesAndMismatch: two leader shares never make a pair; a helper
// share with another count or checksum waits and is dropped as a mismatch
// when the matching pair releases the day.
func TestWrongRolesAndMismatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	truth := []int64{1, 2, 3, 4, 5, 6}
	s, ck := newTestState(t)
	lv, hv := split(rng, truth)
	l := craft(t, ck.PublicKey(), 0, tCampaign, tDay, 5, 1, lv)
	asLeader := craft(t, ck.PublicKey(), 0, tCampaign, tDay, 5, 2, hv)   // the helper's vector claimed as the leader's
	otherCount := craft(t, ck.PublicKey(), 1, tCampaign, tDay, 6, 1, hv) // count differs
	otherSum := craft(t, ck.PublicKey(), 1, tCampaign, tDay, 5, 3, hv)   // checksum differs
	if got := apply(s, l, asLeader, otherCount, otherSum); len(got) != 0 {
		t.Fatalf("released %+v from shares that do not match", got)
	}
	if s.Open() != 1 || s.Accepted != 4 {
		t.Fatalf("open %d accepted %d, want one day holding four shares", s.Open(), s.Accepted)
	}
	h := craft(t, ck.PublicKey(), 1, tCampaign, tDay, 5, 1, hv)
	got := apply(s, h)
	if len(got) != 1 || !reflect.DeepEqual(got[0].Totals, truth) {
		t.Fatalf("released %+v, want totals %v", got, truth)
	}
	wantDropped(t, s, map[string]int64{DropMismatch: 3})
}

// TestRejected: every kind of bad share is counted by reason, changes
// nothing, and does not keep a good pair of the same or another day from
// being released.
func TestRejected(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	s, ck := newTestState(t)
	other := genKey(t, 8)
	truth := []int64{0, 0, 9, 0, 0, 1}
	lv, hv := split(rng, truth)
	tampered := craft(t, ck.PublicKey(), 1, tCampaign, tDay, 5, 1, hv)
	a, err := p3.ParseAggShare(tampered)
	if err != nil {
		t.Fatal(err)
	}
	a.Count = 50 // metadata changed after sealing: the AAD no longer matches
	tampered, _ = a.MarshalBinary()
	refusal, _ := (&p3.AggShare{Role: 1, Campaign: tCampaign, Day: tDay, Count: 5, Reason: "mismatch"}).MarshalBinary()
	bad := map[string][]byte{
		DropMalformed:     {p3.WireVersion, 4, 1, 'x'},
		DropCampaign:      craft(t, ck.PublicKey(), 0, "other", tDay, 5, 1, lv),
		DropRefusal:       refusal,
		DropDay:           craft(t, ck.PublicKey(), 0, tCampaign, 70000, 5, 1, lv),
		DropSmallBatch:    craft(t, ck.PublicKey(), 0, tCampaign, tDay, tMin-1, 1, lv),
		DropUndecryptable: craft(t, other.PublicKey(), 1, tCampaign, tDay, 5, 1, hv),
		DropLength:        craft(t, ck.PublicKey(), 1, tCampaign, tDay, 5, 1, hv[:tLen-1]),
	}
	want := map[string]int64{}
	for reason, m := range bad {
		if got := apply(s, m); len(got) != 0 {
			t.Fatalf("%s: released %+v", reason, got)
		}
		want[reason]++
	}
	if got := apply(s, tampered, nil, []byte{}); len(got) != 0 {
		t.Fatalf("released %+v", got)
	}
	want[DropUndecryptable]++
	want[DropMalformed] += 2
	wantDropped(t, s, want)
	// the day still releases from its good pair
	l := craft(t, ck.PublicKey(), 0, tCampaign, tDay, 5, 1, lv)
	h := craft(t, ck.PublicKey(), 1, tCampaign, tDay, 5, 1, hv)
	if got := apply(s, l, h); len(got) != 1 || !reflect.DeepEqual(got[0].Totals, truth) {
		t.Fatalf("released %+v after bad shares, want totals %v", got, truth)
	}
}

// TestImplausibleAndTooMany: a pair whose sum is out of range (a tampered
// share) is dropped and the day waits for a good pair; a role holds at most
// MaxCandidates shares per day.
func TestImplausibleAndTooMany(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	s, ck := newTestState(t)
	truth := []int64{3, 0, 0, 0, 15, 2}
	lv, hv := split(rng, truth)
	over := append([]int64(nil), lv...)
	over[1] += 5*15 + 1 // one more than five clients can add
	neg := append([]int64(nil), lv...)
	neg[2]--
	got := apply(s,
		craft(t, ck.PublicKey(), 0, tCampaign, tDay, 5, 1, over), craft(t, ck.PublicKey(), 1, tCampaign, tDay, 5, 1, hv),
		craft(t, ck.PublicKey(), 0, tCampaign, tDay, 5, 1, neg), craft(t, ck.PublicKey(), 1, tCampaign, tDay, 5, 1, hv))
	if len(got) != 0 {
		t.Fatalf("released an implausible sum: %+v", got)
	}
	wantDropped(t, s, map[string]int64{DropImplausible: 4})
	for i := range MaxCandidates + 1 {
		apply(s, craft(t, ck.PublicKey(), 0, tCampaign, tDay, 5, byte(10+i), lv))
	}
	wantDropped(t, s, map[string]int64{DropImplausible: 4, DropTooMany: 1})
	// the good helper share pairs with nothing held (checksums 10..13) …
	h := craft(t, ck.PublicKey(), 1, tCampaign, tDay, 5, 1, hv)
	if got := apply(s, h); len(got) != 0 {
		t.Fatalf("released %+v", got)
	}
	// … and a day's other batch pairs and releases; the rest are mismatches
	h10 := craft(t, ck.PublicKey(), 1, tCampaign, tDay, 5, 10, hv)
	if got := apply(s, h10); len(got) != 1 || !reflect.DeepEqual(got[0].Totals, truth) {
		t.Fatalf("released %+v, want totals %v", got, truth)
	}
	wantDropped(t, s, map[string]int64{DropImplausible: 4, DropTooMany: 1, DropMismatch: 4})
}

// TestRestartAndDays: several days interleaved release independently, and
// a fresh State over the same messages (a restarted stage re-reading the
// topic) releases exactly the same batches.
func TestRestartAndDays(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	s, ck := newTestState(t)
	var msgs [][]byte
	want := map[p3.Day][]int64{}
	for d := range p3.Day(4) {
		truth := make([]int64, tLen)
		for i := range truth {
			truth[i] = rng.Int64N(40)
		}
		want[tDay+d] = truth
		lv, hv := split(rng, truth)
		msgs = append(msgs, craft(t, ck.PublicKey(), byte(d%2), tCampaign, tDay+d, 9, 1, [][]int64{lv, hv}[d%2]),
			craft(t, ck.PublicKey(), byte(1-d%2), tCampaign, tDay+d, 9, 1, [][]int64{lv, hv}[1-d%2]))
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	first := apply(s, msgs...)
	if len(first) != 4 {
		t.Fatalf("released %d days, want 4", len(first))
	}
	for _, b := range first {
		if !reflect.DeepEqual(b.Totals, want[b.Day]) {
			t.Fatalf("day %s: totals %v, want %v", b.Day, b.Totals, want[b.Day])
		}
	}
	restarted, err := NewState(s.c)
	if err != nil {
		t.Fatal(err)
	}
	if again := apply(restarted, msgs...); !reflect.DeepEqual(again, first) {
		t.Fatalf("a restart released %+v, the first run %+v", again, first)
	}
}

// TestRealAggregators: the shares the real leader and helper state
// machines (aggregator/prio3) produce for a batch release the sum of the
// clients' clipped counts, for SumVec and for presence.
func TestRealAggregators(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	ck := genKey(t, 9)
	clients := randomClients(rng, 7, tLen)
	for _, m := range []p3.Config{{Kind: p3.KindSumVec, Length: tLen, Bits: 4}, {Kind: p3.KindPresence, Length: tLen, MaxWeight: tLen}} {
		shares := aggregate(t, tCampaign, m, ck.PublicKey(), tMin, tDay, clients)
		s, err := NewState(p3.Collector{Campaign: tCampaign, Measurement: m, Key: ck, MinBatchSize: tMin})
		if err != nil {
			t.Fatal(err)
		}
		got := apply(s, shares[1], shares[0])
		want := clipped(clients, tLen, m.Max())
		if len(got) != 1 || got[0].Count != uint64(len(clients)) || !reflect.DeepEqual(got[0].Totals, want) {
			t.Fatalf("kind %d: released %+v, want count %d totals %v", m.Kind, got, len(clients), want)
		}
		// the batch's own minimum is above its count: nothing is released
		s, _ = NewState(p3.Collector{Campaign: tCampaign, Measurement: m, Key: ck, MinBatchSize: uint64(len(clients) + 1)})
		if got := apply(s, shares[0], shares[1]); len(got) != 0 || s.Dropped[DropSmallBatch] != 2 {
			t.Fatalf("small batch released %+v, dropped %v", got, s.Dropped)
		}
	}
}

// TestKeyRotation: across a collector key rotation, shares sealed to the
// old key still open when it is given; a pair sealed across the rotation
// (leader to the new key, helper to the old) releases the same sum; without
// the old key its shares are undecryptable.
func TestKeyRotation(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	s, ck := newTestState(t)
	old := genKey(t, 8)
	rotated, err := NewState(s.c, old)
	if err != nil {
		t.Fatal(err)
	}
	for d, keys := range [][2]*onion.KeyPair{{old, old}, {ck, old}, {old, ck}, {ck, ck}} {
		truth := []int64{int64(d), 0, 4, 0, 1, 2}
		lv, hv := split(rng, truth)
		day := tDay + p3.Day(d)
		l := craft(t, keys[0].PublicKey(), 0, tCampaign, day, 5, 1, lv)
		h := craft(t, keys[1].PublicKey(), 1, tCampaign, day, 5, 1, hv)
		if got := apply(rotated, l, h); len(got) != 1 || !reflect.DeepEqual(got[0].Totals, truth) || got[0].Count != 5 || got[0].Day != day {
			t.Fatalf("keys %d: released %+v, want totals %v", d, got, truth)
		}
		if got := apply(s, l, h); (len(got) == 1) != (keys == [2]*onion.KeyPair{ck, ck}) {
			t.Fatalf("keys %d without the old key: released %+v", d, got)
		}
	}
	wantDropped(t, s, map[string]int64{DropUndecryptable: 4})
	if _, err := NewState(s.c, nil); err == nil {
		t.Fatal("a nil old key accepted")
	}
}

func TestNewStateConfig(t *testing.T) {
	ck := genKey(t, 1)
	m := p3.Config{Kind: p3.KindSumVec, Length: 3, Bits: 4}
	for name, c := range map[string]p3.Collector{
		"no key":      {Campaign: "c", Measurement: m, MinBatchSize: 1},
		"min batch 0": {Campaign: "c", Measurement: m, Key: ck},
		"bad bits":    {Campaign: "c", Measurement: p3.Config{Kind: p3.KindSumVec, Length: 3, Bits: 40}, Key: ck, MinBatchSize: 1},
	} {
		if _, err := NewState(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzApply: arbitrary topic messages never panic, never release anything
// without a pair, and are each either dropped or held; after a leader
// share, one arbitrary message may complete the pair only with a sum of
// the list's length.
func FuzzApply(f *testing.F) {
	ck := genKey(f, 9)
	rng := rand.New(rand.NewPCG(13, 14))
	lv, hv := split(rng, []int64{1, 2, 3, 4, 5, 6})
	leader := craft(f, ck.PublicKey(), 0, tCampaign, tDay, 5, 1, lv)
	f.Add(leader)
	f.Add(craft(f, ck.PublicKey(), 1, tCampaign, tDay, 5, 1, hv))
	f.Add([]byte{p3.WireVersion, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := NewState(p3.Collector{Campaign: tCampaign, Measurement: p3.Config{Kind: p3.KindSumVec, Length: tLen, Bits: 4},
			Key: ck, MinBatchSize: tMin})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Apply(b); ok {
			t.Fatal("one message released a day")
		}
		if total(s.Dropped)+s.Accepted != 1 {
			t.Fatalf("dropped %v accepted %d for one message", s.Dropped, s.Accepted)
		}
		// after a valid leader share is held: pairing never panics, and
		// anything released is a plausible sum of the list's length
		s.Apply(leader)
		if b, ok := s.Apply(b); ok && len(b.Totals) != tLen {
			t.Fatalf("released %d totals for %d keywords", len(b.Totals), tLen)
		}
	})
}

// TestSmallBatchNotice: the leader's notice (role 0, reason small_batch,
// no share) puts its day in SmallBatch once; the helper's refusal with
// the same reason, another refusal and a notice of a released day do not.
func TestSmallBatchNotice(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	s, ck := newTestState(t)
	notice := func(role byte, day p3.Day, reason string) []byte {
		b, err := (&p3.AggShare{Role: role, Campaign: tCampaign, Day: day, Reason: reason}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	lv, hv := split(rng, []int64{1, 0, 0, 0, 0, 2})
	released := apply(s, craft(t, ck.PublicKey(), 0, tCampaign, tDay, 5, 1, lv), craft(t, ck.PublicKey(), 1, tCampaign, tDay, 5, 1, hv))
	if len(released) != 1 {
		t.Fatalf("released %d days, want 1", len(released))
	}
	got := apply(s, notice(0, tDay+1, p3.ReasonSmallBatch), notice(0, tDay+1, p3.ReasonSmallBatch), notice(1, tDay+2, p3.ReasonSmallBatch),
		notice(0, tDay+3, "mismatch"), notice(0, tDay, p3.ReasonSmallBatch), notice(0, tDay+4, p3.ReasonSmallBatch))
	if len(got) != 0 {
		t.Fatalf("a notice released %+v", got)
	}
	if want := []p3.Day{tDay + 1, tDay + 4}; !reflect.DeepEqual(s.SmallBatch, want) {
		t.Fatalf("SmallBatch %v, want %v", s.SmallBatch, want)
	}
	wantDropped(t, s, map[string]int64{DropRefusal: 2})
}
