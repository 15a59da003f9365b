// Package pdd is the release stage of Private Data Donor mode (Primault et
// al., WWW 2019): it reads the aggregator's group outcomes from
// Kafka topic "group-sums" (one blind.Outcome per (campaign, round, group),
// aggregator/vectors), and when every group of a round has an outcome it
// releases the round's day: per monitored keyword the sum of the non-lost
// groups' sums — exact, or with Laplace noise (google/differential-privacy)
// — and the day's confidence, clients decrypted / clients active (PDD §4.5),
// into ClickHouse (release.Writer.WritePDDRound: tables pdd_keyword_counts
// and pdd_rounds, view keyword_daily). docs/pdd-release.md describes it.
//
// State is the pure state machine over the topic's messages; Stage runs it
// over every partition and writes the rounds it completes.
package pdd

import (
	"crypto/sha256"
	"math"

	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

// Drop reasons counted in State.Dropped.
const (
	// DropMalformed: does not parse (blind.ErrMalformed).
	DropMalformed = "malformed"
	// DropKind: a well-formed message that is not an Outcome.
	DropKind = "unexpected"
	// DropListMismatch: the outcome's L or ListHash is not the configured
	// keyword list's (a campaign monitoring another list, or another
	// version of it).
	DropListMismatch = "list_mismatch"
	// DropRoster: Groups, Active or Grouped differ from the first outcome of
	// the same round, or Groups = 0.
	DropRoster = "roster_mismatch"
	// DropDuplicate: a second outcome for the same Instance (the aggregator
	// re-emits after a crash); the first is kept.
	DropDuplicate = "duplicate"
	// DropConflict: a second outcome for the same Instance whose content
	// differs from the first (the first is kept; this should never happen
	// with a deterministic aggregator and is worth an alarm).
	DropConflict = "duplicate_conflict"
	// DropLate: an outcome for a round already released.
	DropLate = "late"
	// DropImplausible: a group sum with an entry above Decrypted × the
	// per-client bound (State.MaxCount, or 2^32 when 0): a corrupt sum or a
	// client that did not clip. The group counts as lost.
	DropImplausible = "implausible_sum"
)

// Round is a complete round of a campaign: every one of its Groups groups
// has an outcome.
type Round struct {
	Campaign string
	// Round is the round number: the UTC day number (keywords.Day, PDD
	// §3.4); Day is the same as a keywords.Day.
	Round int32
	Day   keywords.Day
	// Active is the number of clients active on Day, Grouped those the
	// coordinator put in groups (from the rosters).
	Active, Grouped uint32
	// Groups = Complete + Recovered + Lost (blind.Status of each outcome;
	// an implausible sum counts as Lost).
	Groups, Complete, Recovered, Lost uint32
	// Decrypted is Σ Outcome.Decrypted over the non-lost groups: the
	// clients whose vectors Counts covers (saturates at 2^32−1).
	Decrypted uint32
	// Confidence is Decrypted / Active (PDD §4.5), 0 when Active = 0.
	Confidence float64
	// Counts, of length L, is the element-wise sum mod 2^64 of the non-lost
	// groups' Sum vectors: Counts[ℓ] is the number of query instances on
	// Day with keyword List.Words[ℓ] among the decrypted clients.
	Counts []uint64
}

type roundKey struct {
	campaign string
	round    int32
}

type groupSeen struct {
	digest [32]byte // SHA-256 of the outcome's encoding, to tell a re-emit from a conflict
}

type roundAcc struct {
	groups, active, grouped   uint32
	seen                      map[uint32]groupSeen
	complete, recovered, lost uint32
	decrypted                 uint64
	counts                    []uint64
}

// State accumulates group outcomes per (campaign, round) and returns each
// round once when all its groups have an outcome. It is not safe for
// concurrent use. Memory: one L-vector per open round, and a few bytes per
// released round (to drop late duplicates).
type State struct {
	// MaxCount is the per-client per-keyword per-day bound used to reject
	// implausible group sums (entry > Decrypted × MaxCount); 0 means 2^32.
	// Set it to the clients' clip when releasing with noise.
	MaxCount uint64
	// Dropped counts dropped messages by reason (the Drop constants).
	Dropped map[string]int64
	// Accepted counts outcomes taken into a round.
	Accepted int64

	list     *keywords.List
	hash     [32]byte
	open     map[roundKey]*roundAcc
	released map[roundKey]bool
}

// NewState returns an empty State for campaigns monitoring list: outcomes
// must have L = list.Len() and ListHash = list.Hash().
func NewState(list *keywords.List) *State {
	return &State{Dropped: map[string]int64{}, list: list, hash: list.Hash(),
		open: map[roundKey]*roundAcc{}, released: map[roundKey]bool{}}
}

// List returns the keyword list the State was made for.
func (s *State) List() *keywords.List { return s.list }

// Open is the number of rounds with some but not all outcomes.
func (s *State) Open() int { return len(s.open) }

func (s *State) drop(reason string) { s.Dropped[reason]++ }

// Apply takes one message of topic "group-sums". It returns the round and
// true when this outcome completed its round (the number of distinct groups
// seen equals Roster.Groups); each round is returned at most once.
// Malformed, mismatched, duplicate and late messages are counted in Dropped
// and change nothing; Apply never panics.
func (s *State) Apply(b []byte) (Round, bool) {
	m, err := blind.Parse(b)
	if err != nil {
		s.drop(DropMalformed)
		return Round{}, false
	}
	o := m.Outcome
	if o == nil {
		s.drop(DropKind)
		return Round{}, false
	}
	ro := &o.Roster
	if int(ro.L) != s.list.Len() || ro.ListHash != s.hash {
		s.drop(DropListMismatch)
		return Round{}, false
	}
	k := roundKey{ro.Instance.Campaign, ro.Instance.Round}
	if s.released[k] {
		s.drop(DropLate)
		return Round{}, false
	}
	acc := s.open[k]
	if acc == nil {
		if ro.Groups == 0 {
			s.drop(DropRoster)
			return Round{}, false
		}
		acc = &roundAcc{groups: ro.Groups, active: ro.Active, grouped: ro.Grouped, seen: map[uint32]groupSeen{}}
		s.open[k] = acc
	} else if ro.Groups != acc.groups || ro.Active != acc.active || ro.Grouped != acc.grouped {
		s.drop(DropRoster)
		return Round{}, false
	}
	digest := sha256.Sum256(b)
	if g, dup := acc.seen[ro.Instance.Group]; dup {
		if g.digest == digest {
			s.drop(DropDuplicate)
		} else {
			s.drop(DropConflict)
		}
		return Round{}, false
	}
	acc.seen[ro.Instance.Group] = groupSeen{digest: digest}
	s.Accepted++
	switch {
	case o.Status == blind.StatusLost:
		acc.lost++
	case !s.plausible(o):
		s.drop(DropImplausible)
		acc.lost++
	default:
		if o.Status == blind.StatusComplete {
			acc.complete++
		} else {
			acc.recovered++
		}
		acc.decrypted += uint64(o.Decrypted)
		if acc.counts == nil {
			acc.counts = make([]uint64, ro.L)
		}
		blind.Sum(acc.counts, o.Sum)
	}
	if uint32(len(acc.seen)) < acc.groups {
		return Round{}, false
	}
	delete(s.open, k)
	s.released[k] = true
	r := Round{Campaign: k.campaign, Round: k.round, Day: keywords.Day(k.round), Active: acc.active, Grouped: acc.grouped,
		Groups: acc.groups, Complete: acc.complete, Recovered: acc.recovered, Lost: acc.lost,
		Decrypted: uint32(min(acc.decrypted, math.MaxUint32)), Counts: acc.counts}
	if r.Counts == nil {
		r.Counts = make([]uint64, s.list.Len())
	}
	if r.Active > 0 {
		r.Confidence = float64(r.Decrypted) / float64(r.Active)
	}
	return r, true
}

// plausible reports whether every entry of o.Sum is at most o.Decrypted
// times the per-client bound.
func (s *State) plausible(o *blind.Outcome) bool {
	per := s.MaxCount
	if per == 0 {
		per = 1 << 32
	}
	limit := uint64(o.Decrypted) * per
	if limit/per != uint64(o.Decrypted) { // overflow: no bound
		limit = math.MaxUint64
	}
	for _, c := range o.Sum {
		if c > limit {
			return false
		}
	}
	return true
}
