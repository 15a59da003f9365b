package prio3

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchConfigs: CROWDLOG_PRIO3_L (default 10,000 keywords).
func benchLength() int {
	if n, err := strconv.Atoi(os.Getenv("CROWDLOG_PRIO3_L")); err == nil && n > 0 {
		return n
	}
	return 10000
}

// BenchmarkPrep measures, per report and one core (CPU time), the client's
// shard, the leader's and the helper's preparation through the state
// machines (HPKE opens, PrepInit, the proof check, PrepNext, commit), and
// the bare circl PrepInit (both aggregators) + PrepSharesToPrep on the same
// reports in the same run, for SumVec b = 1 and 4 and presence (w = 100) at
// L = CROWDLOG_PRIO3_L. It prints
//
//	PRIO3 <measurement> L=… chunk=… n=… shard_ms=… leader_ms=… helper_ms=… bare_leader_ms=… bare_helper_ms=… ratio_leader=… ratio_helper=… ratio=… upload_bytes=… leader_share_bytes=… prep_share_bytes=…
//
// where bare_leader is circl's PrepInit as aggregator 0, bare_helper its
// PrepInit as aggregator 1 + PrepSharesToPrep, and ratio_X = bare_X / X:
// the prio3-prep bound (each state machine's reports/s per core against
// circl's); ratio is both together.
func BenchmarkPrep(b *testing.B) {
	length := benchLength()
	for _, m := range []p3.Config{
		{Kind: p3.KindSumVec, Length: length, Bits: 1},
		{Kind: p3.KindSumVec, Length: length, Bits: 4},
		{Kind: p3.KindPresence, Length: length, MaxWeight: 100},
	} {
		name := fmt.Sprintf("sumvec-b%d", m.Bits)
		if m.Kind == p3.KindPresence {
			name = fmt.Sprintf("presence-w%d", m.MaxWeight)
		}
		b.Run(name, func(b *testing.B) { benchPrep(b, m, name) })
	}
}

// BenchmarkChunk compares chunk lengths for SumVec b = 4 at L =
// CROWDLOG_PRIO3_L (157, 200, 315 at L = 10,000: ⌊√(L·b)/2⌋, √(L·b), ...).
func BenchmarkChunk(b *testing.B) {
	length := benchLength()
	for _, c := range []int{157, 200, 315} {
		m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4, Chunk: c}
		b.Run(fmt.Sprintf("chunk%d", c), func(b *testing.B) { benchPrep(b, m, fmt.Sprintf("sumvec-b4-chunk%d", c)) })
	}
}

func benchPrep(b *testing.B, m p3.Config, name string) {
	w := newWorld(b, m, 1)
	n := max(b.N, 3)
	counts := make([][]uint64, n)
	for i := range counts {
		c := make([]uint64, m.Length)
		for j := 0; j < 100; j++ {
			c[(i*7919+j*104729)%m.Length] = uint64(1 + (i+j)%15)
		}
		counts[i] = c
	}
	day := p3.Day(20000)
	now := day.Start().Add(time.Hour)
	t0 := cpuNow()
	uploads := make([][]byte, n)
	for i := range uploads {
		var err error
		if uploads[i], _, _, err = w.v.Shard(campaign, day, counts[i], w.lk.PublicKey(), w.hk.PublicKey()); err != nil {
			b.Fatal(err)
		}
	}
	shard := cpuNow() - t0
	// interleaved per report, so that drift in the machine's load hits the
	// state machines and bare circl alike
	var vk [32]byte
	copy(vk[:], "a verify key of thirty-two bytes")
	var leader, helper, bareL, bareH time.Duration
	var prepShare int
	runtime.GC()
	b.ResetTimer()
	for _, u := range uploads {
		t0 := cpuNow()
		if _, err := w.l.Apply(Event{Now: now, Kind: EventUpload, Msg: u}); err != nil {
			b.Fatal(err)
		}
		reqs, err := w.l.Apply(Event{Now: now, Kind: EventTick})
		if err != nil || len(reqs) != 1 {
			b.Fatal(err)
		}
		t1 := cpuNow()
		resps, err := w.h.Apply(Event{Now: now, Kind: EventAggregateReq, Msg: reqs[0].Msg})
		if err != nil {
			b.Fatal(err)
		}
		t2 := cpuNow()
		if _, err := w.l.Apply(Event{Now: now, Kind: EventAggregateResp, Msg: resps[0].Msg}); err != nil {
			b.Fatal(err)
		}
		t3 := cpuNow()
		leader += t1 - t0 + t3 - t2
		helper += t2 - t1
		// bare circl on the same report: PrepInit (leader), PrepInit + PrepSharesToPrep (helper)
		b.StopTimer()
		r, _ := p3.OpenReport(w.cfgL.Keys, u)
		hs, _ := p3.OpenHelperShare(w.hk, r.Campaign, r.Day, r.ID, r.PublicShare, r.SealedHelper)
		b.StartTimer()
		t0 = cpuNow()
		lp, err1 := w.v.PrepInit(vk, r.ID, 0, r.PublicShare, r.LeaderShare)
		t1 = cpuNow()
		hp, err2 := w.v.PrepInit(vk, r.ID, 1, r.PublicShare, hs)
		_, err3 := w.v.PrepSharesToPrep(lp.Share, hp.Share)
		bareL += t1 - t0
		bareH += cpuNow() - t1
		if err1 != nil || err2 != nil || err3 != nil {
			b.Fatal(err1, err2, err3)
		}
		prepShare = len(lp.Share)
	}
	b.StopTimer()
	if w.l.Stats.Prepared != uint64(n) || w.h.Stats.Prepared != uint64(n) {
		b.Fatalf("prepared %d/%d of %d", w.l.Stats.Prepared, w.h.Stats.Prepared, n)
	}
	r, _ := p3.OpenReport(w.cfgL.Keys, uploads[0])
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	chunk := m.Chunk
	if chunk == 0 {
		chunk = p3.DefaultChunk(m)
	}
	// wire_bytes: what the client publishes to relay a for this upload (the
	// relay b layer and relay a's around it, padded to their size classes)
	wire, err := wireBytes(campaign, uploads[0])
	if err != nil {
		b.Fatal(err)
	}
	fmt.Printf("PRIO3 %s L=%d chunk=%d n=%d shard_ms=%.2f leader_ms=%.2f helper_ms=%.2f bare_leader_ms=%.2f bare_helper_ms=%.2f ratio_leader=%.3f ratio_helper=%.3f ratio=%.3f upload_bytes=%d leader_share_bytes=%d prep_share_bytes=%d wire_bytes=%d\n",
		name, m.Length, chunk, n, ms(shard), ms(leader), ms(helper), ms(bareL), ms(bareH), float64(bareL)/float64(leader), float64(bareH)/float64(helper),
		float64(bareL+bareH)/float64(leader+helper), len(uploads[0]), len(r.LeaderShare), prepShare, wire)
}

// wireBytes is the length of the onion a client publishes for upload: relay
// b's layer (HopKafkaPrio3, key = campaign) inside relay a's.
func wireBytes(campaign string, upload []byte) (int, error) {
	ka, err := onion.GenerateKeyPair(1)
	if err != nil {
		return 0, err
	}
	kb, err := onion.GenerateKeyPair(2)
	if err != nil {
		return 0, err
	}
	l2, err := onion.SealLayer(kb.PublicKey(), onion.Hop{Kind: onion.HopKafkaPrio3, Key: []byte(campaign)}, upload)
	if err != nil {
		return 0, err
	}
	l1, err := onion.SealLayer(ka.PublicKey(), onion.Hop{Kind: onion.HopRelay, Subject: "crowdlog.relay.b"}, l2)
	return len(l1), err
}
