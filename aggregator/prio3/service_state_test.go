package prio3

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	ikafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// TestRequestCap: with Config.MaxRequestBytes set to three reports' worth,
// a tick over 31 queued reports of one day sends 11 AggregateReqs, each
// within the bound, together holding every report once; the helper
// prepares all 31 and the batch totals are the clients' sums.
func TestRequestCap(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 100, Bits: 4}
	w := newWorld(t, m, 1)
	day := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	now := day.Start().Add(time.Hour)
	const n = 31
	cs := make([][]uint64, n)
	want := make([]int64, m.Length)
	for i := range cs {
		cs[i] = make([]uint64, m.Length)
		cs[i][i%m.Length] = uint64(i % 16)
		want[i%m.Length] += int64(i % 16)
	}
	ups := w.shardAll(t, day, cs)
	probe, err := NewLeader(w.cfgL)
	if err != nil {
		t.Fatal(err)
	}
	probe.Apply(Event{Now: now, Kind: EventUpload, Msg: ups[0]})
	var one int
	for _, ps := range probe.pending {
		one = itemSize(ps[0])
	}
	head := 2 + 1 + len(campaign) + 12 + p3.SignedReqOverhead // the service signs each request
	cfg := w.cfgL
	cfg.MaxRequestBytes = head + 3*one
	if w.l, err = NewLeader(cfg); err != nil {
		t.Fatal(err)
	}
	for _, u := range ups {
		w.l.Apply(Event{Now: now, Kind: EventUpload, Msg: u})
	}
	outs, err := w.l.Apply(Event{Now: now, Kind: EventTick})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != (n+2)/3 {
		t.Errorf("%d requests, want %d", len(outs), (n+2)/3)
	}
	seen := map[p3.ReportID]int{}
	for _, o := range outs {
		if len(o.Msg)+p3.SignedReqOverhead > cfg.MaxRequestBytes {
			t.Errorf("signed request of %d bytes over the bound %d", len(o.Msg)+p3.SignedReqOverhead, cfg.MaxRequestBytes)
		}
		q, err := p3.ParseAggregateReq(o.Msg)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range q.Items {
			seen[it.ID]++
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct reports in the requests, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("report %x in %d requests", id[:4], k)
		}
	}
	if _, err := w.route(now, outs); err != nil {
		t.Fatal(err)
	}
	if w.l.Stats.Prepared != n || w.h.Stats.Prepared != n {
		t.Fatalf("prepared: leader %d, helper %d, want %d", w.l.Stats.Prepared, w.h.Stats.Prepared, n)
	}
	res, err := w.collect(day)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if res.Totals[i] != want[i] {
			t.Fatalf("keyword %d: %d, want %d", i, res.Totals[i], want[i])
		}
	}
}

// TestFutureAndClosedRetry: the leader refuses ("future") an upload for
// the day after its tomorrow and takes one for tomorrow; the helper refuses
// an item of a day after its tomorrow; the helper answers a retried
// request item it committed while the batch was open with the same prep
// message after the batch closed (counted once), but refuses ("late") a new
// report of the closed batch.
func TestFutureAndClosedRetry(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 20, Bits: 4}
	w := newWorld(t, m, 1)
	today := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	now := today.Start().Add(12 * time.Hour)
	cs := [][]uint64{make([]uint64, m.Length)}
	for _, d := range []p3.Day{today + 2, today + 1} {
		w.l.Apply(Event{Now: now, Kind: EventUpload, Msg: w.shardAll(t, d, cs)[0]})
	}
	if w.l.Stats.Rejected["future"] != 1 || len(w.l.pending) != 1 {
		t.Fatalf("leader: rejected %v, %d pending; want 1 future and tomorrow's report pending", w.l.Stats.Rejected, len(w.l.pending))
	}
	outs, _ := w.l.Apply(Event{Now: now, Kind: EventTick})
	if len(outs) != 1 {
		t.Fatalf("%d requests", len(outs))
	}
	// the same request, claimed for the day after tomorrow: refused at the helper
	q, _ := p3.ParseAggregateReq(outs[0].Msg)
	q.Day = today + 2
	fb, _ := q.MarshalBinary()
	resp, err := w.h.Apply(Event{Now: now, Kind: EventAggregateReq, Msg: fb})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := p3.ParseAggregateResp(resp[0].Msg)
	if r.Results[0].Reason != "future" {
		t.Fatalf("helper: %q for a report of the day after tomorrow, want future", r.Results[0].Reason)
	}
	// committed while open, retried after the close: the same answer
	first, err := w.h.Apply(Event{Now: now, Kind: EventAggregateReq, Msg: outs[0].Msg})
	if err != nil {
		t.Fatal(err)
	}
	after := (today + 1).Start().Add(24*time.Hour + w.cfgH.Grace + time.Minute)
	again, err := w.h.Apply(Event{Now: after, Kind: EventAggregateReq, Msg: outs[0].Msg})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first[0].Msg, again[0].Msg) || w.h.Stats.Prepared != 1 {
		t.Fatalf("retry after the close: same answer %v, helper prepared %d (want true, 1)", bytes.Equal(first[0].Msg, again[0].Msg), w.h.Stats.Prepared)
	}
	// a new report of the closed batch is late
	u := w.shardAll(t, today+1, cs)[0]
	w.l.Apply(Event{Now: now, Kind: EventUpload, Msg: u})
	late, _ := w.l.Apply(Event{Now: now, Kind: EventTick})
	resp, err = w.h.Apply(Event{Now: after, Kind: EventAggregateReq, Msg: late[0].Msg})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := p3.ParseAggregateResp(resp[0].Msg); r.Results[0].Reason != "late" {
		t.Fatalf("helper: %q for a new report of a closed batch, want late", r.Results[0].Reason)
	}
}

// FuzzLeaderFile: arbitrary bytes never panic the leader service's
// snapshot decoder; errors wrap ErrMalformed; a decoded snapshot encodes
// again.
func FuzzLeaderFile(f *testing.F) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 4, Bits: 2}
	w := newWorld(f, m, 1)
	day := p3.Day(20000)
	ups := w.shardAll(f, day, smallCounts(3, 4))
	w.upload(f, day.Start(), ups[:2])
	w.l.Apply(Event{Now: day.Start(), Kind: EventUpload, Msg: ups[2]})
	var id p3.ReportID
	for k := range w.l.pending {
		id = k
	}
	b, err := encodeLeaderFile(w.l, &leaderFile{next: map[int]int64{0: 3, 2: 7}, done: map[p3.Day]string{day - 1: "collected"},
		refs: map[p3.Day]batchRef{day: {gen: 2, size: 900}}, redo: map[upLoc]bool{{part: 0, off: 1}: true}}, map[p3.ReportID]upLoc{id: {part: 2, off: 5}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		l, lf, err := decodeLeaderFile(w.cfgL, b)
		if err != nil {
			if !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		if _, err := encodeLeaderFile(l, lf, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRequeuePartialResponse: a helper response that leaves a report out
// leaves it in flight; requeue puts exactly that report back, the next
// tick sends it alone, and all three reports end up committed once at
// both aggregators.
func TestRequeuePartialResponse(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 8, Bits: 4}
	w := newWorld(t, m, 1)
	day := p3.Day(20000)
	now := day.Start()
	for _, u := range w.shardAll(t, day, smallCounts(3, 8)) {
		w.l.Apply(Event{Now: now, Kind: EventUpload, Msg: u})
	}
	outs, _ := w.l.Apply(Event{Now: now, Kind: EventTick})
	if len(outs) != 1 {
		t.Fatalf("%d requests", len(outs))
	}
	ans, err := w.h.Apply(Event{Now: now, Kind: EventAggregateReq, Msg: outs[0].Msg})
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := p3.ParseAggregateResp(ans[0].Msg)
	left := resp.Results[1].ID
	resp.Results = append(resp.Results[:1], resp.Results[2:]...)
	short, _ := resp.MarshalBinary()
	if _, err := w.l.Apply(Event{Now: now, Kind: EventAggregateResp, Msg: short}); err != nil {
		t.Fatal(err)
	}
	if n := w.l.requeue(outs[0].Msg); n != 1 {
		t.Fatalf("requeued %d, want 1", n)
	}
	again, _ := w.l.Apply(Event{Now: now, Kind: EventTick})
	q, _ := p3.ParseAggregateReq(again[0].Msg)
	if len(again) != 1 || len(q.Items) != 1 || q.Items[0].ID != left {
		t.Fatalf("after requeue: %d requests, %d items", len(again), len(q.Items))
	}
	if _, err := w.route(now, again); err != nil {
		t.Fatal(err)
	}
	if w.l.Stats.Prepared != 3 || w.h.Stats.Prepared != 3 || len(w.l.pending) != 0 {
		t.Fatalf("prepared: leader %d, helper %d, %d pending", w.l.Stats.Prepared, w.h.Stats.Prepared, len(w.l.pending))
	}
	if n := w.l.requeue(outs[0].Msg); n != 0 {
		t.Fatalf("requeued %d committed reports", n)
	}
}

// TestForget: with Config.Retain, a collected batch's state stays until
// Retain after its close and is then dropped at both aggregators (the
// leader's Days no longer lists it; the states encode and restore); a
// retried request for the dropped day is refused as late instead of being
// answered from the dropped commit.
func TestForget(t *testing.T) {
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
	day := p3.Day(20000)
	now := day.Start()
	for _, u := range w.shardAll(t, day, smallCounts(3, 8)) {
		w.l.Apply(Event{Now: now, Kind: EventUpload, Msg: u})
	}
	outs, _ := w.l.Apply(Event{Now: now, Kind: EventTick})
	if _, err := w.route(now, outs); err != nil {
		t.Fatal(err)
	}
	if _, err := w.collect(day); err != nil {
		t.Fatal(err)
	}
	closeAt := day.Start().Add(24*time.Hour + w.cfgL.Grace)
	if w.l.forget(day, closeAt.Add(59*time.Minute)) || len(w.h.forget(closeAt.Add(59*time.Minute))) != 0 {
		t.Fatal("state dropped before Retain passed")
	}
	if !w.l.forget(day, closeAt.Add(time.Hour)) || len(w.h.forget(closeAt.Add(time.Hour))) != 1 {
		t.Fatal("state kept after Retain passed")
	}
	if d := w.l.Days(); len(d) != 0 {
		t.Errorf("leader still lists days %v", d)
	}
	lb, _ := w.l.MarshalBinary()
	hb, _ := w.h.MarshalBinary()
	if _, err := RestoreLeader(w.cfgL, lb); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreHelper(w.cfgH, hb); err != nil {
		t.Fatal(err)
	}
	ans, err := w.h.Apply(Event{Now: closeAt.Add(time.Hour), Kind: EventAggregateReq, Msg: outs[0].Msg})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := p3.ParseAggregateResp(ans[0].Msg)
	if r.Results[0].Reason != "late" {
		t.Errorf("retry for a dropped batch: %q, want late", r.Results[0].Reason)
	}
	if w.h.Stats.Prepared != 3 {
		t.Errorf("helper prepared %d, want 3", w.h.Stats.Prepared)
	}
}

// TestLeaderPendingAfterClose: the leader stops with a report pending
// (the helper down; its snapshot names its upload by offset) and
// restarts after its clock closed the day: it reads that upload again
// without the late check (it was accepted while the day was open), the
// helper (whose clock still has the day open) prepares it, and the
// batch is collected with every report once and the clients' totals.
//
// One upload arrives while the helper is down: the leader reads no
// uploads while a request to the helper is outstanding (backpressure), so
// of several uploads written at once it may read the first alone, ask the
// helper about it and never read the others (4 written at once: 21 of 24
// read when they reach the leader 300 ms apart), and those would be
// refused as late after the restart.
func TestLeaderPendingAfterClose(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 50, Bits: 4}
	e := newSvcEnv(t, m, 5, time.Hour)
	day := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	const n = 24
	cs, want := clients(rand.New(rand.NewPCG(7, 8)), n, m.Length, 15)
	ups := e.w.shardAll(t, day, cs)
	_, hr := e.startHelper()
	l, lr := e.startLeader(4)
	e.write(ups[:n-1]...)
	waitFor(t, "the first reports prepared", 60*time.Second, func() bool { return l.Stats().Prepared == n-1 })
	// two more steps with the helper up: the leader has no request
	// outstanding (every report prepared), so it reads the last upload
	steps0 := l.Steps.Load()
	waitFor(t, "two leader steps with the helper up", 60*time.Second, func() bool { return l.Steps.Load() >= steps0+2 })
	hr.stop(t, "helper")
	e.write(ups[n-1])
	waitFor(t, "the last upload read", 60*time.Second, func() bool { return l.Stats().Uploads == n })
	steps := l.Steps.Load()
	waitFor(t, "a leader step without the helper", 60*time.Second, func() bool { return l.Steps.Load() > steps })
	lr.stop(t, "leader")
	b, err := os.ReadFile(filepath.Join(e.lDir, LeaderStateFile))
	if err != nil {
		t.Fatal(err)
	}
	_, f, err := decodeLeaderFile(e.w.cfgL, b)
	if err != nil || len(f.redo) == 0 {
		t.Fatalf("snapshot: %v, %d pending uploads; want some", err, len(f.redo))
	}
	e.clock.Store(day.Start().Add(24*time.Hour + time.Hour + time.Minute).UnixNano())
	h2, hr2 := e.startHelper()
	l2, lr2 := e.startLeader(4)
	waitFor(t, "every report prepared", 60*time.Second, func() bool { return l2.Stats().Prepared == n })
	e.hclock.Store(e.clock.Load())
	waitFor(t, "the batch collected", 60*time.Second, func() bool { return l2.Shares.Load() == 1 })
	if st := l2.Stats(); len(st.Rejected) != 0 || h2.Stats().Prepared != n {
		t.Errorf("leader rejected %v, helper prepared %d; want none and %d", st.Rejected, h2.Stats().Prepared, n)
	}
	checkTotals(t, day.String(), e.unshardDay(e.shares(2)[campaign+"/"+day.String()]), want, n)
	t.Logf("restart after the close with %d pending uploads read again: %d prepared, totals equal", len(f.redo), l2.Stats().Prepared)
	lr2.stop(t, "leader")
	hr2.stop(t, "helper")
}

// TestLeaderPartitions: the leader reads only its campaign's uploads (an
// upload keyed with another campaign is never opened nor counted) and,
// when the uploads topic grows and the relays' key hash moves the
// campaign to another partition, reads that partition without a restart:
// every report is prepared once and the totals equal the clients' sums.
func TestLeaderPartitions(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 30, Bits: 4}
	e := newSvcEnv(t, m, 5, time.Hour)
	day := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	const n = 16
	cs, want := clients(rand.New(rand.NewPCG(11, 12)), n, m.Length, 15)
	ups := e.w.shardAll(t, day, cs)
	owner := func(count int) int {
		parts := make([]int, count)
		for i := range parts {
			parts[i] = i
		}
		return (&kafka.Hash{}).Balance(kafka.Message{Key: []byte(campaign)}, parts...)
	}
	grow := 5
	for owner(grow) == owner(4) {
		grow++
	}
	_, hr := e.startHelper()
	l := &LeaderService{Config: e.w.cfgL, Brokers: []string{e.br.Addr}, NATS: e.conn(), StateDir: e.lDir, Now: e.now, SignKey: e.signKey,
		MaxBatch: 4, MaxWait: 50 * time.Millisecond, RequestTimeout: 5 * time.Second, CollectRetry: 200 * time.Millisecond,
		PartitionRefresh: 100 * time.Millisecond}
	lr := e.start(l.Run)
	e.write(ups[:n/2]...)
	other := ikafka.NewWriter(e.br.Addr, protocol.Prio3UploadsTopic)
	if err := other.WriteMessages(e.ctx, kafka.Message{Key: []byte("another-campaign"), Value: []byte("not an upload of this campaign")}); err != nil {
		t.Fatal(err)
	}
	other.Close()
	waitFor(t, "the first half prepared", 60*time.Second, func() bool { return l.Stats().Prepared == n/2 })
	cl := &kafka.Client{Addr: kafka.TCP(e.br.Addr)}
	resp, err := cl.CreatePartitions(e.ctx, &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{{Name: protocol.Prio3UploadsTopic, Count: int32(grow)}}})
	if err != nil || resp.Errors[protocol.Prio3UploadsTopic] != nil {
		t.Fatalf("grow the topic: %v %v", err, resp)
	}
	time.Sleep(500 * time.Millisecond)
	e.write(ups[n/2:]...)
	waitFor(t, "every report prepared", 60*time.Second, func() bool { return l.Stats().Prepared == n })
	if st := l.Stats(); st.Uploads != n || len(st.Rejected) != 0 {
		t.Errorf("leader: %d uploads, rejected %v; want %d and none (the other campaign's upload skipped)", st.Uploads, st.Rejected, n)
	}
	e.setNow(day.Start().Add(24*time.Hour + time.Hour + time.Minute))
	waitFor(t, "the batch collected", 30*time.Second, func() bool { return l.Shares.Load() == 1 })
	checkTotals(t, day.String(), e.unshardDay(e.shares(2)[campaign+"/"+day.String()]), want, n)
	t.Logf("campaign partition %d of 4, then %d of %d: %d reports prepared, the other campaign's upload skipped", owner(4), owner(grow), grow, n)
	lr.stop(t, "leader")
	hr.stop(t, "helper")
}
