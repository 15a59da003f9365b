package prio3

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// dayStatus is what the collector (and so the release) learns of a day
// from the shares topic: "released" (both aggregate shares), "withheld"
// (the leader's small-batch notice) or "absent" (nothing).
func dayStatus(t *testing.T, msgs [][]byte) string {
	t.Helper()
	switch {
	case len(msgs) == 0:
		return "absent"
	case len(msgs) == 1:
		a, err := p3.ParseAggShare(msgs[0])
		if err != nil || a.Role != 0 || a.Reason != p3.ReasonSmallBatch || a.Count != 0 || len(a.Sealed) != 0 {
			t.Fatalf("one message for a day, not a small-batch notice without a count: %+v, %v", a, err)
		}
		return "withheld"
	case len(msgs) == 2:
		return "released"
	}
	t.Fatalf("%d messages for one day", len(msgs))
	return ""
}

// TestAttackPrio3MinBatchStatus measures the one bit per day that the
// released/withheld status publishes about the exact report count, which
// the noise does not cover (docs/threat-model.md, "below_min_batch"). The
// real leader and helper services (embedded NATS, kfake, noise ε = 1 per
// person-day at both) run neighbouring days: D with min − 1 = 4 clients
// against D' with one person more (5 = the minimum batch), and D with 0
// clients against D' with 1. The status is read where the release reads
// it, from the shares topic: both shares (released, a pdd_rounds row),
// the leader's notice (withheld, a pdd_withheld below_min_batch row) or
// nothing. An ε-DP status would differ in a pair with probability at most
// 1 − e^−ε ≈ 0.63 beyond chance; here the status is a deterministic
// function of the exact count and differs in every pair. The test holds
// the documented figure: it fails when the status stops leaking (then
// update the threat model) or leaks differently.
func TestAttackPrio3MinBatchStatus(t *testing.T) {
	const minBatch, pairs = 5, 4
	m := p3.Config{Kind: p3.KindSumVec, Length: 20, Bits: 4}
	e := newSvcEnv(t, m, minBatch, time.Hour)
	e.w.cfgL.Epsilon, e.w.cfgH.Epsilon = 1, 1
	first := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	e.setNow(first.Start().Add(12 * time.Hour))
	rng := rand.New(rand.NewPCG(41, 42))
	// days: per pair i, four days: D = min−1, D' = min, Z = 0, Z' = 1 clients
	sizes := []int{minBatch - 1, minBatch, 0, 1}
	ups := map[p3.Day][][]byte{}
	for i := range pairs {
		for j, n := range sizes {
			if n == 0 {
				continue
			}
			day := first + p3.Day(4*i+j)
			cs, _ := clients(rng, n, m.Length, 15)
			ups[day] = e.w.shardAll(t, day, cs)
		}
	}
	// each day's uploads on that day by both clocks (a later day's are
	// "future", a closed day's late)
	last := first + p3.Day(4*pairs-1)
	_, hr := e.startHelper()
	l, lr := e.startLeader(0)
	for d := first; d <= last; d++ {
		e.setNow(d.Start().Add(12 * time.Hour))
		if mine := ups[d]; len(mine) > 0 {
			before := l.Stats().Prepared
			e.write(mine...)
			waitFor(t, fmt.Sprintf("the %d uploads of %s prepared", len(mine), d), 60*time.Second,
				func() bool { return l.Stats().Prepared == before+uint64(len(mine)) })
		}
	}
	e.setNow(last.Start().Add(24*time.Hour + 2*time.Hour))
	// released days write 2 messages, withheld days 1 (the notice)
	want := pairs * (2 + 1 + 1)
	waitFor(t, "every batch collected or refused", 60*time.Second, func() bool {
		return l.Shares.Load() == pairs && l.Stats().CollectRefused["small_batch"] == 2*pairs
	})
	got := e.shares(want)
	lr.stop(t, "leader")
	hr.stop(t, "helper")
	differ, differZero := 0, 0
	for i := range pairs {
		st := func(j int) string { return dayStatus(t, got[campaign+"/"+(first+p3.Day(4*i+j)).String()]) }
		d, d1, z, z1 := st(0), st(1), st(2), st(3)
		if d != "withheld" || d1 != "released" || z != "absent" || z1 != "withheld" {
			t.Errorf("pair %d: status %s / %s (min−1 / min), %s / %s (0 / 1)", i, d, d1, z, z1)
		}
		if d != d1 {
			differ++
		}
		if z != z1 {
			differZero++
		}
	}
	fmt.Printf("ATTACK prio3-min-batch-status: neighbouring days at the minimum batch (%d vs %d clients, ε = 1 noise at both aggregators): published status differs in %d of %d pairs; at 0 vs 1 client (the below_min_batch record): %d of %d; accepted and documented (docs/threat-model.md): the status is the exact count's threshold bit, not covered by ε\n",
		minBatch-1, minBatch, differ, pairs, differZero, pairs)
	if differ != pairs || differZero != pairs {
		t.Fatalf("the status leaked in %d and %d of %d pairs, not as documented (%d): update docs/threat-model.md", differ, differZero, pairs, pairs)
	}
}
