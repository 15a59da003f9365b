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
	"crypto/ed25519"
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
	DropCorrupt     = "bad_recovery" // an answer with shares that fail their commitments (the rest are kept)
	DropUncommitted = "uncommitted"  // a submission whose dealer's commitments never arrived
)

// Stats counts what a partition did.
type Stats struct {
	Submissions, Answers int64
	BadShares            int64 // revealed shares that failed their commitments
	Complete, Recovered  int64
	Lost                 int64
	Dropped              map[string]int64
}

type group struct {
	roster    blind.Roster
	sum       []uint64
	submitted map[uint16]bool
	commits   map[uint16]*blind.Commitments
	// committed: the issue time (Unix seconds) of the signed record
	// that carried each dealer's stored commitments
	committed map[uint16]int64
	rec       *blind.Recovery
}

// Partition holds the open groups of one partition.
type Partition struct {
	groups map[blind.Instance]*group
	final  map[blind.Instance]bool
	day    int32
	Stats  Stats

	// ControlKey is the coordinator's Ed25519 public key (RFC 8032):
	// control records must be signed by it (ApplyControl); nil: they are
	// not authenticated. ID is the partition's number and Campaigns the
	// campaigns served (nil: any), both bound into signed records.
	ControlKey ed25519.PublicKey
	ID         int
	Campaigns  map[string]bool
	// controlIssued is the issue time (Unix seconds) of the newest
	// control record accepted (replays older than it are refused);
	// issued that of the record being applied
	controlIssued, issued int64
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
// by the coordinator, Kafka header ControlHeader; verified by ApplyControl,
// which calls Apply with the signed body) must be rosters, ticks or
// commitments;
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
	case control && m.Commit != nil:
		p.commit(m.Commit)
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
	p.groups[r.Instance] = &group{roster: *r, submitted: map[uint16]bool{}, commits: map[uint16]*blind.Commitments{}, committed: map[uint16]int64{}}
}

// commit stores a dealer's commitments until its submission; a redeal
// before the submission replaces them, later ones are ignored. Under
// ControlKey, commitments signed before the stored ones (a replay of the
// dealer's earlier deal after its redeal) are refused as replayed.
func (p *Partition) commit(c *blind.Commitments) {
	g := p.groups[c.Instance]
	if g == nil || g.rec != nil || c.Member >= g.roster.N || len(c.Roots) != int(g.roster.N) || g.submitted[c.Member] {
		p.drop(DropLate)
		return
	}
	if p.ControlKey != nil && g.commits[c.Member] != nil && p.issued < g.committed[c.Member] {
		p.drop(DropReplayedControl)
		return
	}
	g.commits[c.Member] = c
	g.committed[c.Member] = p.issued
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
	case g.commits[s.Member] == nil:
		p.drop(DropUncommitted)
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
		// everyone submitted: unmask now, nobody dropped
		return p.unmask(g)
	}
	return Result{}
}

// unmask starts the group's unmasking request: survivors are the members
// that submitted, the others are dropped.
func (p *Partition) unmask(g *group) Result {
	in := g.roster.Instance
	req := blind.Request{Instance: in, N: int(g.roster.N), T: int(g.roster.T)}
	for i := 0; i < req.N; i++ {
		if !g.submitted[uint16(i)] {
			req.Dropped = append(req.Dropped, uint16(i))
		}
	}
	rec, err := blind.NewRecovery(req, g.commits)
	if err != nil { // cannot happen: ≥ T submitted, each with commitments
		panic(fmt.Sprintf("vectors: recovery for %v: %v", in, err))
	}
	g.rec = rec
	return Result{Requests: []blind.Request{req}}
}

func (p *Partition) finish(g *group, st blind.Status) Result {
	o := blind.Outcome{Roster: g.roster, Status: st}
	if st != blind.StatusLost {
		o.Decrypted = uint16(len(g.submitted))
		o.Sum = g.sum
	}
	if g.rec != nil {
		for _, b := range g.rec.Bad() {
			o.Bad = append(o.Bad, uint16(b[0]))
		}
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
	good, bad := g.rec.Add(a)
	if bad > 0 {
		p.drop(DropCorrupt)
		p.Stats.BadShares += int64(bad)
	}
	if good == 0 {
		if bad == 0 {
			p.drop(DropDuplicate)
		}
		return Result{}
	}
	p.Stats.Answers++
	if !g.rec.Ready() {
		return Result{}
	}
	sum := append([]uint64(nil), g.sum...)
	if err := g.rec.Correct(sum); err != nil {
		return Result{} // cannot happen once Ready: every share verified
	}
	g.sum = sum
	if len(g.rec.Request().Dropped) == 0 {
		p.Stats.Complete++
		return p.finish(g, blind.StatusComplete)
	}
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
			if len(g.submitted) < int(g.roster.T) {
				p.Stats.Lost++
				res.Outcomes = append(res.Outcomes, p.finish(g, blind.StatusLost).Outcomes...)
				continue
			}
			res.Requests = append(res.Requests, p.unmask(g).Requests...)
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
