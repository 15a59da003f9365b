package prio3

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// TestRetainKeepsUncollected: with a finite Retain, the helper forgets a
// batch only once it was collected: an uncollected batch past Retain stays
// (and can still be collected), a collected one of the same age goes.
func TestRetainKeepsUncollected(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 8, Bits: 4}
	w := newWorld(t, m, 1)
	w.cfgL.Retain, w.cfgH.Retain = time.Hour, time.Hour
	var err error
	if w.l, err = NewLeader(w.cfgL); err != nil {
		t.Fatal(err)
	}
	if w.h, err = NewHelper(w.cfgH); err != nil {
		t.Fatal(err)
	}
	days := []p3.Day{20000, 20001}
	for _, day := range days {
		w.upload(t, day.Start(), w.shardAll(t, day, smallCounts(3, 8)))
	}
	if _, err := w.collect(days[0]); err != nil {
		t.Fatal(err)
	}
	late := days[1].Start().Add(24*time.Hour + w.cfgH.Grace + 30*24*time.Hour)
	dropped := w.h.forget(late)
	if len(dropped) != 1 || dropped[0] != days[0] {
		t.Fatalf("helper dropped %v, want only the collected %s", dropped, days[0])
	}
	if w.h.batches[days[1]] == nil || w.h.batches[days[1]].count != 3 {
		t.Fatal("the uncollected batch is gone")
	}
	got, err := w.collect(days[1])
	if err != nil {
		t.Fatalf("collecting the kept batch: %v", err)
	}
	if got.Count != 3 {
		t.Errorf("kept batch collected with %d reports, want 3", got.Count)
	}
	t.Logf("helper after Retain: dropped %d collected batch, kept and later collected 1 uncollected (%d reports)", len(dropped), got.Count)
}

// TestRetainDropsSmallBatch: with MinBatchSize 5 and a finite Retain, a
// batch that closed with 3 reports (never asked for: the leader refuses it
// itself) is final: the helper keeps it until Retain after its close, then
// drops it; a batch of 6 reports, closed but never collected, is kept and
// still collected afterwards. A report of the small day sent after its close
// is refused late, so its count cannot reach the minimum.
func TestRetainDropsSmallBatch(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 8, Bits: 4}
	w := newWorld(t, m, 5)
	w.cfgL.Retain, w.cfgH.Retain = time.Hour, time.Hour
	var err error
	if w.l, err = NewLeader(w.cfgL); err != nil {
		t.Fatal(err)
	}
	if w.h, err = NewHelper(w.cfgH); err != nil {
		t.Fatal(err)
	}
	small, big := p3.Day(20000), p3.Day(20001)
	ups := w.shardAll(t, small, smallCounts(4, 8))
	w.upload(t, small.Start(), ups[:3])
	w.upload(t, big.Start(), w.shardAll(t, big, smallCounts(6, 8)))
	closeSmall := small.Start().Add(24*time.Hour + w.cfgH.Grace)
	// the fourth report after the close: refused late
	w.upload(t, closeSmall, ups[3:])
	if c := w.h.batches[small].count; c != 3 {
		t.Fatalf("small batch has %d reports after a late one, want 3", c)
	}
	if dropped := w.h.forget(closeSmall.Add(w.cfgH.Retain - time.Minute)); len(dropped) != 0 {
		t.Fatalf("helper dropped %v before Retain", dropped)
	}
	late := big.Start().Add(24*time.Hour + w.cfgH.Grace + 30*24*time.Hour)
	dropped := w.h.forget(late)
	if len(dropped) != 1 || dropped[0] != small {
		t.Fatalf("helper dropped %v, want only the small %s", dropped, small)
	}
	got, err := w.collect(big)
	if err != nil {
		t.Fatalf("collecting the kept batch: %v", err)
	}
	if got.Count != 6 {
		t.Errorf("kept batch collected with %d reports, want 6", got.Count)
	}
	t.Logf("helper after Retain: dropped the closed batch of 3 (< 5), kept and later collected the uncollected one of %d", got.Count)
}

// TestBatchLog: a batch log written record by record restores the batch
// exactly (aggregate, count, checksum, ids with digests); bytes written
// after the length the snapshot names (a crash between the log and the
// snapshot) are cut; a log grown past its compaction bound and a
// collected batch move to a new generation with one full record and the
// old file is removed; files no snapshot names are removed at load.
func TestBatchLog(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 16, Bits: 4}
	w := newWorld(t, m, 1)
	dir := t.TempDir()
	store := newBatchStore(dir, "prio3-helper", true, w.h.vdaf)
	day := p3.Day(20000)
	ups := w.shardAll(t, day, smallCounts(9, m.Length))
	var refs []map[p3.Day]batchRef
	var counts []uint64
	for i := 0; i < 9; i += 3 {
		w.upload(t, day.Start(), ups[i:i+3])
		if err := store.flush(w.h.batches); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, map[p3.Day]batchRef{day: store.refs[day]})
		counts = append(counts, w.h.batches[day].count)
	}
	if refs[2][day].gen != 1 || refs[2][day].size <= refs[0][day].size {
		t.Fatalf("refs %v: want one generation growing", refs)
	}
	// restore at the first snapshot's length: the later records are cut
	again := newBatchStore(dir, "prio3-helper", true, w.h.vdaf)
	bs, err := again.load(refs[0])
	if err != nil {
		t.Fatal(err)
	}
	if bs[day].count != counts[0] || len(bs[day].ids) != int(counts[0]) {
		t.Fatalf("restored at the first length: count %d, %d ids; want %d", bs[day].count, len(bs[day].ids), counts[0])
	}
	if fi, _ := os.Stat(store.path(day, 1)); fi.Size() != refs[0][day].size {
		t.Errorf("log of %d bytes after the load, want cut to %d", fi.Size(), refs[0][day].size)
	}
	// the whole log again (written anew) restores the batch exactly
	dir2 := t.TempDir()
	s2 := newBatchStore(dir2, "prio3-helper", true, w.h.vdaf)
	for _, b := range w.h.batches {
		b.fresh = nil
	}
	if err := s2.flush(w.h.batches); err != nil {
		t.Fatal(err)
	}
	// an orphan file (no snapshot names it) goes at load
	orphan := s2.path(day+1, 1)
	os.WriteFile(orphan, []byte("x"), 0o600)
	r2 := newBatchStore(dir2, "prio3-helper", true, w.h.vdaf)
	bs, err = r2.load(map[p3.Day]batchRef{day: s2.refs[day]})
	if err != nil {
		t.Fatal(err)
	}
	want := w.h.batches[day]
	if b := bs[day]; b.count != want.count || b.checksum != want.checksum || len(b.ids) != len(want.ids) ||
		string(p3.EncodeAggregate(&b.agg)) != string(p3.EncodeAggregate(&want.agg)) {
		t.Fatal("restored batch differs from the one logged")
	}
	for id, d := range want.ids {
		if bs[day].ids[id] != d {
			t.Fatal("a digest differs after the restore")
		}
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Error("an orphan batch log survived the load")
	}
	// collected: a new generation with one full record, the old removed
	want.markCollected()
	if err := s2.flush(w.h.batches); err != nil {
		t.Fatal(err)
	}
	s2.cleanup()
	if ref := s2.refs[day]; ref.gen != 2 || ref.size > int64(m.Length*16+200) {
		t.Errorf("collected batch log: generation %d, %d bytes; want 2 and about L × 16 B", ref.gen, ref.size)
	}
	if logs, _ := filepath.Glob(filepath.Join(dir2, "*.log")); len(logs) != 1 {
		t.Errorf("logs %v, want only the new generation", logs)
	}
	r3 := newBatchStore(dir2, "prio3-helper", true, w.h.vdaf)
	if bs, err = r3.load(s2.refs); err != nil || !bs[day].collected || bs[day].ids != nil || bs[day].count != want.count {
		t.Fatalf("collected batch restored as %+v, %v", bs[day], err)
	}
	// a damaged record is an ErrMalformed, never a wrong batch
	b, _ := os.ReadFile(s2.path(day, 2))
	b[len(b)-1] ^= 1
	os.WriteFile(s2.path(day, 2), b, 0o600)
	if _, err := newBatchStore(dir2, "prio3-helper", true, w.h.vdaf).load(s2.refs); !errors.Is(err, protocol.ErrMalformed) {
		t.Errorf("damaged log: %v, want ErrMalformed", err)
	}
}

// FuzzBatchLog: arbitrary log bytes never panic the replay; errors wrap
// ErrMalformed.
func FuzzBatchLog(f *testing.F) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 4, Bits: 2}
	w := newWorld(f, m, 1)
	day := p3.Day(20000)
	w.upload(f, day.Start(), w.shardAll(f, day, smallCounts(2, 4)))
	dir := f.TempDir()
	s := newBatchStore(dir, "prio3-helper", true, w.h.vdaf)
	if err := s.flush(w.h.batches); err != nil {
		f.Fatal(err)
	}
	w.upload(f, day.Start(), w.shardAll(f, day, smallCounts(1, 4)))
	if err := s.flush(w.h.batches); err != nil {
		f.Fatal(err)
	}
	b, _ := os.ReadFile(s.path(day, 1))
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, helper := range []bool{true, false} {
			st := newBatchStore("", "x", helper, w.h.vdaf)
			if _, _, err := st.replay(b); err != nil && !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
		}
	})
}

// FuzzHelperFile: arbitrary bytes never panic the helper service's
// snapshot decoder; errors wrap ErrMalformed; a decoded snapshot encodes
// again.
func FuzzHelperFile(f *testing.F) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 4, Bits: 2}
	w := newWorld(f, m, 1)
	day := p3.Day(20000)
	w.upload(f, day.Start(), w.shardAll(f, day, smallCounts(2, 4)))
	b, err := encodeHelperFile(w.h, map[p3.Day]batchRef{day: {gen: 1, size: 300}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	hb, _ := w.h.MarshalBinary()
	f.Add(hb)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, refs, err := decodeHelperFile(w.cfgH, b)
		if err != nil {
			if !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		if _, err := encodeHelperFile(h, refs); err != nil {
			t.Fatal(err)
		}
	})
}
