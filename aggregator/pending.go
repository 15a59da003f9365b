package aggregator

import (
	"encoding/binary"
	"fmt"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// Pending state (groups below threshold) is flat: a group is a
// pendingGroup in Partition.groups, found through Partition.pend (groupID
// → index), and its reports are a chain of rep records in Partition.reps.
// Neither holds a pointer, so the collector never scans them, and freed
// slots are reused. A rep keeps what recovery counts with — the report id
// (duplicates), the share's x (distinct users) — and a reference to its
// spill record, which holds the rest (the share's y, the ciphertext; the
// group's tag and commitment in its first record). A singleton group costs
// its index slots, a pendingGroup and a rep in memory (≈ 135 B,
// BenchmarkBoundPendingBytes);
// the spill record is read back when the group reaches k shares, when it
// opens, and for Pending.

// rep is one report of a pending group.
type rep struct {
	id   [16]byte
	x    [32]byte // the share's x, canonical encoding
	ref  uint64   // its spill record
	next int32    // the group's next report (−1: the tail); in the free list, the next free slot
	meta uint32   // reportBytes it was charged (repSizeMask) | repShare | repDropped | repUnverified
}

const (
	repShare   = 1 << 31 // the group's first live report at its x: a share (later ones at that x are repeats)
	repDropped = 1 << 30 // dropped after its id was remembered (bad-presentation, bad-share): not pending, id kept for duplicates
	// repUnverified: its report token and ARC presentation are not
	// verified yet (its spill record carries them): a candidate, checked
	// when its group reaches k distinct candidate shares (verifyGroup)
	repUnverified = 1 << 29
	repSizeMask   = 1<<28 - 1
)

func (r *rep) size() int64 { return int64(r.meta & repSizeMask) }
func (r *rep) share() bool { return r.meta&(repShare|repDropped) == repShare }
func (r *rep) live() bool  { return r.meta&repDropped == 0 }
func (r *rep) unverified() bool {
	return r.meta&(repUnverified|repDropped) == repUnverified
}

// pendingGroup is a (tag, commitment) group below threshold.
type pendingGroup struct {
	gid        groupID
	head, tail int32 // its chain in Partition.reps; in the free list, head is the next free slot
	n          int32 // reports in the chain: ids remembered (held)
	live       int32 // of them, not dropped: pending reports
	ep         uint32
	k          uint16
	shares     uint16 // live reports flagged repShare: distinct x, < k
	policy     star.Policy
	suspect    bool   // a batch check failed: every new share is verified on arrival
	used       bool   // a group, not a free slot
	pipe       uint32 // its pipeline digest: epochState.pipes[pipe]
}

// chunked is a slice stored in chunks of 2^16 elements: it grows without
// copying (no latency spike, no half-empty capacity after a doubling) and
// element addresses stay valid while it grows.
type chunked[T any] struct {
	chunks [][]T
	n      int32
}

const chunkBits = 16

func (c *chunked[T]) at(i int32) *T { return &c.chunks[i>>chunkBits][i&(1<<chunkBits-1)] }

func (c *chunked[T]) add(v T) int32 {
	if int(c.n)>>chunkBits == len(c.chunks) {
		c.chunks = append(c.chunks, make([]T, 1<<chunkBits))
	}
	i := c.n
	*c.at(i) = v
	c.n++
	return i
}

// groupIndex finds a pending group by its groupID: open addressing with
// linear probing over slots holding group index + 1 (0: empty), at most
// 3/4 full. groupIDs are SHA-256 outputs, so their first 8 bytes hash
// well and no client can aim reports at one probe sequence. 5 to 11 B per
// group, against ≈ 80 B for a Go map[groupID]int32.
type groupIndex struct {
	slots []int32
	n     int
}

func (x *groupIndex) home(gid *groupID) int {
	return int(binary.LittleEndian.Uint64(gid[:8]) & uint64(len(x.slots)-1))
}

// find returns gid's group, false when gid has none.
func (x *groupIndex) find(p *Partition, gid *groupID) (int32, bool) {
	if x.n == 0 {
		return 0, false
	}
	for i := x.home(gid); ; i = (i + 1) & (len(x.slots) - 1) {
		s := x.slots[i]
		if s == 0 {
			return 0, false
		}
		if p.group(s-1).gid == *gid {
			return s - 1, true
		}
	}
}

// insert adds group gi under its gid (not in the index).
func (x *groupIndex) insert(p *Partition, gi int32) {
	if 4*(x.n+1) > 3*len(x.slots) {
		old := x.slots
		x.slots = make([]int32, max(1024, 2*len(old)))
		for _, s := range old {
			if s != 0 {
				x.place(p, s)
			}
		}
	}
	x.place(p, gi+1)
	x.n++
}

func (x *groupIndex) place(p *Partition, s int32) {
	i := x.home(&p.group(s - 1).gid)
	for x.slots[i] != 0 {
		i = (i + 1) & (len(x.slots) - 1)
	}
	x.slots[i] = s
}

// remove deletes gid's entry (backward-shift deletion: no tombstones).
func (x *groupIndex) remove(p *Partition, gid *groupID) {
	if x.n == 0 {
		return
	}
	mask := len(x.slots) - 1
	i := x.home(gid)
	for {
		s := x.slots[i]
		if s == 0 {
			return
		}
		if p.group(s-1).gid == *gid {
			break
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := x.slots[j]
		if s == 0 {
			break
		}
		// move s back to the hole at i unless its home lies cyclically in (i, j]
		h := x.home(&p.group(s - 1).gid)
		if (j-h)&mask >= (j-i)&mask {
			x.slots[i] = s
			i = j
		}
	}
	x.slots[i] = 0
	x.n--
}

// bigGroup indexes the reports of a pending group with more than idSetFew
// of them (FT_u impressions of few users), so a duplicate or a repeated x
// is found without walking the chain.
type bigGroup struct {
	ids map[[16]byte]struct{}
	xs  map[[32]byte]struct{} // x of the live shares
}

// spilled is a rep's spill record decoded: tag and commitment only in the
// group's first record.
type spilled struct {
	head, checks        bool
	tag                 [32]byte
	commitment          []byte
	token, presentation []byte // with checks: the report's, to verify at threshold
	y                   []byte
	ct                  []byte
}

// encodeSpill is the spill record of r: flags ‖ [tag ‖ u16 n ‖
// commitment] ‖ [u16 n ‖ token ‖ u16 n ‖ presentation] ‖ y ‖ ciphertext,
// flags bit 0 for the group's first record (which carries the tag and
// commitment), bit 1 for a report whose report token and ARC presentation
// are not verified yet (repUnverified: kept until its group reaches k
// distinct candidate shares, verifyGroup).
func encodeSpill(r *star.Report, head, checks bool) []byte {
	b := make([]byte, 0, 1+32+2+len(r.Commitment)+4+len(r.Token)+len(r.Presentation)+protocol.ScalarSize+len(r.Ciphertext))
	var flags byte
	if head {
		flags |= spillHead
	}
	if checks {
		flags |= spillChecks
	}
	b = append(b, flags)
	if head {
		b = append(b, r.Tag[:]...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.Commitment)))
		b = append(b, r.Commitment...)
	}
	if checks {
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.Token)))
		b = append(b, r.Token...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.Presentation)))
		b = append(b, r.Presentation...)
	}
	y, _ := r.Share.Y.MarshalBinary()
	b = append(b, y...)
	return append(b, r.Ciphertext...)
}

const (
	spillHead   = 1 << 0
	spillChecks = 1 << 1
)

func decodeSpill(b []byte) (spilled, error) {
	var s spilled
	bad := fmt.Errorf("aggregator: spill record of %d bytes does not decode", len(b))
	if len(b) < 1 || b[0]&^(spillHead|spillChecks) != 0 {
		return s, bad
	}
	s.head, s.checks, b = b[0]&spillHead != 0, b[0]&spillChecks != 0, b[1:]
	if s.head {
		if len(b) < 34 {
			return s, bad
		}
		copy(s.tag[:], b)
		n := int(binary.BigEndian.Uint16(b[32:]))
		b = b[34:]
		if len(b) < n {
			return s, bad
		}
		s.commitment, b = b[:n], b[n:]
	}
	if s.checks {
		for _, f := range []*[]byte{&s.token, &s.presentation} {
			if len(b) < 2 {
				return s, bad
			}
			n := int(binary.BigEndian.Uint16(b))
			b = b[2:]
			if len(b) < n {
				return s, bad
			}
			*f, b = b[:n], b[n:]
		}
	}
	if len(b) < protocol.ScalarSize {
		return s, bad
	}
	s.y, s.ct = b[:protocol.ScalarSize], b[protocol.ScalarSize:]
	return s, nil
}

// fail records the first error of the partition's spill (Err).
func (p *Partition) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// Err returns the first I/O error of the partition's spill store (a full
// disk, a spill file changed under it). After one, the state is no longer
// exact: discard it and rebuild the partition by replay (Service does, by
// returning the error from the partition's loop).
func (p *Partition) Err() error { return p.err }

// spillOf returns the spill store of epoch e, creating it on first use:
// a file in SpillDir, or chunks of the heap without one.
func (p *Partition) spillOf(e *epochState) (spill, error) {
	if e.spill != nil {
		return e.spill, nil
	}
	if p.snap != nil {
		e.spill = &fileSpill{store: p.snap, dir: p.snap.dir(p.ID)}
		return e.spill, nil
	}
	if p.SpillDir == "" {
		e.spill = &memSpill{}
		return e.spill, nil
	}
	s, err := newFileSpill(p.SpillDir)
	if err != nil {
		return nil, err
	}
	e.spill = s
	return s, nil
}

func (p *Partition) group(i int32) *pendingGroup { return p.groups.at(i) }
func (p *Partition) rep(i int32) *rep            { return p.reps.at(i) }

// newGroup allocates a pending group slot for g and indexes it.
func (p *Partition) newGroup(g pendingGroup) int32 {
	g.used = true
	var i int32
	if p.freeGroup >= 0 {
		i = p.freeGroup
		p.freeGroup = p.group(i).head
		*p.group(i) = g
	} else {
		i = p.groups.add(g)
	}
	p.pend.insert(p, i)
	return i
}

// appendRep appends r (x: its share's x, xKey) to pending group gi with
// flags (repShare, repDropped, repUnverified), writing its spill record; false after a
// spill error.
func (p *Partition) appendRep(gi int32, gid groupID, r *star.Report, x *[32]byte, size int64, flags uint32) bool {
	g := p.group(gi)
	s, err := p.spillOf(p.eps[g.ep])
	if err != nil {
		p.fail(err)
		return false
	}
	ref, err := s.put(encodeSpill(r, g.n == 0, flags&repUnverified != 0))
	if err != nil {
		p.fail(err)
		return false
	}
	nr := rep{id: r.ID, x: *x, ref: ref, next: -1, meta: uint32(size)&repSizeMask | flags}
	var ri int32
	if p.freeRep >= 0 {
		ri = p.freeRep
		p.freeRep = p.rep(ri).next
		*p.rep(ri) = nr
	} else {
		ri = p.reps.add(nr)
	}
	g = p.group(gi)
	if g.n == 0 {
		g.head = ri
	} else {
		p.rep(g.tail).next = ri
	}
	g.tail = ri
	g.n++
	if flags&repDropped == 0 {
		g.live++
		if flags&repShare != 0 {
			g.shares++
		}
	}
	if bg := p.big[gid]; bg != nil {
		bg.ids[r.ID] = struct{}{}
		if nr.share() {
			bg.xs[nr.x] = struct{}{}
		}
	} else if g.n > idSetFew {
		p.indexBig(gi)
	}
	return true
}

// indexBig builds the bigGroup of pending group gi from its chain.
func (p *Partition) indexBig(gi int32) {
	g := p.group(gi)
	bg := &bigGroup{ids: make(map[[16]byte]struct{}, max(2*idSetFew, int(g.n))), xs: map[[32]byte]struct{}{}}
	for i := g.head; i >= 0; i = p.rep(i).next {
		bg.ids[p.rep(i).id] = struct{}{}
		if p.rep(i).share() {
			bg.xs[p.rep(i).x] = struct{}{}
		}
	}
	p.big[g.gid] = bg
}

// hasID reports whether pending group gi remembers report id.
func (p *Partition) hasID(gi int32, gid groupID, id [16]byte) bool {
	if bg := p.big[gid]; bg != nil {
		_, ok := bg.ids[id]
		return ok
	}
	for i := p.group(gi).head; i >= 0 && p.group(gi).n > 0; i = p.rep(i).next {
		if p.rep(i).id == id {
			return true
		}
	}
	return false
}

// hasX reports whether pending group gi holds a live share at x (the same
// user under FT_u repeating an impression).
func (p *Partition) hasX(gi int32, gid groupID, x [32]byte) bool {
	if bg := p.big[gid]; bg != nil {
		_, ok := bg.xs[x]
		return ok
	}
	for i := p.group(gi).head; i >= 0 && p.group(gi).n > 0; i = p.rep(i).next {
		if p.rep(i).share() && p.rep(i).x == x {
			return true
		}
	}
	return false
}

// dropRep marks rep ri of group gi dropped ("bad-share", …): no longer
// pending, its id still remembered.
func (p *Partition) dropRep(gi int32, gid groupID, ri int32, reason string) {
	r, g := p.rep(ri), p.group(gi)
	if !r.live() {
		return
	}
	if r.share() {
		g.shares--
		if bg := p.big[gid]; bg != nil {
			delete(bg.xs, r.x)
		}
	}
	r.meta |= repDropped
	g.live--
	p.Stats.Reports--
	p.drop(reason)
}

// releaseGroup releases pending group gi and its chain.
func (p *Partition) releaseGroup(gi int32, gid groupID) {
	g := p.group(gi)
	if g.n > 0 {
		p.rep(g.tail).next = p.freeRep
		p.freeRep = g.head
	}
	p.pend.remove(p, &gid)
	*g = pendingGroup{head: p.freeGroup}
	p.freeGroup = gi
	delete(p.big, gid)
	delete(p.pendARC, gid)
}

// load reads rep ri's spill record.
func (p *Partition) load(e *epochState, ri int32) (spilled, error) {
	if e.spill == nil {
		return spilled{}, fmt.Errorf("aggregator: epoch %s/%s has no spill store", e.app, e.epoch)
	}
	b, err := e.spill.get(p.rep(ri).ref)
	if err != nil {
		return spilled{}, err
	}
	return decodeSpill(b)
}

// shareOf rebuilds rep ri's share from its x and the spilled y.
func (p *Partition) shareOf(ri int32, s spilled) (vss.Share, error) {
	x, y := protocol.G.NewScalar(), protocol.G.NewScalar()
	if err := x.UnmarshalBinary(p.rep(ri).x[:]); err != nil {
		return vss.Share{}, err
	}
	if err := y.UnmarshalBinary(s.y); err != nil {
		return vss.Share{}, err
	}
	return vss.Share{X: x, Y: y}, nil
}
