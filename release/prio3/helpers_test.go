package prio3

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cloudflare/circl/vdaf/prio3/arith/fp128"

	agg "github.com/crowdlog/crowdlog/aggregator/prio3"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// testList is the first n keywords of the default list.
func testList(t testing.TB, n int) *keywords.List {
	t.Helper()
	l, err := keywords.Parse(strings.NewReader(strings.Join(keywords.Default().Words[:n], "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func genKey(t testing.TB, id byte) *onion.KeyPair {
	t.Helper()
	k, err := onion.GenerateKeyPair(id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// craft seals an aggregate share of role whose plaintext is vec (as field
// elements; negative values as p + x) to key, and encodes it.
func craft(t testing.TB, key onion.PublicKey, role byte, campaign string, day p3.Day, count uint64, sum byte, vec []int64) []byte {
	t.Helper()
	v := make(fp128.Vec, len(vec))
	for i, x := range vec {
		v[i] = p3.FieldOf(x)
	}
	a := &p3.AggShare{Role: role, Campaign: campaign, Day: day, Count: count}
	a.Checksum[0] = sum
	if err := p3.SealAggShare(key, a, p3.EncodeVec(v)); err != nil {
		t.Fatal(err)
	}
	b, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// split returns two vectors whose element-wise sum is truth, the first
// uniformly masked (as an aggregator's share would be, up to the field).
func split(rng *rand.Rand, truth []int64) (leader, helper []int64) {
	leader, helper = make([]int64, len(truth)), make([]int64, len(truth))
	for i, x := range truth {
		r := rng.Int64N(1 << 40)
		leader[i], helper[i] = x+r, -r
	}
	return leader, helper
}

// clipped returns Σ over clients of min(count, max) per keyword: what the
// two aggregators' shares must add up to, computed without them.
func clipped(clients [][]uint64, length int, max uint64) []int64 {
	out := make([]int64, length)
	for _, c := range clients {
		for i, x := range c {
			out[i] += int64(min(x, max))
		}
	}
	return out
}

// randomClients draws n clients' daily counts over length keywords: most
// zero, some above the clip.
func randomClients(rng *rand.Rand, n, length int) [][]uint64 {
	out := make([][]uint64, n)
	for u := range out {
		out[u] = make([]uint64, length)
		for i := range out[u] {
			switch r := rng.IntN(10); {
			case r < 6:
			case r < 9:
				out[u][i] = uint64(1 + rng.IntN(3))
			default:
				out[u][i] = uint64(10 + rng.IntN(30)) // clipped at b = 4
			}
		}
	}
	return out
}

// aggregate runs the real leader and helper state machines
// (aggregator/prio3) over the clients' uploads for day and returns the two
// AggShares the leader sends to the collector, in its order (leader's,
// helper's).
func aggregate(t testing.TB, campaign string, m p3.Config, collector onion.PublicKey, minBatch uint64, day p3.Day, clients [][]uint64) [2][]byte {
	t.Helper()
	return aggregateNoisy(t, campaign, m, collector, minBatch, day, clients, 0, 0)
}

// aggregateNoisy is aggregate with the leader's and the helper's noise ε
// (agg.Config.Epsilon; 0 = none).
func aggregateNoisy(t testing.TB, campaign string, m p3.Config, collector onion.PublicKey, minBatch uint64, day p3.Day, clients [][]uint64, epsL, epsH float64) [2][]byte {
	t.Helper()
	lk, hk := genKey(t, 1), genKey(t, 2)
	var vk [p3.VerifyKeySize]byte
	copy(vk[:], "a test verify key of 32 bytes...")
	cfg := agg.Config{Campaign: campaign, Measurement: m, KeyEpoch: 1, VerifyKeys: map[uint32][p3.VerifyKeySize]byte{1: vk},
		Grace: time.Hour, MinBatchSize: minBatch, Collector: collector}
	lc, hc := cfg, cfg
	lc.Keys, hc.Keys = []*onion.KeyPair{lk}, []*onion.KeyPair{hk}
	lc.Epsilon, hc.Epsilon = epsL, epsH
	leader, err := agg.NewLeader(lc)
	if err != nil {
		t.Fatal(err)
	}
	helper, err := agg.NewHelper(hc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := p3.New(campaign, m)
	if err != nil {
		t.Fatal(err)
	}
	now := day.Start().Add(time.Hour)
	for _, c := range clients {
		up, _, _, err := v.Shard(campaign, day, c, lk.PublicKey(), hk.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leader.Apply(agg.Event{Now: now, Kind: agg.EventUpload, Msg: up}); err != nil {
			t.Fatal(err)
		}
	}
	var toCollector [][]byte
	route := func(now time.Time, outs []agg.Output) {
		for len(outs) > 0 {
			o := outs[0]
			outs = outs[1:]
			var more []agg.Output
			var err error
			switch {
			case o.To == agg.ToCollector:
				toCollector = append(toCollector, o.Msg)
			case o.To == agg.ToHelper && o.Msg[1] == 1:
				more, err = helper.Apply(agg.Event{Now: now, Kind: agg.EventAggregateReq, Msg: o.Msg})
			case o.To == agg.ToHelper && o.Msg[1] == 3:
				more, err = helper.Apply(agg.Event{Now: now, Kind: agg.EventCollectReq, Msg: o.Msg})
			case o.To == agg.ToLeader && o.Msg[1] == 2:
				more, err = leader.Apply(agg.Event{Now: now, Kind: agg.EventAggregateResp, Msg: o.Msg})
			case o.To == agg.ToLeader && o.Msg[1] == 4:
				more, err = leader.Apply(agg.Event{Now: now, Kind: agg.EventAggShare, Msg: o.Msg})
			default:
				t.Fatalf("unroutable message type %d to %d", o.Msg[1], o.To)
			}
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, more...)
		}
	}
	outs, err := leader.Apply(agg.Event{Now: now, Kind: agg.EventTick})
	if err != nil {
		t.Fatal(err)
	}
	route(now, outs)
	after := day.Start().Add(26 * time.Hour)
	outs, err = leader.Apply(agg.Event{Now: after, Kind: agg.EventCollect, Day: day})
	if err != nil {
		t.Fatal(err)
	}
	route(after, outs)
	if len(toCollector) != 2 {
		t.Fatalf("the leader sent %d messages to the collector, want its share and the helper's", len(toCollector))
	}
	return [2][]byte{toCollector[0], toCollector[1]}
}
