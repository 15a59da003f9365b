package prio3

import (
	"fmt"
	"testing"
	"time"

	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// mintToken runs one real issuance of a token of kind (KindPrio3Helper or
// KindPrio3Leader) for r under the key that seed derives for r's
// campaign-day, and returns the encoded token.
func mintToken(t testing.TB, kind token.Kind, seed []byte, r *p3.Report) []byte {
	t.Helper()
	k, err := token.DeriveKey(kind, token.Prio3Epoch(r.Campaign, uint32(r.Day)), seed)
	if err != nil {
		t.Fatal(err)
	}
	p, blinded, err := token.NewRequest(k.Public(), kind, k.Epoch(), [][32]byte{r.HelperNonce()})
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

// TestAttackPrio3HelperSybil: the helper's operator isolates one client.
// It runs the issuer of helper tokens, so it can mint a valid helper token
// for any report, and it may send uploads like any client (the leader's
// public key is published, the relays carry anyone's onions). On a day
// where one honest client (the target) uploads — a batch too small to be
// released — it uploads MinBatchSize − 1 reports of its own whose values
// it knows (all zero), each with a helper token it minted, half with no
// leader token and half with one minted under a seed of its own. It then
// lets the batch be collected (ε = 0, exact shares) and reads the target's
// vector from the release. With leader tokens the leader refuses every
// fabricated report before preparing it (token_missing, token_invalid),
// the batch stays at 1 report and nothing is released. Control: a leader
// that needs no token (the code before leader tokens, or
// --no-leader-tokens) prepares them all and the release gives the
// target's whole clipped vector. A second upload of the target's report
// (its leader token replayed) is refused as token_spent.
func TestAttackPrio3HelperSybil(t *testing.T) {
	const length, minBatch = 200, 100
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: p3.DefaultBits}
	day := p3.DayOf(time.Date(2006, 3, 3, 0, 0, 0, 0, time.UTC))
	now := day.Start().Add(12 * time.Hour)
	target := make([]uint64, length)
	for i := range target {
		target[i] = uint64(1 + (i*5)%20) // some above the clip (15)
	}
	type result struct {
		fabricated, refused, count uint64
		reasons                    map[string]uint64
		shares, recovered          int
	}
	run := func(leaderTokens bool) result {
		w := newWorld(t, m, minBatch)
		helperSeed, leaderSeed, forgedSeed := newSeed(t), newSeed(t), newSeed(t)
		w.cfgH.TokenSeed = helperSeed
		h, err := NewHelper(w.cfgH)
		if err != nil {
			t.Fatal(err)
		}
		w.h = h
		if leaderTokens {
			w.cfgL.LeaderTokenSeed = leaderSeed
			l, err := NewLeader(w.cfgL)
			if err != nil {
				t.Fatal(err)
			}
			w.l = l
		}
		// the target: its helper token and its leader token, from the two
		// operators' issuers; its upload sent twice (a replay)
		r, _, err := w.v.ShardReport(campaign, day, target, w.hk.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		r.HelperToken = mintToken(t, token.KindPrio3Helper, helperSeed, r)
		r.LeaderToken = mintToken(t, token.KindPrio3Leader, leaderSeed, r)
		targetUp, err := r.Seal(w.lk.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		uploads := [][]byte{targetUp}
		// the helper operator's reports
		zeros := make([]uint64, length)
		for i := 1; i < minBatch; i++ {
			r, _, err := w.v.ShardReport(campaign, day, zeros, w.hk.PublicKey())
			if err != nil {
				t.Fatal(err)
			}
			r.HelperToken = mintToken(t, token.KindPrio3Helper, helperSeed, r)
			if i%2 == 0 {
				r.LeaderToken = mintToken(t, token.KindPrio3Leader, forgedSeed, r)
			}
			up, err := r.Seal(w.lk.PublicKey())
			if err != nil {
				t.Fatal(err)
			}
			uploads = append(uploads, up)
		}
		w.upload(t, now, append(uploads, targetUp))
		res := result{fabricated: minBatch - 1, reasons: w.l.Stats.Rejected}
		for reason, n := range w.l.Stats.Rejected {
			if reason != ReasonTokenSpent && reason != "replay" {
				res.refused += n
			}
		}
		b := w.l.batches[day]
		if b != nil {
			res.count = b.count
		}
		at := day.Start().Add(26 * time.Hour)
		if lo, err := w.l.Apply(Event{Now: at, Kind: EventCollect, Day: day}); err == nil {
			got, _ := w.route(at, lo)
			res.shares = len(got)
			if len(got) == 2 {
				out, err := w.c.Unshard(got[0], got[1])
				if err != nil {
					t.Fatal(err)
				}
				clipped, _ := m.Clip(target)
				for i := range out.Totals {
					if out.Totals[i] == int64(clipped[i]) { // minus the helper operator's known zeros
						res.recovered++
					}
				}
			}
		}
		return res
	}
	after := run(true)
	before := run(false)
	fmt.Printf("ATTACK prio3-helper-sybil: the helper's operator mints helper tokens for %d reports of its own around 1 honest client (L = %d, min %d, ε = 0): leader refused %d (%v), batch count %d, shares to the collector %d, %d of %d of the target's counts recovered (before: leader prepared all, count %d, %d shares, %d of %d recovered)\n",
		after.fabricated, length, minBatch, after.refused, after.reasons, after.count, after.shares, after.recovered, length,
		before.count, before.shares, before.recovered, length)
	if after.refused != after.fabricated || after.reasons[ReasonTokenSpent] != 1 || after.count != 1 || after.shares != 0 || after.recovered != 0 {
		t.Fatal("the leader prepared reports the helper's operator fabricated, or released a batch of one client")
	}
	if before.count != minBatch || before.shares != 2 || before.recovered != length {
		t.Fatalf("control: without leader tokens the padded batch should release the target's vector (count %d, %d shares, %d recovered)", before.count, before.shares, before.recovered)
	}
}
