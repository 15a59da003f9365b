package prio3_test

import (
	"fmt"
	"time"

	"github.com/crowdlog/crowdlog/aggregator/prio3"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// Example: three clients, one day, a 4-keyword campaign clipped to 15;
// leader and helper exchange messages in process, the collector unshards
// after the day's end + grace.
func Example() {
	lk, _ := onion.GenerateKeyPair(1)
	hk, _ := onion.GenerateKeyPair(2)
	ck, _ := onion.GenerateKeyPair(3)
	m := p3.Config{Kind: p3.KindSumVec, Length: 4, Bits: 4}
	var vk [32]byte // in production: 32 random bytes shared by the two operators
	cfg := prio3.Config{Campaign: "flu", Measurement: m, KeyEpoch: 1,
		VerifyKeys: map[uint32][32]byte{1: vk}, Grace: time.Hour, MinBatchSize: 3, Collector: ck.PublicKey()}
	lcfg, hcfg := cfg, cfg
	lcfg.Keys, hcfg.Keys = []*onion.KeyPair{lk}, []*onion.KeyPair{hk}
	leader, _ := prio3.NewLeader(lcfg)
	helper, _ := prio3.NewHelper(hcfg)
	collector := &p3.Collector{Campaign: "flu", Measurement: m, Key: ck, MinBatchSize: 3}

	day := p3.Day(20000)
	v, _ := p3.New("flu", m)
	for _, counts := range [][]uint64{{1, 0, 2, 0}, {0, 0, 40, 1}, {3, 0, 0, 0}} {
		up, _, _, _ := v.Shard("flu", day, counts, lk.PublicKey(), hk.PublicKey())
		leader.Apply(prio3.Event{Now: day.Start(), Kind: prio3.EventUpload, Msg: up})
	}
	reqs, _ := leader.Apply(prio3.Event{Now: day.Start(), Kind: prio3.EventTick})
	resp, _ := helper.Apply(prio3.Event{Now: day.Start(), Kind: prio3.EventAggregateReq, Msg: reqs[0].Msg})
	leader.Apply(prio3.Event{Now: day.Start(), Kind: prio3.EventAggregateResp, Msg: resp[0].Msg})

	after := day.Start().Add(25 * time.Hour)
	creq, _ := leader.Apply(prio3.Event{Now: after, Kind: prio3.EventCollect, Day: day})
	share, _ := helper.Apply(prio3.Event{Now: after, Kind: prio3.EventCollectReq, Msg: creq[0].Msg})
	both, _ := leader.Apply(prio3.Event{Now: after, Kind: prio3.EventAggShare, Msg: share[0].Msg})
	res, err := collector.Unshard(both[0].Msg, both[1].Msg)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Day, res.Count, res.Totals)
	// Output: 2024-10-04 3 [4 0 17 1]
}
