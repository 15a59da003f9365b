package prio3

import (
	"errors"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

func smallCounts(n, length int) [][]uint64 {
	out := make([][]uint64, n)
	for i := range out {
		c := make([]uint64, length)
		c[i%length] = uint64(1 + i%20) // some above 15: clipped by the client
		c[(i*3+1)%length]++
		out[i] = c
	}
	return out
}

func wantTotals(counts [][]uint64, length int, max uint64) []int64 {
	t := make([]int64, length)
	for _, c := range counts {
		for i, x := range c {
			t[i] += int64(min(x, max))
		}
	}
	return t
}

func equalTotals(t *testing.T, got, want []int64) {
	t.Helper()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("keyword %d: total %d, want %d", i, got[i], want[i])
		}
	}
}

// TestRestart: the leader restarts with reports queued, then with a
// request in flight whose answer is lost (it re-sends; the helper answers
// the retry with the same prep message and counts it once); the helper
// restarts after preparing; the batch still sums to the clients' clipped
// counts, each counted once.
func TestRestart(t *testing.T) {
	const n, length = 30, 40
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4}
	w := newWorld(t, m, 5)
	day := p3.Day(20000)
	now := day.Start().Add(time.Hour)
	counts := smallCounts(n, length)
	uploads := w.shardAll(t, day, counts)
	for _, u := range uploads[:20] {
		if _, err := w.l.Apply(Event{Now: now, Kind: EventUpload, Msg: u}); err != nil {
			t.Fatal(err)
		}
	}
	restartLeader := func() {
		b, err := w.l.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if w.l, err = RestoreLeader(w.cfgL, b); err != nil {
			t.Fatal(err)
		}
	}
	restartLeader() // 20 queued
	reqs, err := w.l.Apply(Event{Now: now, Kind: EventTick})
	if err != nil || len(reqs) != 1 {
		t.Fatal(err, len(reqs))
	}
	if _, err := w.h.Apply(Event{Now: now, Kind: EventAggregateReq, Msg: reqs[0].Msg}); err != nil {
		t.Fatal(err)
	}
	restartLeader() // the answer is lost: 20 in flight, re-sent
	hb, _ := w.h.MarshalBinary()
	if w.h, err = RestoreHelper(w.cfgH, hb); err != nil {
		t.Fatal(err)
	}
	w.upload(t, now, uploads[20:])
	res, err := w.collect(day)
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != n || w.h.Stats.Prepared != n {
		t.Fatalf("count %d, helper prepared %d, want %d", res.Count, w.h.Stats.Prepared, n)
	}
	equalTotals(t, res.Totals, wantTotals(counts, length, 15))
	// a state of another campaign is refused
	other := w.cfgL
	other.Campaign = "other"
	lb, _ := w.l.MarshalBinary()
	if _, err := RestoreLeader(other, lb); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("restored another campaign's state: %v", err)
	}
}

// TestLateAndCounters: an upload after its day's end + grace is dropped as
// late at the leader; a prep request after it at the helper is rejected
// "late" and the leader counts "helper_late"; collection of an open batch
// fails; a report sealed to an unknown key counts "unknown_key".
func TestLateAndCounters(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 8, Bits: 4}
	w := newWorld(t, m, 1)
	day := p3.Day(20000)
	ups := w.shardAll(t, day, smallCounts(3, 8))
	late := day.Start().Add(25*time.Hour + time.Second)
	w.l.Apply(Event{Now: late, Kind: EventUpload, Msg: ups[0]})
	w.l.Apply(Event{Now: day.Start(), Kind: EventUpload, Msg: ups[1]})
	reqs, _ := w.l.Apply(Event{Now: day.Start(), Kind: EventTick})
	if _, err := w.route(late, reqs); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), ups[2]...)
	bad[1] = 99
	w.l.Apply(Event{Now: day.Start(), Kind: EventUpload, Msg: bad})
	if _, err := w.l.Apply(Event{Now: day.Start().Add(time.Hour), Kind: EventCollect, Day: day}); !errors.Is(err, ErrBatchOpen) {
		t.Fatalf("collected an open batch: %v", err)
	}
	if w.l.Stats.Rejected["late"] != 1 || w.h.Stats.Rejected["late"] != 1 || w.l.Stats.Rejected["helper_late"] != 1 || w.l.Stats.Rejected["unknown_key"] != 1 {
		t.Fatalf("leader %v helper %v", w.l.Stats.Rejected, w.h.Stats.Rejected)
	}
}

// TestPresenceBatch: the presence measurement sums to the number of
// clients per keyword.
func TestPresenceBatch(t *testing.T) {
	const n, length = 12, 30
	m := p3.Config{Kind: p3.KindPresence, Length: length, MaxWeight: 3}
	w := newWorld(t, m, 5)
	day := p3.Day(20001)
	counts := smallCounts(n, length)
	w.upload(t, day.Start(), w.shardAll(t, day, counts))
	res, err := w.collect(day)
	if err != nil {
		t.Fatal(err)
	}
	equalTotals(t, res.Totals, wantTotals(counts, length, 1))
}

func fuzzState(f *testing.F, helper bool) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 4, Bits: 2}
	w := newWorld(f, m, 1)
	day := p3.Day(20000)
	ups := w.shardAll(f, day, smallCounts(3, 4))
	w.upload(f, day.Start(), ups[:2])
	w.l.Apply(Event{Now: day.Start(), Kind: EventUpload, Msg: ups[2]})
	lb, _ := w.l.MarshalBinary()
	hb, _ := w.h.MarshalBinary()
	if helper {
		f.Add(hb)
	} else {
		f.Add(lb)
	}
	// a batch with a noise draw (the state's noise field)
	for _, b := range []*batch{w.l.batches[day], w.h.batches[day]} {
		b.noise, b.noiseEps = []int64{1, -2, 3, -4}, 0.5
	}
	lb, _ = w.l.MarshalBinary()
	hb, _ = w.h.MarshalBinary()
	if helper {
		f.Add(hb)
	} else {
		f.Add(lb)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var err error
		var again []byte
		if helper {
			var h *Helper
			if h, err = RestoreHelper(w.cfgH, b); err == nil {
				again, _ = h.MarshalBinary()
			}
		} else {
			var l *Leader
			if l, err = RestoreLeader(w.cfgL, b); err == nil {
				again, _ = l.MarshalBinary()
			}
		}
		if err != nil {
			if !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		if again == nil {
			t.Fatal("restored state does not encode")
		}
	})
}

// FuzzRestoreLeader: arbitrary bytes never panic the leader's state
// decoder; errors wrap ErrMalformed.
func FuzzRestoreLeader(f *testing.F) { fuzzState(f, false) }

// FuzzRestoreHelper: the same for the helper's.
func FuzzRestoreHelper(f *testing.F) { fuzzState(f, true) }

// TestHelperReasons: the helper rejects, per report and by reason, an
// unknown verify-key epoch, a helper share that does not open (tampered),
// and a leader prep share that does not decode; the leader learns each
// reason as "helper_<reason>" and nothing is committed.
func TestHelperReasons(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 8, Bits: 4}
	w := newWorld(t, m, 1)
	day := p3.Day(20000)
	now := day.Start()
	ups := w.shardAll(t, day, smallCounts(3, 8))
	for _, u := range ups {
		w.l.Apply(Event{Now: now, Kind: EventUpload, Msg: u})
	}
	reqs, _ := w.l.Apply(Event{Now: now, Kind: EventTick})
	q, err := p3.ParseAggregateReq(reqs[0].Msg)
	if err != nil {
		t.Fatal(err)
	}
	// item 0: tampered helper share; item 1: truncated leader prep share
	q.Items[0].SealedHelper = append([]byte(nil), q.Items[0].SealedHelper...)
	q.Items[0].SealedHelper[40] ^= 1
	q.Items[1].LeaderPrep = q.Items[1].LeaderPrep[:10]
	third := q.Items[2]
	q.Items = q.Items[:2]
	b, _ := q.MarshalBinary()
	if _, err := w.route(now, []Output{{To: ToHelper, Msg: b}}); err != nil {
		t.Fatal(err)
	}
	// an unknown epoch for the third report
	q.Items = []p3.PrepItem{third}
	q.KeyEpoch = 7
	b, _ = q.MarshalBinary()
	out, err := w.h.Apply(Event{Now: now, Kind: EventAggregateReq, Msg: b})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.l.Apply(Event{Now: now, Kind: EventAggregateResp, Msg: out[0].Msg}); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"decrypt": 1, "prep_share": 1, "key_epoch": 1}
	for r, n := range want {
		if w.h.Stats.Rejected[r] != n || w.l.Stats.Rejected["helper_"+r] != n {
			t.Fatalf("%s: helper %d, leader %d, want %d (helper %v, leader %v)", r, w.h.Stats.Rejected[r], w.l.Stats.Rejected["helper_"+r], n, w.h.Stats.Rejected, w.l.Stats.Rejected)
		}
	}
	if w.h.Stats.Prepared != 0 || w.l.Stats.Prepared != 0 {
		t.Fatalf("prepared helper %d leader %d", w.h.Stats.Prepared, w.l.Stats.Prepared)
	}
}
