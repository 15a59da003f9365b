package prio3

import (
	"crypto/rand"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/cloudflare/circl/vdaf/prio3/sumvec"

	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// forgeOutOfRange is the test-only client that uploads an out-of-range
// vector (stock Shard range-checks its input): it shards honest twice with
// the same nonce and blinds but different helper seeds, and combines the
// first sharding's leader share and leader joint-randomness part with the
// second's helper share and helper part. Both PrepInits pass (each part
// matches its share), but the shares now sum to enc(honest) − H(seed₁) +
// H(seed₂): field elements far outside {0, 1}, which only the FLP proof
// check (PrepSharesToPrep) can reject.
func forgeOutOfRange(t testing.TB, w *world, day p3.Day, honest []uint64) []byte {
	t.Helper()
	c := w.v.Config
	sv, err := sumvec.New(2, uint(c.Length), uint(c.Bits), uint(c.Chunk), p3.Context(campaign, c))
	if err != nil {
		t.Fatal(err)
	}
	var nonce sumvec.Nonce
	rand.Read(nonce[:])
	r1 := make([]byte, w.v.RandSize()) // helper seed ‖ helper blind ‖ leader blind ‖ prove seed
	rand.Read(r1)
	r2 := append([]byte(nil), r1...)
	rand.Read(r2[:32])
	pub1, is1, err := sv.Shard(honest, &nonce, r1)
	if err != nil {
		t.Fatal(err)
	}
	pub2, is2, err := sv.Shard(honest, &nonce, r2)
	if err != nil {
		t.Fatal(err)
	}
	ls, _ := is1[0].MarshalBinary()
	hs, _ := is2[1].MarshalBinary()
	r := &p3.Report{Campaign: campaign, Day: day, ID: p3.ReportID(nonce),
		PublicShare: append(append([]byte(nil), pub1[:32]...), pub2[32:]...), LeaderShare: ls}
	if err := r.SealHelper(w.hk.PublicKey(), hs); err != nil {
		t.Fatal(err)
	}
	up, err := r.Seal(w.lk.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	return up
}

// TestAttackPrio3OutOfRange: 20 honest clients and one client whose vector
// is out of range. The helper's proof check rejects it ("proof", and the
// leader learns "helper_proof"); every total equals the honest clients'.
// Control: a helper without the proof check lets the same kind of report
// change the totals.
func TestAttackPrio3OutOfRange(t *testing.T) {
	const n, length = 20, 50
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4}
	day := p3.Day(20000)
	counts := smallCounts(n, length)
	want := wantTotals(counts, length, 15)
	run := func(skip bool) (changed int, res *p3.Result, w *world) {
		w = newWorld(t, m, 5)
		w.h.skipProofCheck = skip
		ups := w.shardAll(t, day, counts)
		ups = append(ups, forgeOutOfRange(t, w, day, make([]uint64, length)))
		w.upload(t, day.Start(), ups)
		now := day.Start().Add(26 * time.Hour)
		outs, err := w.l.Apply(Event{Now: now, Kind: EventCollect, Day: day})
		if err != nil {
			t.Fatal(err)
		}
		got, err := w.route(now, outs)
		if err != nil || len(got) != 2 {
			t.Fatal(err, len(got))
		}
		sum, l, err := w.c.UnshardFields(got[0], got[1])
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			f := p3.FieldOf(want[i])
			if !sum[i].IsEqual(&f) {
				changed++
			}
		}
		return changed, &p3.Result{Count: l.Count}, w
	}
	changed, res, w := run(false)
	ctlChanged, ctlRes, _ := run(true)
	fmt.Printf("ATTACK prio3-out-of-range: 1 forged out-of-range report among %d: rejected (helper %q=%d, leader %q=%d), batch count %d, %d of %d keyword totals changed; control without the proof check: count %d, %d of %d totals changed\n",
		n, "proof", w.h.Stats.Rejected["proof"], "helper_proof", w.l.Stats.Rejected["helper_proof"], res.Count, changed, length, ctlRes.Count, ctlChanged, length)
	if changed != 0 || res.Count != n || w.h.Stats.Rejected["proof"] != 1 || w.l.Stats.Rejected["helper_proof"] != 1 {
		t.Fatal("the out-of-range report changed the batch")
	}
	if ctlChanged == 0 || ctlRes.Count != n+1 {
		t.Fatal("control: the forged report should change the totals without the proof check")
	}
}

// TestAttackPrio3Replay: one client's upload arrives three times, and a
// leader re-sends the same preparation request; the report counts once.
// Control: without the report-id checks at both, it counts three times.
func TestAttackPrio3Replay(t *testing.T) {
	const n, length = 10, 20
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4}
	day := p3.Day(20000)
	counts := smallCounts(n, length)
	run := func(skip bool) (*p3.Result, *world) {
		w := newWorld(t, m, 5)
		w.l.skipReplayCheck, w.h.skipReplayCheck = skip, skip
		ups := w.shardAll(t, day, counts)
		now := day.Start()
		for _, u := range append(ups, ups[0], ups[0]) {
			w.l.Apply(Event{Now: now, Kind: EventUpload, Msg: u})
		}
		reqs, _ := w.l.Apply(Event{Now: now, Kind: EventTick})
		// the leader re-sends its request: the helper answers, nothing more
		for _, q := range reqs {
			if _, err := w.h.Apply(Event{Now: now, Kind: EventAggregateReq, Msg: q.Msg}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.route(now, reqs); err != nil {
			t.Fatal(err)
		}
		w.l.Apply(Event{Now: now, Kind: EventUpload, Msg: ups[0]}) // after commit
		reqs, _ = w.l.Apply(Event{Now: now, Kind: EventTick})
		w.route(now, reqs)
		if skip {
			return nil, w // the two sides' counts differ: nothing to collect
		}
		res, err := w.collect(day)
		if err != nil {
			t.Logf("collection failed: %v", err)
			res = &p3.Result{Totals: make([]int64, length)}
		}
		return res, w
	}
	res, w := run(false)
	_, cw := run(true)
	k := 0 // client 0's first keyword
	fmt.Printf("ATTACK prio3-replay: 1 report uploaded 4 times and its preparation request sent twice, among %d clients: batch count %d, keyword total %d (true %d), replays dropped leader=%d helper=%d; control without report-id checks: leader counted %d, helper %d reports of %d\n",
		n, res.Count, res.Totals[k], wantTotals(counts, length, 15)[k], w.l.Stats.Rejected["replay"], w.h.Stats.Rejected["replay"], cw.l.batches[day].count, cw.h.batches[day].count, n)
	if res.Count != n || w.l.batches[day].count != n || w.h.batches[day].count != n {
		t.Fatalf("replayed report counted: collected %d, leader %d, helper %d", res.Count, w.l.batches[day].count, w.h.batches[day].count)
	}
	equalTotals(t, res.Totals, wantTotals(counts, length, 15))
	if cw.l.batches[day].count <= n || cw.h.batches[day].count <= n {
		t.Fatal("control: replays should count without the checks")
	}
}

// TestAttackPrio3SmallBatch: a batch of one report (minimum 10) is never
// revealed: the leader refuses to collect it and, when a leader asks
// anyway, the helper refuses its share. Control: a helper without the
// minimum hands its share, and the collector reads the one client's vector.
func TestAttackPrio3SmallBatch(t *testing.T) {
	const length = 20
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4}
	day := p3.Day(20000)
	counts := smallCounts(1, length)
	counts[0][7] = 9
	run := func(skip bool) (leaderErr error, shares int, revealed int, w *world) {
		w = newWorld(t, m, 10)
		w.h.skipMinBatch = skip
		w.upload(t, day.Start(), w.shardAll(t, day, counts))
		now := day.Start().Add(26 * time.Hour)
		_, leaderErr = w.l.Apply(Event{Now: now, Kind: EventCollect, Day: day})
		// a leader that skips its own check asks the helper directly
		b := w.l.batches[day]
		q := &p3.CollectReq{Campaign: campaign, Day: day, Count: b.count, Checksum: b.checksum}
		msg, _ := q.MarshalBinary()
		w.l.collecting[day] = true
		got, _ := w.route(now, []Output{{To: ToHelper, Msg: msg}})
		shares = len(got)
		if shares == 2 {
			c := *w.c
			c.MinBatchSize = 1
			res, err := c.Unshard(got[0], got[1])
			if err != nil {
				t.Fatal(err)
			}
			for i := range res.Totals {
				if res.Totals[i] == int64(min(counts[0][i], 15)) {
					revealed++
				}
			}
		}
		return
	}
	lerr, shares, _, w := run(false)
	_, ctlShares, ctlRevealed, _ := run(true)
	fmt.Printf("ATTACK prio3-small-batch: batch of 1 report (min 10): leader refused (%v), helper refused %q=%d, shares to the collector %d; control without the helper's minimum: %d shares, %d of %d keywords of the client's vector revealed\n",
		lerr != nil, "small_batch", w.h.Stats.CollectRefused["small_batch"], shares, ctlShares, ctlRevealed, length)
	if lerr == nil || shares != 0 || w.h.Stats.CollectRefused["small_batch"] != 1 {
		t.Fatal("a batch under the minimum was revealed")
	}
	if ctlShares != 2 || ctlRevealed != length {
		t.Fatal("control: without the minimum the single vector should be revealed")
	}
}

// TestAttackPrio3BatchMismatch: after 20 reports prepared at both, a
// leader claims other reports than the helper prepared — one id swapped
// (same count), one report fewer, one more — and gets no helper share each
// time. Control: without the count/checksum comparison the helper hands it.
func TestAttackPrio3BatchMismatch(t *testing.T) {
	const n, length = 20, 10
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4}
	day := p3.Day(20000)
	run := func(skip bool) (refused, released int, w *world) {
		w = newWorld(t, m, 5)
		w.h.skipBatchCheck = skip
		w.upload(t, day.Start(), w.shardAll(t, day, smallCounts(n, length)))
		b := w.l.batches[day]
		var someID, other p3.ReportID
		for id := range b.ids {
			someID = id
			break
		}
		rand.Read(other[:])
		swapped := b.checksum
		swapped.Add(someID)
		swapped.Add(other)
		fewer := b.checksum
		fewer.Add(someID)
		more := b.checksum
		more.Add(other)
		now := day.Start().Add(26 * time.Hour)
		for _, c := range []struct {
			count uint64
			sum   p3.Checksum
		}{{n, swapped}, {n - 1, fewer}, {n + 1, more}} {
			q := &p3.CollectReq{Campaign: campaign, Day: day, Count: c.count, Checksum: c.sum}
			msg, _ := q.MarshalBinary()
			out, err := w.h.Apply(Event{Now: now, Kind: EventCollectReq, Msg: msg})
			if err != nil {
				t.Fatal(err)
			}
			a, err := p3.ParseAggShare(out[0].Msg)
			if err != nil {
				t.Fatal(err)
			}
			if a.Reason != "" {
				refused++
			} else {
				released++
			}
		}
		return
	}
	refused, released, w := run(false)
	ctlRefused, ctlReleased, _ := run(true)
	fmt.Printf("ATTACK prio3-batch-mismatch: leader claims 3 report sets other than the helper's %d (id swapped, one fewer, one more): %d refused (%q=%d), %d shares released; control without the count/checksum check: %d refused, %d released\n",
		n, refused, "mismatch", w.h.Stats.CollectRefused["mismatch"], released, ctlRefused, ctlReleased)
	if released != 0 || refused != 3 {
		t.Fatal("the helper released its share for a mismatched batch")
	}
	if ctlReleased != 3 {
		t.Fatal("control: without the check the helper should release")
	}
}

// TestAttackPrio3LeaderAlone: the leader operator's key and state (its
// prepared share of every report) reveal no client's vector. Over 300
// reports of random clipped counts: the leader cannot open the helper's
// shares with its key; guessing each count from its own share (the share's
// low 4 bits) matches at chance (1/16), and the low byte of its shares is
// uniform (χ² over 256 bins). Control: with the helper share not sealed (a
// layout where the leader can read it: here opened with the helper's key),
// the leader recovers every count.
func TestAttackPrio3LeaderAlone(t *testing.T) {
	const n, length = 300, 40
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4}
	day := p3.Day(20000)
	w := newWorld(t, m, 5)
	counts := make([][]uint64, n)
	for i := range counts {
		counts[i] = make([]uint64, length)
		var b [length]byte
		rand.Read(b[:])
		for j := range counts[i] {
			counts[i][j] = uint64(b[j] % 16)
		}
	}
	ups := w.shardAll(t, day, counts)
	truth := map[p3.ReportID][]uint64{}
	opened, matched, ctlMatched, cells := 0, 0, 0, 0
	var bins [256]float64
	var vk [32]byte
	copy(vk[:], "a verify key of thirty-two bytes")
	for i, u := range ups {
		w.l.Apply(Event{Now: day.Start(), Kind: EventUpload, Msg: u})
		r, err := p3.OpenReport(w.cfgL.Keys, u)
		if err != nil {
			t.Fatal(err)
		}
		truth[r.ID] = counts[i]
		if _, err := p3.OpenHelperShare(w.lk, r.Campaign, r.Day, r.ID, r.PublicShare, r.SealedHelper); err == nil {
			opened++
		}
		// control: the helper share readable by the leader
		hs, err := p3.OpenHelperShare(w.hk, r.Campaign, r.Day, r.ID, r.PublicShare, r.SealedHelper)
		if err != nil {
			if hs, err = p3.OpenHelperShare(w.lk, r.Campaign, r.Day, r.ID, r.PublicShare, r.SealedHelper); err != nil {
				t.Fatal(err)
			}
		}
		hp, err := w.v.PrepInit(vk, r.ID, 1, r.PublicShare, hs)
		if err != nil {
			t.Fatal(err)
		}
		hv, _ := p3.DecodeVec(hp.State[:length*16], length)
		lv, _ := p3.DecodeVec(w.l.pending[r.ID][0].state[:length*16], length)
		hv.AddAssign(lv)
		rec, err := p3.Signed(hv)
		if err != nil {
			t.Fatal(err)
		}
		for j := range rec {
			if rec[j] == int64(counts[i][j]) {
				ctlMatched++
			}
		}
	}
	// the leader's view: its state only
	for id, ps := range w.l.pending {
		v, err := p3.DecodeVec(ps[0].state[:length*16], length)
		if err != nil {
			t.Fatal(err)
		}
		for j := range v {
			b, _ := v[j].MarshalBinary()
			bins[b[0]]++
			cells++
			if uint64(b[0]&15) == truth[id][j] {
				matched++
			}
		}
	}
	exp := float64(cells) / 256
	chi := 0.0
	for _, o := range bins {
		chi += (o - exp) * (o - exp) / exp
	}
	rate := float64(matched) / float64(cells)
	sigma := math.Sqrt(float64(cells)*(1.0/16)*(15.0/16)) / float64(cells)
	fmt.Printf("ATTACK prio3-leader-alone: leader's key and state over %d reports (%d counts): helper shares opened %d, counts guessed %.4f (chance 0.0625 ± %.4f), low-byte χ²=%.0f (255 dof, critical 370: p < 10⁻⁶); control with the helper share unsealed: %d of %d counts recovered\n",
		n, cells, opened, rate, sigma, chi, ctlMatched, cells)
	if opened != 0 || rate > 1.0/16+5*sigma || chi > 370 {
		t.Fatal("the leader's view carries information about the clients' vectors")
	}
	if ctlMatched != cells {
		t.Fatal("control: an unsealed helper share should reveal every count")
	}
}
