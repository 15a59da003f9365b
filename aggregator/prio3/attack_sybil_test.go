package prio3

import (
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// mintHelperToken runs one real issuance (token.NewRequest, PrivateKey.Issue,
// Pending.Finalize) of a helper token for r under the key that seed derives
// for r's campaign-day, and returns the encoded token.
func mintHelperToken(t testing.TB, seed []byte, r *p3.Report) []byte {
	t.Helper()
	k, err := token.DeriveKey(token.KindPrio3Helper, token.Prio3Epoch(r.Campaign, uint32(r.Day)), seed)
	if err != nil {
		t.Fatal(err)
	}
	p, blinded, err := token.NewRequest(k.Public(), token.KindPrio3Helper, k.Epoch(), [][32]byte{r.HelperNonce()})
	if err != nil {
		t.Fatal(err)
	}
	ev, proof, err := k.Issue(blinded)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := p.Finalize(ev, proof)
	if err != nil {
		t.Fatal(err)
	}
	b, err := toks[0].MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newSeed(t testing.TB) []byte {
	s := make([]byte, token.SeedSize)
	if _, err := rand.Read(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// shardWithToken shards counts into a report carrying a helper token that
// seed's issuer minted (nil seed: no token) and seals it to w's leader.
func (w *world) shardWithToken(t testing.TB, day p3.Day, counts []uint64, seed []byte) (*p3.Report, []byte) {
	t.Helper()
	r, _, err := w.v.ShardReport(campaign, day, counts, w.hk.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if seed != nil {
		r.HelperToken = mintHelperToken(t, seed, r)
	}
	up, err := r.Seal(w.lk.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	return r, up
}

// TestAttackPrio3LeaderSybil: a malicious leader isolates one client. It
// keeps the target's upload, drops the other honest ones and pads the
// batch with MinBatchSize − 1 reports of its own whose values it knows
// (all zero), each with a helper token it minted from an issuer of its own
// (it runs one, and holds every public key) or, for the other half, a real
// helper token it took from a dropped honest upload. It then collects and
// subtracts its known values. With helper tokens the helper refuses every
// fabricated report, the batch stays at 1 report and nothing is released.
// Control: a helper that needs no token (the code before helper tokens)
// prepares them all and the release gives the target's whole clipped
// vector.
func TestAttackPrio3LeaderSybil(t *testing.T) {
	const length, minBatch = 200, 100
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: p3.DefaultBits}
	day := p3.DayOf(time.Date(2006, 3, 2, 0, 0, 0, 0, time.UTC))
	now := day.Start().Add(12 * time.Hour)
	target := make([]uint64, length)
	for i := range target {
		target[i] = uint64(1 + (i*7)%20) // some above the clip (15)
	}
	type result struct {
		fabricated, refused, count uint64
		reasons                    map[string]uint64
		shares, recovered          int
	}
	run := func(tokens bool) result {
		w := newWorld(t, m, minBatch)
		helperSeed, leaderSeed := newSeed(t), newSeed(t)
		if tokens {
			w.cfgH.TokenSeed = helperSeed
			h, err := NewHelper(w.cfgH)
			if err != nil {
				t.Fatal(err)
			}
			w.h = h
		}
		// honest clients: the target and minBatch − 1 others, each with
		// its one helper token; the leader receives them all
		_, targetUp := w.shardWithToken(t, day, target, helperSeed)
		var stolen [][]byte
		for i := 1; i < minBatch; i++ {
			r, _ := w.shardWithToken(t, day, smallCounts(1, length)[0], helperSeed)
			stolen = append(stolen, r.HelperToken) // the leader opens and drops the upload
		}
		// the leader's batch: the target and its own reports
		uploads := [][]byte{targetUp}
		zeros := make([]uint64, length)
		for i := 1; i < minBatch; i++ {
			r, _, err := w.v.ShardReport(campaign, day, zeros, w.hk.PublicKey())
			if err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				r.HelperToken = mintHelperToken(t, leaderSeed, r)
			} else {
				r.HelperToken = stolen[i-1]
			}
			up, err := r.Seal(w.lk.PublicKey())
			if err != nil {
				t.Fatal(err)
			}
			uploads = append(uploads, up)
		}
		w.upload(t, now, uploads)
		res := result{fabricated: minBatch - 1, reasons: w.h.Stats.Rejected}
		for _, n := range w.h.Stats.Rejected {
			res.refused += n
		}
		b := w.l.batches[day]
		if b != nil {
			res.count = b.count
		}
		// collect; when the leader's own minimum stops it, ask the helper
		// directly as a leader that skips its check would
		at := day.Start().Add(26 * time.Hour)
		var got [][]byte
		if lo, err := w.l.Apply(Event{Now: at, Kind: EventCollect, Day: day}); err == nil {
			got, _ = w.route(at, lo)
		} else {
			q := p3.CollectReq{Campaign: campaign, Day: day}
			if b != nil {
				q.Count, q.Checksum = b.count, b.checksum
			}
			msg, _ := q.MarshalBinary()
			w.l.collecting[day] = true
			more, _ := w.route(at, []Output{{To: ToHelper, Msg: msg}})
			got = append(got, more...)
		}
		res.shares = len(got)
		if len(got) == 2 {
			out, err := w.c.Unshard(got[0], got[1])
			if err != nil {
				t.Fatal(err)
			}
			clipped, _ := m.Clip(target)
			for i := range out.Totals {
				if out.Totals[i] == int64(clipped[i]) { // minus the leader's known zeros
					res.recovered++
				}
			}
		}
		return res
	}
	after := run(true)
	before := run(false)
	fmt.Printf("ATTACK prio3-leader-sybil: leader keeps 1 honest upload and adds %d fabricated reports (L = %d, min %d, ε = 0): helper refused %d (%v), batch count %d, shares to the collector %d, %d of %d of the target's counts recovered (before: helper prepared all, count %d, %d shares, %d of %d recovered)\n",
		after.fabricated, length, minBatch, after.refused, after.reasons, after.count, after.shares, after.recovered, length,
		before.count, before.shares, before.recovered, length)
	if after.refused != after.fabricated || after.count != 1 || after.shares != 0 || after.recovered != 0 {
		t.Fatal("the helper prepared reports the leader fabricated, or released a batch of one client")
	}
	if before.count != minBatch || before.recovered != length {
		t.Fatalf("control: without helper tokens the padded batch should release the target's vector (count %d, %d recovered)", before.count, before.recovered)
	}
}

// TestHelperTokensRestart: a report's helper token survives the leader's
// restart while the report waits (state version 3), and the helper's
// restored state still spends it: the same report sent again by a fresh
// leader is counted once, and the token moved to a new report is refused.
func TestHelperTokensRestart(t *testing.T) {
	const length = 20
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4}
	day := p3.DayOf(time.Date(2006, 3, 2, 0, 0, 0, 0, time.UTC))
	now := day.Start().Add(12 * time.Hour)
	w := newWorld(t, m, 1)
	seed := newSeed(t)
	w.cfgH.TokenSeed = seed
	h, err := NewHelper(w.cfgH)
	if err != nil {
		t.Fatal(err)
	}
	w.h = h
	r, up := w.shardWithToken(t, day, smallCounts(1, length)[0], seed)
	if _, err := w.l.Apply(Event{Now: now, Kind: EventUpload, Msg: up}); err != nil {
		t.Fatal(err)
	}
	// the leader restarts with the report pending
	st, err := w.l.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if w.l, err = RestoreLeader(w.cfgL, st); err != nil {
		t.Fatal(err)
	}
	w.upload(t, now, nil)
	if w.h.Stats.Prepared != 1 || len(w.h.Stats.Rejected) != 0 {
		t.Fatalf("after the leader's restart: prepared %d, rejected %v", w.h.Stats.Prepared, w.h.Stats.Rejected)
	}
	// the helper restarts; a fresh leader sends the same upload again
	hs, err := w.h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if w.h, err = RestoreHelper(w.cfgH, hs); err != nil {
		t.Fatal(err)
	}
	if w.l, err = NewLeader(w.cfgL); err != nil {
		t.Fatal(err)
	}
	w.upload(t, now, [][]byte{up})
	if b := w.h.batches[day]; b == nil || b.count != 1 {
		t.Fatalf("the same report again after the helper's restart: batch %+v", b)
	}
	// the token moved to another report of the day
	r2, _, err := w.v.ShardReport(campaign, day, smallCounts(1, length)[0], w.hk.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	r2.HelperToken = r.HelperToken
	up2, _ := r2.Seal(w.lk.PublicKey())
	w.upload(t, now, [][]byte{up2})
	if w.h.batches[day].count != 1 || w.h.Stats.Rejected[ReasonTokenBinding] != 1 {
		t.Fatalf("moved token: count %d, rejected %v", w.h.batches[day].count, w.h.Stats.Rejected)
	}
}
