package prio3

import (
	"errors"
	"fmt"

	"github.com/cloudflare/circl/vdaf/prio3/arith/fp128"

	"github.com/crowdlog/crowdlog/protocol/onion"
)

// ErrSmallBatch: a batch under the campaign's minimum batch size (the
// collector refuses to unshard it, as the helper refuses to share it).
var ErrSmallBatch = errors.New("prio3: batch under the minimum batch size")

// Collector is the release stage's side: it opens both aggregate shares of
// a batch and decodes the totals.
type Collector struct {
	Campaign     string
	Measurement  Config
	Key          *onion.KeyPair
	MinBatchSize uint64
}

// Result is a collected batch: Totals[i] is keyword i's sum over Count
// reports (clipped counts or presence), negative only when noise was added.
type Result struct {
	Day      Day
	Count    uint64
	Checksum Checksum
	Totals   []int64
}

// Unshard opens the leader's and the helper's encoded AggShare of one
// batch (VDAF-14 §7.2.5 unshard: the sum of both shares), checking that
// both are for this campaign and the same day, count and checksum, and
// that the count reaches MinBatchSize. It decodes totals itself (signed:
// circl's Unshard refuses values ≥ 2^64, i.e. negative noisy totals).
func (c *Collector) Unshard(leader, helper []byte) (*Result, error) {
	sum, l, err := c.UnshardFields(leader, helper)
	if err != nil {
		return nil, err
	}
	totals, err := Signed(sum)
	if err != nil {
		return nil, err
	}
	return &Result{Day: l.Day, Count: l.Count, Checksum: l.Checksum, Totals: totals}, nil
}

// UnshardFields checks and opens both shares (the checks of Unshard) and
// returns their sum as L Field128 elements
// and the leader's parsed AggShare; for noise and audits that work in the
// field (VDAF-14 §7.2.5).
func (c *Collector) UnshardFields(leader, helper []byte) (fp128.Vec, *AggShare, error) {
	l, err := ParseAggShare(leader)
	if err != nil {
		return nil, nil, err
	}
	h, err := ParseAggShare(helper)
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
	lv, err := DecodeVec(lb, c.Measurement.Length)
	if err != nil {
		return nil, nil, err
	}
	hv, err := DecodeVec(hb, c.Measurement.Length)
	if err != nil {
		return nil, nil, err
	}
	lv.AddAssign(hv)
	return lv, l, nil
}
