package prio3

import (
	"fmt"

	"github.com/cloudflare/circl/vdaf/prio3/arith/fp128"

	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// Collector is the release stage's side: it opens both aggregate shares of
// a batch and decodes the totals.
type Collector struct {
	Campaign     string
	Measurement  p3.Config
	Key          *onion.KeyPair
	MinBatchSize uint64
}

// Result is a collected batch: Totals[i] is keyword i's sum over Count
// reports (clipped counts or presence), negative only when noise was added.
type Result struct {
	Day      p3.Day
	Count    uint64
	Checksum p3.Checksum
	Totals   []int64
}

// Unshard opens the leader's and the helper's encoded AggShare of one
// batch (VDAF-14 §7.2.5 unshard: the sum of both shares), checking that
// both are for this campaign and the same day, count and checksum, and
// that the count reaches MinBatchSize. It decodes totals itself (signed:
// circl's Unshard refuses values ≥ 2^64, i.e. negative noisy totals).
func (c *Collector) Unshard(leader, helper []byte) (*Result, error) {
	sum, l, err := c.unshardVec(leader, helper)
	if err != nil {
		return nil, err
	}
	totals, err := p3.Signed(sum)
	if err != nil {
		return nil, err
	}
	return &Result{Day: l.Day, Count: l.Count, Checksum: l.Checksum, Totals: totals}, nil
}

// unshardVec checks and opens both shares and returns their sum (field
// elements) and the leader's message.
func (c *Collector) unshardVec(leader, helper []byte) (fp128.Vec, *p3.AggShare, error) {
	l, err := p3.ParseAggShare(leader)
	if err != nil {
		return nil, nil, err
	}
	h, err := p3.ParseAggShare(helper)
	if err != nil {
		return nil, nil, err
	}
	if l.Role != 0 || h.Role != 1 || l.Reason != "" || h.Reason != "" {
		return nil, nil, fmt.Errorf("prio3: collector needs the leader's and the helper's shares (roles %d, %d; refusals %q, %q)", l.Role, h.Role, l.Reason, h.Reason)
	}
	if l.Campaign != c.Campaign || h.Campaign != c.Campaign || l.Day != h.Day || l.Count != h.Count || l.Checksum != h.Checksum {
		return nil, nil, fmt.Errorf("prio3: aggregate shares disagree (campaign %q/%q, day %s/%s, count %d/%d)", l.Campaign, h.Campaign, l.Day, h.Day, l.Count, h.Count)
	}
	if l.Count < c.MinBatchSize {
		return nil, nil, fmt.Errorf("%w: %d < %d", ErrSmallBatch, l.Count, c.MinBatchSize)
	}
	lb, err := l.Open(c.Key.Private)
	if err != nil {
		return nil, nil, err
	}
	hb, err := h.Open(c.Key.Private)
	if err != nil {
		return nil, nil, err
	}
	lv, err := p3.DecodeVec(lb, c.Measurement.Length)
	if err != nil {
		return nil, nil, err
	}
	hv, err := p3.DecodeVec(hb, c.Measurement.Length)
	if err != nil {
		return nil, nil, err
	}
	lv.AddAssign(hv)
	return lv, l, nil
}
