// Package vectors is the aggregator of Private Data Donor mode: per
// (campaign, round, group) it sums the members' blinded vectors (PDD eq. 2)
// and, after the delay, recovers the sum of the members who did submit
// (protocol/blind; Bonawitz et al. CCS 2017 adapted to daily clients).
//
// Partition is the state of one partition of Kafka topic "vectors" (all
// messages of a group share a partition: the key is the group). It is a pure
// state machine over that partition's messages in order — rosters and ticks
// from the coordinator, submissions and recovery answers through the relays
// — so a restarted or rebalanced aggregator rebuilds it exactly by replaying
// the partition. Decisions depend only on message order: the vectors before
// the Tick that passes a group's Deadline are its survivors.
package vectors

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/crowdlog/crowdlog/protocol/blind"
)

// Drop reasons counted in Stats.Dropped.
const (
	DropMalformed   = "malformed"    // does not parse (blind.ErrMalformed)
	DropUnknown     = "unknown"      // submission or answer for a group with no roster
	DropLate        = "late"         // for a group already final, or a submission after its deadline
	DropDuplicate   = "duplicate"    // a member's second submission or answer
	DropBadMember   = "bad_member"   // member index outside the group, or vector length ≠ L
	DropUnsolicited = "unsolicited"  // an answer for a group not in recovery, or from a dropped member
	DropKind        = "unexpected"   // a message kind that does not belong on this topic
	DropCorrupt     = "bad_recovery" // shares that do not combine (kept waiting for more)
)

// Stats counts what a partition did.
type Stats struct {
	Submissions, Answers int64
	Complete, Recovered  int64
	Lost                 int64
	Dropped              map[string]int64
}

type group struct {
	roster    blind.Roster
	sum       []uint64
	submitted map[uint16]bool
	rec       *blind.Recovery
}

// Partition holds the open groups of one partition.
type Partition struct {
	groups map[blind.Instance]*group
	final  map[blind.Instance]bool
	day    int32
	Stats  Stats
}

// NewPartition returns an empty partition state.
func NewPartition() *Partition {
	return &Partition{groups: map[blind.Instance]*group{}, final: map[blind.Instance]bool{},
		Stats: Stats{Dropped: map[string]int64{}}}
}

// Open is the number of groups not yet final.
func (p *Partition) Open() int { return len(p.groups) }

// Result is what one message produced: group outcomes for the release stage
// and recovery requests for the coordinator, in order.
type Result struct {
	Outcomes []blind.Outcome
	Requests []blind.Request
}

func (p *Partition) drop(reason string) { p.Stats.Dropped[reason]++ }

// Apply processes one message of the partition: control messages (written
// by the coordinator, Kafka header ControlHeader) must be rosters or ticks;
// the others (through the relays, onion already peeled) submissions or
// answers, so no client can forge a roster or a tick. Malformed and
// unexpected messages are counted and dropped; nothing blocks a group.
func (p *Partition) Apply(b []byte, control bool) Result {
	m, err := blind.Parse(b)
	if err != nil {
		p.drop(DropMalformed)
		return Result{}
	}
	switch {
	case control && m.Roster != nil:
		p.roster(m.Roster)
	case control && m.Tick != nil:
		return p.tick(m.Tick.Day)
	case !control && m.Submission != nil:
		return p.submission(m.Submission)
	case !control && m.Answer != nil:
		return p.answer(m.Answer)
	default:
		p.drop(DropKind)
	}
	return Result{}
}

func (p *Partition) roster(r *blind.Roster) {
	if p.final[r.Instance] || p.groups[r.Instance] != nil {
		return // the coordinator re-wrote it after a restart
	}
	p.groups[r.Instance] = &group{roster: *r, submitted: map[uint16]bool{}}
}

func (p *Partition) submission(s *blind.Submission) Result {
	if p.final[s.Instance] {
		p.drop(DropLate)
		return Result{}
	}
	g := p.groups[s.Instance]
	switch {
	case g == nil:
		p.drop(DropUnknown)
		return Result{}
	case g.rec != nil:
		p.drop(DropLate)
		return Result{}
	case s.Member >= g.roster.N || len(s.Y) != int(g.roster.L):
		p.drop(DropBadMember)
		return Result{}
	case g.submitted[s.Member]:
		p.drop(DropDuplicate)
		return Result{}
	}
	p.Stats.Submissions++
	g.submitted[s.Member] = true
	if g.sum == nil {
		g.sum = s.Y
	} else {
		blind.Sum(g.sum, s.Y)
	}
	if len(g.submitted) == int(g.roster.N) {
		p.Stats.Complete++
		return p.finish(g, blind.StatusComplete)
	}
	return Result{}
}

func (p *Partition) finish(g *group, st blind.Status) Result {
	o := blind.Outcome{Roster: g.roster, Status: st}
	if st != blind.StatusLost {
		o.Decrypted = uint16(len(g.submitted))
		o.Sum = g.sum
	}
	delete(p.groups, g.roster.Instance)
	p.final[g.roster.Instance] = true
	return Result{Outcomes: []blind.Outcome{o}}
}

func (p *Partition) answer(a *blind.Answer) Result {
	if p.final[a.Instance] {
		p.drop(DropLate)
		return Result{}
	}
	g := p.groups[a.Instance]
	if g == nil {
		p.drop(DropUnknown)
		return Result{}
	}
	if g.rec == nil || !g.submitted[a.Member] {
		p.drop(DropUnsolicited)
		return Result{}
	}
	if !g.rec.Add(a) {
		p.drop(DropDuplicate)
		return Result{}
	}
	p.Stats.Answers++
	if !g.rec.Ready() {
		return Result{}
	}
	sum := append([]uint64(nil), g.sum...)
	if err := g.rec.Correct(sum); err != nil {
		// a faulty holder's shares: wait for more answers (or the recovery deadline)
		if !errors.Is(err, blind.ErrThreshold) {
			p.drop(DropCorrupt)
		}
		return Result{}
	}
	g.sum = sum
	p.Stats.Recovered++
	return p.finish(g, blind.StatusRecovered)
}

// tick finalizes groups whose deadlines passed: a group past its Deadline
// with missing members starts a recovery (or is lost with fewer than T
// survivors); a group in recovery past RecoverBy is lost. Groups are
// visited in a deterministic order so replays emit the same sequence.
func (p *Partition) tick(day int32) Result {
	if day <= p.day {
		return Result{}
	}
	p.day = day
	var res Result
	for _, in := range sortedInstances(p.groups) {
		g := p.groups[in]
		switch {
		case g.rec == nil && day > g.roster.Deadline:
			n, s := int(g.roster.N), len(g.submitted)
			if s < int(g.roster.T) {
				p.Stats.Lost++
				res.Outcomes = append(res.Outcomes, p.finish(g, blind.StatusLost).Outcomes...)
				continue
			}
			req := blind.Request{Instance: in, N: n, T: int(g.roster.T)}
			for i := 0; i < n; i++ {
				if !g.submitted[uint16(i)] {
					req.Dropped = append(req.Dropped, uint16(i))
				}
			}
			rec, err := blind.NewRecovery(req)
			if err != nil { // cannot happen: s ≥ T and s < n checked above
				panic(fmt.Sprintf("vectors: recovery for %v: %v", in, err))
			}
			g.rec = rec
			res.Requests = append(res.Requests, req)
			if day > g.roster.RecoverBy { // a tick that skipped the whole window
				p.Stats.Lost++
				res.Outcomes = append(res.Outcomes, p.finish(g, blind.StatusLost).Outcomes...)
			}
		case g.rec != nil && day > g.roster.RecoverBy:
			p.Stats.Lost++
			res.Outcomes = append(res.Outcomes, p.finish(g, blind.StatusLost).Outcomes...)
		}
	}
	return res
}

func sortedInstances(m map[blind.Instance]*group) []blind.Instance {
	out := make([]blind.Instance, 0, len(m))
	for in := range m {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b blind.Instance) int {
		return cmp.Or(cmp.Compare(a.Campaign, b.Campaign), cmp.Compare(a.Round, b.Round), cmp.Compare(a.Group, b.Group))
	})
	return out
}
