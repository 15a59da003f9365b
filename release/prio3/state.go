// Package prio3 is the collector of PDD's Prio3 mode: the release stage
// that reads both aggregate shares of every collected batch (campaign, day)
// from Kafka topic "prio3-shares" (protocol.Prio3SharesTopic: the leader
// writes its own share and the helper's, each an encoded
// protocol/prio3.AggShare sealed to the collector), adds them
// (draft-irtf-cfrg-vdaf-14 §7.2.5 unshard, protocol/prio3.Collector) and
// writes the day's keyword sums to ClickHouse exactly as groups mode does
// (release.Writer.WritePDDRound: tables pdd_keyword_counts and pdd_rounds,
// view keyword_daily). A batch is one group in groups mode's terms: every
// report the two aggregators prepared is decrypted, so confidence is 1.
//
// State is the pure state machine over the topic's messages (it opens the
// shares with the collector's key but does no I/O); Stage runs it over
// every partition and writes the days it completes.
package prio3

import (
	"errors"
	"math"

	"github.com/cloudflare/circl/vdaf/prio3/arith/fp128"

	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// Drop reasons counted in State.Dropped.
const (
	// DropMalformed: not an encoded AggShare (protocol/prio3.ParseAggShare).
	DropMalformed = "malformed"
	// DropCampaign: a share of another campaign than the configured one.
	DropCampaign = "other_campaign"
	// DropRefusal: an AggShare carrying an aggregator's refusal reason
	// instead of a share, other than the leader's small-batch notice
	// (the leader forwards no other).
	DropRefusal = "refusal"
	// DropDay: a day ClickHouse's Date cannot hold (after 2149-06-06).
	DropDay = "bad_day"
	// DropLate: a share of a day this State already released.
	DropLate = "late"
	// DropSmallBatch: a batch under the campaign's minimum batch size: never
	// opened, never released.
	DropSmallBatch = "small_batch"
	// DropUndecryptable: the share does not open with the collector's key
	// (sealed to another key, or its metadata or ciphertext was altered:
	// the HPKE AAD binds role, campaign, day, count and checksum).
	DropUndecryptable = "undecryptable"
	// DropLength: the opened share does not hold one Field128 element per
	// keyword of the configured list (a campaign measured over another list).
	DropLength = "length_mismatch"
	// DropDuplicate: a second share of the same role, day, count and
	// checksum (the leader re-emits after a crash); the first is kept.
	DropDuplicate = "duplicate"
	// DropTooMany: more than MaxCandidates distinct shares of one role for
	// one day.
	DropTooMany = "too_many"
	// DropMismatch: a share held for a day that was released from another
	// pair (its count or checksum differ from the released pair's), dropped
	// when the day is released.
	DropMismatch = "mismatch"
	// DropImplausible: a pair whose unsharded totals are not all in
	// 0..Count × the measurement's per-client maximum (widened by
	// NoiseSlack under noise), or do not decode: a corrupted or tampered
	// aggregate share. Both shares are dropped; the day stays open for
	// another pair.
	DropImplausible = "implausible_sum"
	// DropEpsilon: a share whose noise ε (AggShare.Epsilon, authenticated)
	// is not the configured State.Epsilon: an aggregator run with another
	// --epsilon than the release. Never opened; the day stays open.
	DropEpsilon = "epsilon_mismatch"
)

// DropReasons lists every drop reason, for metrics.
var DropReasons = []string{DropMalformed, DropCampaign, DropRefusal, DropDay, DropLate, DropSmallBatch,
	DropUndecryptable, DropLength, DropDuplicate, DropTooMany, DropMismatch, DropImplausible, DropEpsilon}

// MaxCandidates bounds the distinct (count, checksum) shares held per role
// and day while no matching pair exists: memory per open day is at most
// 2 × MaxCandidates × 32 B × L (each share's bytes and its opened vector).
const MaxCandidates = 4

// maxDay is the last day a ClickHouse Date holds (2149-06-06).
const maxDay = math.MaxUint16

// Batch is a released batch: the sum of both aggregate shares.
type Batch struct {
	Campaign string
	Day      p3.Day
	// Count is the number of reports both aggregators prepared into the
	// batch; Checksum their report-id checksum (equal at both).
	Count    uint64
	Checksum p3.Checksum
	// Totals[i] is the sum over the batch's reports of keyword i's clipped
	// count (SumVec) or presence (0/1), i = the keyword's position in the
	// campaign's list; 0 ≤ Totals[i] ≤ Count × the per-client maximum
	// without noise; with noise (State.Epsilon > 0) the sum plus both
	// aggregators' draws, possibly negative.
	Totals []int64
}

type candidate struct {
	count    uint64
	checksum p3.Checksum
}

// held is a share waiting for its partner: the encoded AggShare, the
// index of the key that opened it and its opened vector.
type held struct {
	b   []byte
	key int
	vec fp128.Vec
}

type dayAcc struct {
	shares [2]map[candidate]held // by role
}

// State pairs the leader's and the helper's AggShare of each day of one
// campaign and returns each day at most once, as soon as both shares with
// the same count and checksum are present. Not safe for concurrent use.
type State struct {
	// Dropped counts dropped messages by reason (the Drop constants).
	Dropped map[string]int64
	// Accepted counts shares held for pairing.
	Accepted int64
	// Epsilon is the ε of the aggregators' noise (both ran with
	// aggregate-prio3 --epsilon ε; 0 = exact shares): a share claiming
	// another ε is dropped (DropEpsilon), and with ε > 0 the plausibility
	// check allows NoiseSlack around the exact range. Set before the
	// first Apply.
	Epsilon float64

	// SmallBatch holds the days the leader said it withheld as under the
	// minimum batch size (its notice: role 0, reason
	// protocol/prio3.ReasonSmallBatch), in arrival order, each once and
	// only while the day is not released; the Stage records them
	// (release.WithheldMinBatch) and empties it. A notice carries no
	// count; a day released later supersedes it (pdd_rounds wins).
	SmallBatch []p3.Day

	c        p3.Collector
	keys     []*onion.KeyPair // c.Key, then the keys before a rotation
	notified map[p3.Day]bool
	open     map[p3.Day]*dayAcc
	released map[p3.Day]bool
}

// NewState returns an empty State for the campaign, measurement, collector
// key and minimum batch size of c; old are collector keys before a rotation
// (shares sealed to them still open). Errors: an invalid measurement
// (p3.ErrConfig), no key, a minimum batch size of 0.
func NewState(c p3.Collector, old ...*onion.KeyPair) (*State, error) {
	if err := c.Measurement.Check(); err != nil {
		return nil, err
	}
	if c.Key == nil {
		return nil, errors.New("prio3 release: no collector key (give --collector-key FILE)")
	}
	if c.MinBatchSize == 0 {
		return nil, errors.New("prio3 release: minimum batch size 0 would release single clients; give --min-batch-size ≥ 1, the aggregators' value")
	}
	keys := []*onion.KeyPair{c.Key}
	for _, k := range old {
		if k == nil {
			return nil, errors.New("prio3 release: a nil old collector key")
		}
		keys = append(keys, k)
	}
	return &State{Dropped: map[string]int64{}, c: c, keys: keys, open: map[p3.Day]*dayAcc{}, released: map[p3.Day]bool{}}, nil
}

// Open is the number of days holding some shares but no matching pair.
func (s *State) Open() int { return len(s.open) }

func (s *State) drop(reason string) { s.Dropped[reason]++ }

// Apply takes one message of topic "prio3-shares". It returns the batch
// and true when this share completed a matching pair (same day, count and
// checksum, one share per role, both opening with the collector key, the
// sum plausible); each day is returned at most once. Every other message is
// counted in Dropped or held for pairing (Accepted); Apply never panics.
func (s *State) Apply(b []byte) (Batch, bool) {
	a, err := p3.ParseAggShare(b)
	if err != nil {
		s.drop(DropMalformed)
		return Batch{}, false
	}
	switch {
	case a.Campaign != s.c.Campaign:
		s.drop(DropCampaign)
		return Batch{}, false
	case a.Reason == p3.ReasonSmallBatch && a.Role == 0 && a.Day <= maxDay:
		if !s.released[a.Day] && !s.notified[a.Day] {
			if s.notified == nil {
				s.notified = map[p3.Day]bool{}
			}
			s.notified[a.Day] = true
			s.SmallBatch = append(s.SmallBatch, a.Day)
		}
		return Batch{}, false
	case a.Reason != "":
		s.drop(DropRefusal)
		return Batch{}, false
	case a.Day > maxDay:
		s.drop(DropDay)
		return Batch{}, false
	case s.released[a.Day]:
		s.drop(DropLate)
		return Batch{}, false
	case a.Count < s.c.MinBatchSize:
		s.drop(DropSmallBatch)
		return Batch{}, false
	case a.Epsilon != s.Epsilon:
		s.drop(DropEpsilon)
		return Batch{}, false
	}
	h := held{b: b, key: -1}
	var plain []byte
	for i, k := range s.keys {
		if plain, err = a.Open(k.Private); err == nil {
			h.key = i
			break
		}
	}
	if h.key < 0 {
		s.drop(DropUndecryptable)
		return Batch{}, false
	}
	if h.vec, err = p3.DecodeVec(plain, s.c.Measurement.Length); err != nil {
		s.drop(DropLength)
		return Batch{}, false
	}
	acc := s.open[a.Day]
	if acc == nil {
		acc = &dayAcc{shares: [2]map[candidate]held{{}, {}}}
		s.open[a.Day] = acc
	}
	k := candidate{a.Count, a.Checksum}
	mine := acc.shares[a.Role]
	if _, dup := mine[k]; dup {
		s.drop(DropDuplicate)
		return Batch{}, false
	}
	if len(mine) >= MaxCandidates {
		s.drop(DropTooMany)
		return Batch{}, false
	}
	mine[k] = h
	s.Accepted++
	other, ok := acc.shares[1-a.Role][k]
	if !ok {
		return Batch{}, false
	}
	leader, helper := h, other
	if a.Role == 1 {
		leader, helper = other, h
	}
	res, err := s.unshard(a, leader, helper)
	if err != nil || !s.plausible(res) {
		// both opened alone, so only the sum can be wrong: a tampered share
		s.Dropped[DropImplausible] += 2
		delete(acc.shares[0], k)
		delete(acc.shares[1], k)
		return Batch{}, false
	}
	for role := range acc.shares {
		for c := range acc.shares[role] {
			if c != k {
				s.drop(DropMismatch)
			}
		}
	}
	delete(s.open, a.Day)
	s.released[a.Day] = true
	return Batch{Campaign: s.c.Campaign, Day: a.Day, Count: res.Count, Checksum: res.Checksum, Totals: res.Totals}, true
}

// unshard adds a matching pair: with p3.Collector when one key opened both
// (its checks and decoding), else — a pair sealed across a collector key
// rotation — the two vectors opened on arrival, whose metadata the pairing
// already matched (same role-complement, campaign, day, count, checksum).
func (s *State) unshard(a *p3.AggShare, leader, helper held) (*p3.Result, error) {
	if leader.key == helper.key {
		c := s.c
		c.Key = s.keys[leader.key]
		return c.Unshard(leader.b, helper.b)
	}
	sum := append(fp128.Vec(nil), leader.vec...)
	sum.AddAssign(helper.vec)
	totals, err := p3.Signed(sum)
	if err != nil {
		return nil, err
	}
	return &p3.Result{Day: a.Day, Count: a.Count, Checksum: a.Checksum, Totals: totals}, nil
}

// NoiseSlack is how far (in counts) a noisy total may lie outside the
// exact range 0..Count × Δ before the pair is called implausible: with
// both aggregators' integer Laplace draws X₁, X₂ of scale b = S/ε (S =
// the measurement's Sensitivity, one person's daily L1 bound), |X₁ + X₂|
// > t needs |X₁| > t/2 or |X₂| > t/2, each of probability ≤ e^(−t/(2b)) (a
// two-sided geometric or a rounded Laplace: P(|X| ≥ x) ≤ e^(−x/b)), so
// over a day's L entries P(some |X₁ + X₂| > t) ≤ 2L·e^(−t/(2b)). Solving
// 2L·e^(−t/(2b)) = 10⁻⁹ gives t = 2b·ln(2L·10⁹); NoiseSlack returns ⌈t⌉ +
// 2 (rounding), so an honest noisy day is dropped as implausible with
// probability < 10⁻⁹. Example: L = 10,000, S = 20, ε = 1: 1,228. 0 when
// epsilon is 0.
func NoiseSlack(m p3.Config, epsilon float64) int64 {
	if !(epsilon > 0) {
		return 0
	}
	b := float64(m.Sensitivity()) / epsilon
	t := 2 * b * math.Log(2*float64(m.Length)*1e9)
	if t > math.MaxInt64/4 {
		return math.MaxInt64 / 4
	}
	return int64(math.Ceil(t)) + 2
}

// plausible reports whether every total is in 0..Count × Max, widened by
// NoiseSlack on both sides under noise (each prepared report adds 0..Max
// per keyword, which the FLP proof enforces).
func (s *State) plausible(r *p3.Result) bool {
	per := s.c.Measurement.Max()
	limit := r.Count * per
	if per != 0 && limit/per != r.Count {
		limit = math.MaxUint64
	}
	if len(r.Totals) != s.c.Measurement.Length {
		return false
	}
	slack := NoiseSlack(s.c.Measurement, s.Epsilon)
	for _, t := range r.Totals {
		if t < -slack || (t > 0 && uint64(t) > limit && uint64(t)-limit > uint64(slack)) {
			return false
		}
	}
	return true
}
