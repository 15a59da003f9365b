package prio3

import (
	"fmt"
	"math"
	"testing"
)

// TestAttackPrio3RecollectEpsilon: the leader (with the collector) asks
// the helper for one batch's aggregate share again and again — 20 times
// at the helper's ε = 1, then after the helper's operator restarted it at
// ε = 4 and with exact shares (ε = 0) — and unshards each with its own
// exact share (the leader adds no noise), to average the helper's noise
// away or catch an exact share. The helper keeps its first draw and the ε
// it was drawn under in its state (noise.go): every re-collection seals
// the same noisy share, labelled ε = 1, so the attacker holds one draw.
// Control: a helper that does not keep its draw (each collection served
// from its state before the first seal, as a restart from an older
// snapshot would): fresh draws average down and the ε = 0 restart hands
// the exact share.
func TestAttackPrio3RecollectEpsilon(t *testing.T) {
	const length, again = 200, 20
	w, ds, exact := noiseSetup(t, length, 1)
	day := ds[0]
	lb0, _ := w.l.MarshalBinary()
	hb0, _ := w.h.MarshalBinary()
	type result struct {
		distinct, exactEntries int
		rmse                   float64
		eps                    map[float64]int
	}
	run := func(keep bool) result {
		res := result{eps: map[float64]int{}}
		n := restored(t, w, lb0, hb0, 0, 1)
		seen := map[string]bool{}
		var sum []float64
		k := 0
		collect := func(epsH float64) {
			cur := n
			if !keep {
				cur = restored(t, w, lb0, hb0, 0, epsH) // the draw lost
			} else if epsH != 1 {
				lb, _ := n.l.MarshalBinary()
				hb, _ := n.h.MarshalBinary()
				cur = restored(t, w, lb, hb, 0, epsH) // the helper restarted with another ε
			}
			l, h := cur.shares(t, day)
			p, e := w.opened(t, h)
			seen[string(p)] = true
			res.eps[e]++
			d := w.diff(t, l, h, exact[0])
			if sum == nil {
				sum = make([]float64, len(d))
			}
			all := true
			for i, x := range d {
				sum[i] += float64(x)
				all = all && x == 0
			}
			k++
			if e == 0 && all {
				res.exactEntries = length // an exact share: the whole vector
			}
		}
		for range again {
			collect(1)
		}
		collect(4)
		collect(0)
		var se float64
		zero := 0
		for _, s := range sum {
			m := s / float64(k)
			se += m * m
			if math.Round(m) == 0 {
				zero++
			}
		}
		res.rmse = math.Sqrt(se / float64(len(sum)))
		res.distinct = len(seen)
		if res.exactEntries == 0 {
			res.exactEntries = zero
		}
		return res
	}
	after := run(true)
	before := run(false)
	fmt.Printf("ATTACK prio3-recollect-epsilon: the leader collects one batch %d times from the helper (ε = 1 ×%d, then restarted at ε = 4 and ε = 0) and averages against its exact share (L = %d, S = 15): after: %d distinct helper share(s), ε labels %v, averaged error RMS %.1f (one draw: %.1f), %d of %d totals exact; before (the draw not kept): %d distinct shares, ε labels %v, RMS %.1f, %d of %d totals exact\n",
		again+2, again, length, after.distinct, after.eps, after.rmse, math.Sqrt(2)*15, after.exactEntries, length,
		before.distinct, before.eps, before.rmse, before.exactEntries, length)
	if after.distinct != 1 || after.eps[1] != again+2 || after.exactEntries > length/4 {
		t.Fatalf("re-collection gave the leader more than one draw: %d distinct shares, labels %v, %d exact", after.distinct, after.eps, after.exactEntries)
	}
	if before.exactEntries != length {
		t.Fatalf("control: without the kept draw the ε = 0 restart should hand the exact share (%d of %d)", before.exactEntries, length)
	}
}
