package aggregator

import (
	"bytes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/renameio/v2"
	"golang.org/x/crypto/chacha20poly1305"

	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// Snapshots let a partition move between aggregator processes without
// replaying its epoch from the first offset. Every SnapshotEvery applied
// messages (more in a large state: snapshotDue), right after a commit at
// offset O, a member writes the
// partition's state as of O (every message before O applied, none after)
// to <SnapshotDir>/p<partition>/<O>.snap; the pending reports' spill is
// already there, in segment files the snapshot lists with their lengths.
// The member that receives the partition restores the newest snapshot at
// or below the committed offset and replays only the messages after it,
// so a move costs a restore (proportional to the state, ≈ 130 B a pending
// report) plus at most max(SnapshotEvery, pending/SnapshotPerPending)
// messages, whatever the epoch's length. A Partition is deterministic, so restored state plus the tail
// equals a replay from the start (TestSnapshotRestoreExact).
//
// Confidentiality and integrity: the state is sealed with
// XChaCha20-Poly1305 under a key derived (HKDF-SHA256, RFC 5869) from the
// aggregator's onion private key, bound to the file's header (partition,
// partition count, offset, the listed segments); each spill segment is
// sealed record by record under a key derived from the same key and the
// segment's random id. A copy of the directory without the onion key
// shows nothing (ATTACK snapshot-theft); with the key it shows what the
// reports topic shows to the same thief. A changed or truncated file fails
// its AEAD: the restore falls back to an older snapshot or to a replay.
//
// The directory must be shared by the members of the group for moves
// between hosts (a network volume); a member that cannot read a snapshot
// replays, so a local directory only makes restarts and moves between
// processes of one host fast.

// snapMagic opens every snapshot file.
const snapMagic = "crowdlog-v1 aggregator snapshot\n"

// stateVersion is the version of the encoded partition state. 2: the
// verified presentation tags are kept as star.ARCTagDigest (was SHA-256 of
// the tag), so a version-1 snapshot is refused and the partition replays.
// 3: pipeline digests (per epoch, per pending group and per recovered
// group). 4: pending reports may be unverified candidates (repUnverified,
// their spill records carry their token and presentation: verification
// at the threshold). 5: the newest issue time of a signed control
// message accepted (Partition.ControlKey), after the closed epochs.
const stateVersion = 5

// snapKeep is the number of snapshots kept per partition (the newest; the
// older ones are the fallback when the newest does not restore).
const snapKeep = 2

// segGrace is how old an unreferenced segment must be before the
// collector removes it: a segment being written by another member that
// still believes it owns the partition is younger.
const segGrace = time.Minute

// segmentRef is a spill segment as a snapshot lists it.
type segmentRef struct {
	id   [16]byte
	size int64
}

// snapStore is a Service's snapshot directory and keys.
type snapStore struct {
	root   string
	keyID  [8]byte // the first 8 bytes of SHA-256 over the onion public key
	master []byte  // HKDF-Extract(onion private key)
	mu     sync.Mutex
	open   map[[16]byte]int // segments open in this process (never collected)
}

// newSnapStore returns the snapshot store in root, keyed by the onion key
// pair key (a member's first aggregator key: members of a group share it).
func newSnapStore(root string, key *onion.KeyPair) (*snapStore, error) {
	if key == nil {
		return nil, errors.New("aggregator: snapshots need the aggregator's onion key")
	}
	priv, err := key.Private.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("aggregator: snapshot key: %w", err)
	}
	pub, err := key.Public.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("aggregator: snapshot key: %w", err)
	}
	master, err := hkdf.Extract(sha256.New, priv, []byte("crowdlog-v1 aggregator snapshot"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("aggregator: create the snapshot directory (--snapshot-dir): %w", err)
	}
	s := &snapStore{root: root, master: master, open: map[[16]byte]int{}}
	h := sha256.Sum256(pub)
	copy(s.keyID[:], h[:])
	return s, nil
}

func (s *snapStore) dir(partition int) string {
	return filepath.Join(s.root, fmt.Sprintf("p%04d", partition))
}

func segName(id [16]byte) string { return fmt.Sprintf("%x.seg", id) }

func (s *snapStore) key(info string) []byte {
	k, err := hkdf.Expand(sha256.New, s.master, info, chacha20poly1305.KeySize)
	if err != nil {
		panic(err) // 32 bytes of SHA-256 HKDF never fail
	}
	return k
}

// segmentAEAD is the key of spill segment id.
func (s *snapStore) segmentAEAD(id [16]byte) cipher.AEAD {
	a, _ := chacha20poly1305.New(s.key("spill segment " + string(id[:])))
	return a
}

func (s *snapStore) stateAEAD() cipher.AEAD {
	a, _ := chacha20poly1305.NewX(s.key("partition state"))
	return a
}

// createSegment creates segment id in dir, open for writing.
func (s *snapStore) createSegment(dir string, id [16]byte) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("aggregator: create %s (--snapshot-dir): %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, segName(id)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("aggregator: create a spill segment in %s (--snapshot-dir): %w", dir, err)
	}
	s.hold(id)
	return f, nil
}

// openSegment opens segment id of dir for reading its first size bytes.
func (s *snapStore) openSegment(dir string, id [16]byte, size int64) (*segment, error) {
	f, err := os.Open(filepath.Join(dir, segName(id)))
	if err != nil {
		return nil, fmt.Errorf("aggregator: open spill segment: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() < size {
		err = fmt.Errorf("aggregator: spill segment %s has %d bytes, its snapshot lists %d", segName(id), fi.Size(), size)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	s.hold(id)
	return &segment{f: f, id: id, aead: s.segmentAEAD(id), size: size}, nil
}

func (s *snapStore) hold(id [16]byte) {
	s.mu.Lock()
	s.open[id]++
	s.mu.Unlock()
}

func (s *snapStore) release(id [16]byte) {
	s.mu.Lock()
	if s.open[id]--; s.open[id] <= 0 {
		delete(s.open, id)
	}
	s.mu.Unlock()
}

func (s *snapStore) isOpen(id [16]byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open[id] > 0
}

// snapHeader is a snapshot file's authenticated, unencrypted header.
type snapHeader struct {
	partition, count int
	offset           int64
	keyID            [8]byte
	nonce            [chacha20poly1305.NonceSizeX]byte
	segments         [][16]byte
}

func (h *snapHeader) encode() []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(h.partition))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.count))
	b = binary.LittleEndian.AppendUint64(b, uint64(h.offset))
	b = append(b, h.keyID[:]...)
	b = append(b, h.nonce[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h.segments)))
	for _, id := range h.segments {
		b = append(b, id[:]...)
	}
	return b
}

// readSnapHeader parses the start of a snapshot file: magic, u32 header
// length, header. It returns the header, its bytes and the sealed state.
func readSnapHeader(b []byte) (snapHeader, []byte, []byte, error) {
	var h snapHeader
	bad := errors.New("aggregator: not a snapshot file (bad header)")
	if !bytes.HasPrefix(b, []byte(snapMagic)) || len(b) < len(snapMagic)+4 {
		return h, nil, nil, bad
	}
	b = b[len(snapMagic):]
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n < 48 || n > len(b) {
		return h, nil, nil, bad
	}
	hb, rest := b[:n], b[n:]
	d := dec{b: hb}
	h.partition, h.count, h.offset = int(d.u32()), int(d.u32()), int64(d.u64())
	copy(h.keyID[:], d.take(8))
	copy(h.nonce[:], d.take(len(h.nonce)))
	ns := d.count(16)
	for i := 0; i < ns; i++ {
		var id [16]byte
		copy(id[:], d.take(16))
		h.segments = append(h.segments, id)
	}
	if d.err != nil || len(d.b) != 0 || h.offset < 0 {
		return h, nil, nil, bad
	}
	return h, hb, rest, nil
}

// write stores the state of partition (of count) as of offset, whose spill
// segments are segs (flushed), then removes what no kept snapshot needs.
// It seals state in place: the caller must not use it afterwards.
// The segments and the file are synced before the file gets its name, so
// a snapshot that exists is complete.
//
// only (after an epoch close) removes every other snapshot of the
// partition: the older ones hold the closed epoch's pending state.
func (s *snapStore) write(partition, count int, offset int64, state []byte, segs []segmentRef, only bool) error {
	dir := s.dir(partition)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	h := snapHeader{partition: partition, count: count, offset: offset, keyID: s.keyID}
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return err
	}
	for _, g := range segs {
		h.segments = append(h.segments, g.id)
		f, err := os.Open(filepath.Join(dir, segName(g.id)))
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err != nil {
			return fmt.Errorf("aggregator: sync spill segment for a snapshot: %w", err)
		}
	}
	hb := h.encode()
	ad := append([]byte(snapMagic), hb...)
	prefix := append([]byte(snapMagic), binary.LittleEndian.AppendUint32(nil, uint32(len(hb)))...)
	prefix = append(prefix, hb...)
	// sealed in place: state is this snapshot's own buffer, and a copy of
	// it (≈ 123 MB at a million pending reports) would cost as much CPU
	// as the seal, and a GC cycle over the partition's heap
	sealed := s.stateAEAD().Seal(state[:0], h.nonce[:], state, ad)
	// renameio: a temporary file beside it (".<name><random>"), synced,
	// then renamed; a crash leaves at most the temporary file, which
	// collect removes
	f, err := renameio.NewPendingFile(s.path(partition, offset), renameio.WithTempDir(dir), renameio.WithStaticPermissions(0o600))
	if err == nil {
		defer f.Cleanup()
		if _, err = f.Write(prefix); err == nil {
			if _, err = f.Write(sealed); err == nil {
				err = f.CloseAtomicallyReplace()
			}
		}
	}
	if err != nil {
		return fmt.Errorf("aggregator: write snapshot (is the disk of --snapshot-dir full?): %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	s.collect(partition, only)
	return nil
}

// snapshots lists partition's snapshot files, newest (highest offset)
// first.
func (s *snapStore) snapshots(partition int) []int64 {
	ents, _ := os.ReadDir(s.dir(partition))
	var offs []int64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".snap")
		if !ok {
			continue
		}
		if o, err := strconv.ParseInt(name, 10, 64); err == nil {
			offs = append(offs, o)
		}
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] > offs[j] })
	return offs
}

func (s *snapStore) path(partition int, offset int64) string {
	return filepath.Join(s.dir(partition), fmt.Sprintf("%020d.snap", offset))
}

// header reads the header of partition's snapshot at offset, not the
// sealed state after it.
func (s *snapStore) header(partition int, offset int64) (snapHeader, error) {
	f, err := os.Open(s.path(partition, offset))
	if err != nil {
		return snapHeader{}, err
	}
	defer f.Close()
	b := make([]byte, len(snapMagic)+4)
	if _, err := io.ReadFull(f, b); err != nil {
		return snapHeader{}, err
	}
	n := binary.LittleEndian.Uint32(b[len(snapMagic):])
	if n > 1<<20 {
		return snapHeader{}, errors.New("aggregator: not a snapshot file (bad header)")
	}
	b = append(b, make([]byte, n)...)
	if _, err := io.ReadFull(f, b[len(snapMagic)+4:]); err != nil {
		return snapHeader{}, err
	}
	h, _, _, err := readSnapHeader(b)
	return h, err
}

// collect removes partition's snapshots beyond the newest snapKeep, then
// the segments none of the kept ones lists, unless this process has them
// open or they are younger than segGrace.
func (s *snapStore) collect(partition int, only bool) {
	offs := s.snapshots(partition)
	keep := map[string]bool{}
	n := snapKeep
	if only {
		n = 1
	}
	for i, o := range offs {
		if i >= n {
			os.Remove(s.path(partition, o))
			continue
		}
		h, err := s.header(partition, o)
		if errors.Is(err, fs.ErrNotExist) {
			return // a kept snapshot went away under us: collect another time
		}
		if err != nil {
			continue
		}
		for _, id := range h.segments {
			keep[segName(id)] = true
		}
	}
	dir := s.dir(partition)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		name := e.Name()
		// segments, and renameio's temporary files of unfinished writes
		if !strings.HasSuffix(name, ".seg") && !strings.HasPrefix(name, ".") || keep[name] {
			continue
		}
		var id [16]byte
		if n, err := fmt.Sscanf(name, "%32x.seg", &id); err == nil && n == 1 && s.isOpen(id) {
			continue
		}
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < segGrace {
			continue
		}
		os.Remove(filepath.Join(dir, name))
	}
}

// restore returns partition's state from its newest snapshot at or below
// upTo that restores, in a Partition made by fresh, and the snapshot's
// offset; nil when none does (the caller replays). Each snapshot that
// does not restore is reported to skipped.
func (s *snapStore) restore(partition, count int, upTo int64, fresh func() *Partition, skipped func(offset int64, err error)) (*Partition, int64) {
	for _, o := range s.snapshots(partition) {
		if o > upTo {
			continue
		}
		p := fresh()
		err := s.load(p, partition, count, o)
		if err == nil {
			return p, o
		}
		p.Close()
		if !errors.Is(err, fs.ErrNotExist) {
			skipped(o, err)
		}
	}
	return nil, 0
}

func (s *snapStore) load(p *Partition, partition, count int, offset int64) error {
	b, err := os.ReadFile(s.path(partition, offset))
	if err != nil {
		return err
	}
	h, hb, sealed, err := readSnapHeader(b)
	if err != nil {
		return err
	}
	switch {
	case h.partition != partition || h.offset != offset:
		return fmt.Errorf("aggregator: snapshot of partition %d at %d in the file of %d at %d", h.partition, h.offset, partition, offset)
	case h.count != count:
		return fmt.Errorf("aggregator: snapshot of a topic of %d partitions, the topic has %d", h.count, count)
	case h.keyID != s.keyID:
		return errors.New("aggregator: snapshot sealed under another onion key")
	}
	state, err := s.stateAEAD().Open(sealed[:0], h.nonce[:], sealed, append([]byte(snapMagic), hb...))
	if err != nil {
		return errors.New("aggregator: snapshot does not authenticate (changed or truncated on disk)")
	}
	return p.decodeState(state, h.segments)
}

// encodeState returns the partition's state (stateVersion), its spill
// flushed, and the spill segments it lists. A spill in unlinked files
// (SpillDir without snapshots) cannot be snapshotted. The state is, in
// order: the epochs (encodeEpochs), the counters (encodeCounters), the
// flat pending state (encodePending) and the recovered groups
// (encodeTags).
func (p *Partition) encodeState() ([]byte, []segmentRef, error) {
	if p.err != nil {
		return nil, nil, p.err
	}
	var e enc
	e.b = make([]byte, 0, 1<<16+int(p.reps.n)*64+int(p.groups.n)*63)
	e.u32(stateVersion)
	segs, err := p.encodeEpochs(&e)
	if err != nil {
		return nil, nil, err
	}
	p.encodeCounters(&e)
	p.encodePending(&e)
	if err := p.encodeTags(&e); err != nil {
		return nil, nil, err
	}
	// room for the AEAD tag, so that write seals it in place
	return slices.Grow(e.b, chacha20poly1305.Overhead), segs, nil
}

// encodeEpochs appends the epoch table (a nil entry as 0; else 1, app,
// epoch, open, held reports and bytes, spent tokens, pipeline digests,
// the spill) and returns the spill segments it lists.
func (p *Partition) encodeEpochs(e *enc) ([]segmentRef, error) {
	var segs []segmentRef
	e.u32(uint32(len(p.eps)))
	for _, ep := range p.eps {
		if ep == nil {
			e.u8(0)
			continue
		}
		e.u8(1)
		e.str(ep.app)
		e.str(ep.epoch)
		e.bool(ep.open)
		e.u64(uint64(ep.held))
		e.u64(uint64(ep.heldBytes))
		e.u32(uint32(len(ep.spent)))
		for id := range ep.spent {
			e.b = append(e.b, id[:]...)
		}
		e.u32(uint32(len(ep.pipes)))
		for _, d := range ep.pipes {
			e.b = append(e.b, d[:]...)
		}
		ss, err := p.encodeSpill(e, ep.spill)
		if err != nil {
			return nil, err
		}
		segs = append(segs, ss...)
	}
	return segs, nil
}

// encodeSpill appends an epoch's spill: 0 none, 1 in memory (its chunks),
// 2 in snapshot segments (their ids and sizes, returned).
func (p *Partition) encodeSpill(e *enc, s spill) ([]segmentRef, error) {
	switch sp := s.(type) {
	case nil:
		e.u8(0)
	case *memSpill:
		e.u8(1)
		e.u32(uint32(len(sp.chunks)))
		for _, c := range sp.chunks {
			e.bytes(c)
		}
	case *fileSpill:
		if sp.store == nil {
			return nil, errors.New("aggregator: a partition with its spill in unlinked files cannot be snapshotted")
		}
		ss, err := sp.segments()
		if err != nil {
			p.fail(err)
			return nil, err
		}
		e.u8(2)
		e.u32(uint32(len(ss)))
		for _, g := range ss {
			e.b = append(e.b, g.id[:]...)
			e.u64(uint64(g.size))
		}
		return ss, nil
	}
	return nil, nil
}

// encodeCounters appends the closed epochs, the control records issued
// and the Stats.
func (p *Partition) encodeCounters(e *enc) {
	e.u32(uint32(len(p.closed)))
	for k := range p.closed {
		e.str(k.app)
		e.str(k.epoch)
	}
	e.u64(uint64(p.controlIssued))
	st := &p.Stats
	for _, v := range []int64{st.Reports, st.Decrypted, st.Recoveries, st.FailedRecover} {
		e.u64(uint64(v))
	}
	e.u32(uint32(len(st.Dropped)))
	for k, v := range st.Dropped {
		e.str(k)
		e.u64(uint64(v))
	}
}

// encodePending appends the flat pending state: the groups, the reports
// and the heads of both free lists.
func (p *Partition) encodePending(e *enc) {
	e.u32(uint32(p.groups.n))
	for i := int32(0); i < p.groups.n; i++ {
		g := p.group(i)
		e.b = append(e.b, g.gid[:]...)
		for _, v := range []int32{g.head, g.tail, g.n, g.live} {
			e.u32(uint32(v))
		}
		e.u32(g.ep)
		e.u16(g.k)
		e.u16(g.shares)
		e.u8(byte(g.policy))
		e.bool(g.suspect)
		e.bool(g.used)
		e.u32(g.pipe)
	}
	e.u32(uint32(p.reps.n))
	for i := int32(0); i < p.reps.n; i++ {
		r := p.rep(i)
		e.b = append(e.b, r.id[:]...)
		e.b = append(e.b, r.x[:]...)
		e.u64(r.ref)
		e.u32(uint32(r.next))
		e.u32(r.meta)
	}
	e.u32(uint32(p.freeGroup))
	e.u32(uint32(p.freeRep))
}

// encodeTags appends the recovered groups (tagState: key, polynomial,
// the report ids seen, the ARC tags) and the ARC tags of pending groups.
func (p *Partition) encodeTags(e *enc) error {
	e.u32(uint32(len(p.tags)))
	for gid, t := range p.tags {
		e.b = append(e.b, gid[:]...)
		e.u32(t.ep.idx)
		e.u8(byte(t.policy))
		e.u16(uint16(t.k))
		e.b = append(e.b, t.pipeline[:]...)
		var flags byte
		if t.dead {
			flags |= 1
		}
		if t.key != nil {
			flags |= 2
		}
		if t.poly != nil {
			flags |= 4
		}
		e.u8(flags)
		if t.key != nil {
			e.b = append(e.b, t.key[:]...)
		}
		if t.poly != nil {
			pb, err := t.poly.MarshalBinary()
			if err != nil {
				return err
			}
			e.bytes(pb)
		}
		e.b = append(e.b, t.tag[:]...)
		if t.seen.many != nil {
			e.u32(uint32(len(t.seen.many)))
			for id := range t.seen.many {
				e.b = append(e.b, id[:]...)
			}
		} else {
			e.u32(uint32(len(t.seen.few)))
			for _, id := range t.seen.few {
				e.b = append(e.b, id[:]...)
			}
		}
		e.arc(t.arcOK)
	}
	e.u32(uint32(len(p.pendARC)))
	for gid, m := range p.pendARC {
		e.b = append(e.b, gid[:]...)
		e.arc(m)
	}
	return nil
}

// decodeState sets the state of p, a new Partition, from encodeState's
// bytes; segments lists the spill segments its snapshot's header names
// (every file spill must be among them). It checks every index and chain
// of the flat pending state, so no input makes a later step panic or
// loop. Derived state is rebuilt: the group index, the large groups'
// indexes, the open epochs per app. On an error p holds part of the state
// and the segments opened so far: Close it.
func (p *Partition) decodeState(b []byte, segments [][16]byte) error {
	d := &dec{b: b}
	if v := d.u32(); v != stateVersion {
		return fmt.Errorf("aggregator: partition state version %d, this build reads %d", v, stateVersion)
	}
	listed := map[[16]byte]bool{}
	for _, id := range segments {
		listed[id] = true
	}
	if err := p.decodeEpochs(d, listed); err != nil {
		return err
	}
	p.decodeCounters(d)
	if err := p.decodePending(d); err != nil {
		return err
	}
	if err := p.decodeTags(d); err != nil {
		return err
	}
	if d.err != nil || len(d.b) != 0 {
		return errors.New("aggregator: partition state does not decode")
	}
	return p.checkPending()
}

// decodeEpochs reads encodeEpochs' table into p.eps, p.epochs and the
// open epochs per app; a file spill's segments must be listed.
func (p *Partition) decodeEpochs(d *dec, listed map[[16]byte]bool) error {
	neps := d.count(1)
	for i := 0; i < neps && d.err == nil; i++ {
		if d.u8() == 0 {
			p.eps = append(p.eps, nil)
			continue
		}
		app, epoch := d.str(), d.str()
		if p.epochs[epochKey{app, epoch}] != nil {
			return errors.New("aggregator: partition state: an epoch twice")
		}
		ep := p.newEpoch(app, epoch)
		ep.open = d.u8() == 1
		ep.held, ep.heldBytes = int64(d.u64()), int64(d.u64())
		if ns := d.count(32); ns > 0 {
			ep.spent = make(map[[32]byte]struct{}, ns)
			for j := 0; j < ns; j++ {
				var id [32]byte
				copy(id[:], d.take(32))
				ep.spent[id] = struct{}{}
			}
		}
		np := d.count(32)
		for j := 0; j < np && d.err == nil; j++ {
			var pd [32]byte
			copy(pd[:], d.take(32))
			if ep.pipe(pd) != uint32(j) {
				return errors.New("aggregator: partition state: a pipeline digest twice in an epoch")
			}
		}
		if err := p.decodeSpill(d, ep, listed); err != nil {
			return err
		}
		if ep.open {
			p.openPerApp[ep.app]++
		}
	}
	return nil
}

// decodeSpill reads encodeSpill's spill of ep, opening its segments in
// the snapshot store.
func (p *Partition) decodeSpill(d *dec, ep *epochState, listed map[[16]byte]bool) error {
	switch d.u8() {
	case 0:
	case 1:
		m := &memSpill{}
		nc := d.count(4)
		for j := 0; j < nc; j++ {
			c := d.bytesField()
			m.chunks = append(m.chunks, append(make([]byte, 0, max(spillChunk, len(c))), c...))
		}
		ep.spill = m
	case 2:
		if p.snap == nil {
			return errors.New("aggregator: partition state with spill segments, and no snapshot store to open them")
		}
		fsp := &fileSpill{store: p.snap, dir: p.snap.dir(p.ID)}
		ep.spill = fsp
		ns := d.count(24)
		for j := 0; j < ns && d.err == nil; j++ {
			var id [16]byte
			copy(id[:], d.take(16))
			size := int64(d.u64())
			if !listed[id] || size < 0 {
				return errors.New("aggregator: partition state lists a spill segment its header does not")
			}
			g, err := p.snap.openSegment(fsp.dir, id, size)
			if err != nil {
				return err
			}
			fsp.prev = append(fsp.prev, g)
		}
	default:
		return errors.New("aggregator: partition state: bad spill kind")
	}
	return nil
}

// decodeCounters reads encodeCounters' closed epochs, control records
// issued and Stats.
func (p *Partition) decodeCounters(d *dec) {
	nc := d.count(8)
	for i := 0; i < nc && d.err == nil; i++ {
		p.closed[epochKey{d.str(), d.str()}] = true
	}
	p.controlIssued = int64(d.u64())
	st := &p.Stats
	st.Reports, st.Decrypted, st.Recoveries, st.FailedRecover = int64(d.u64()), int64(d.u64()), int64(d.u64()), int64(d.u64())
	nd := d.count(12)
	for i := 0; i < nd && d.err == nil; i++ {
		st.Dropped[d.str()] = int64(d.u64())
	}
}

// decodePending reads encodePending's flat pending state; checkPending
// validates its indexes and chains later. A used group must name a
// decoded epoch and one of its pipeline digests.
func (p *Partition) decodePending(d *dec) error {
	ng := d.count(63)
	for i := 0; i < ng && d.err == nil; i++ {
		var g pendingGroup
		copy(g.gid[:], d.take(32))
		g.head, g.tail, g.n, g.live = int32(d.u32()), int32(d.u32()), int32(d.u32()), int32(d.u32())
		g.ep = d.u32()
		g.k, g.shares = d.u16(), d.u16()
		g.policy = star.Policy(d.u8())
		g.suspect, g.used = d.u8() == 1, d.u8() == 1
		g.pipe = d.u32()
		if g.used && d.err == nil && (int(g.ep) >= len(p.eps) || p.eps[g.ep] == nil || int(g.pipe) >= len(p.eps[g.ep].pipes)) {
			return errors.New("aggregator: partition state: a pending group of an unknown epoch or pipeline digest")
		}
		p.groups.add(g)
	}
	nr := d.count(64)
	for i := 0; i < nr && d.err == nil; i++ {
		var r rep
		copy(r.id[:], d.take(16))
		copy(r.x[:], d.take(32))
		r.ref = d.u64()
		r.next = int32(d.u32())
		r.meta = d.u32()
		p.reps.add(r)
	}
	p.freeGroup, p.freeRep = int32(d.u32()), int32(d.u32())
	return nil
}

// decodeTags reads encodeTags' recovered groups and the ARC tags of
// pending groups. A recovered group needs its key and (unless p verifies
// nothing) its polynomial, or is dead; none twice.
func (p *Partition) decodeTags(d *dec) error {
	epOf := func(idx uint32) *epochState {
		if int(idx) >= len(p.eps) || p.eps[idx] == nil {
			d.fail()
			return nil
		}
		return p.eps[idx]
	}
	nt := d.count(32 + 4 + 4 + 32 + 32 + 8)
	for i := 0; i < nt && d.err == nil; i++ {
		var gid groupID
		copy(gid[:], d.take(32))
		t := &tagState{ep: epOf(d.u32()), policy: star.Policy(d.u8()), k: int(d.u16())}
		copy(t.pipeline[:], d.take(32))
		flags := d.u8()
		t.dead = flags&1 != 0
		if flags&2 != 0 {
			var key [32]byte
			copy(key[:], d.take(32))
			t.key = &key
		}
		if flags&4 != 0 {
			f, err := vss.UnmarshalPolynomial(d.bytesField())
			if err != nil {
				return fmt.Errorf("aggregator: partition state: %w", err)
			}
			t.poly = &f
		}
		if t.key == nil && !t.dead || t.key != nil && t.poly == nil && !p.noVerify {
			return errors.New("aggregator: partition state: a recovered group without its key or polynomial")
		}
		copy(t.tag[:], d.take(32))
		ns := d.count(16)
		for j := 0; j < ns && d.err == nil; j++ {
			var id [16]byte
			copy(id[:], d.take(16))
			t.seen.add(id)
		}
		t.arcOK = d.arc()
		if _, dup := p.tags[gid]; dup {
			return errors.New("aggregator: partition state: a recovered group twice")
		}
		p.tags[gid] = t
	}
	na := d.count(36)
	for i := 0; i < na && d.err == nil; i++ {
		var gid groupID
		copy(gid[:], d.take(32))
		p.pendARC[gid] = d.arc()
	}
	return nil
}

// checkPending validates the decoded flat pending state (every index in
// range, every chain and free list a simple path of the length its head
// claims, no report in two of them, counts that match the chains) and
// rebuilds the group index and the large groups' indexes.
func (p *Partition) checkPending() error {
	bad := func(what string) error { return fmt.Errorf("aggregator: partition state: %s", what) }
	inReps := func(i int32) bool { return i >= 0 && i < p.reps.n }
	usedRep := make([]bool, p.reps.n)
	for gi := int32(0); gi < p.groups.n; gi++ {
		g := p.group(gi)
		if !g.used {
			continue
		}
		if int(g.ep) >= len(p.eps) || p.eps[g.ep] == nil {
			return bad("a pending group of no open epoch")
		}
		if _, ok := p.pend.find(p, &g.gid); ok {
			return bad("a pending group twice")
		}
		if _, ok := p.tags[g.gid]; ok {
			return bad("a group both pending and recovered")
		}
		var n, live, shares int32
		last := int32(-1)
		for i := g.head; g.n > 0; i = p.rep(i).next {
			if !inReps(i) || usedRep[i] || n == g.n {
				return bad("a broken report chain")
			}
			usedRep[i] = true
			n++
			r := p.rep(i)
			if r.live() {
				live++
				if r.share() {
					shares++
				}
			}
			last = i
			if r.next == -1 {
				break
			}
		}
		if n != g.n || live != g.live || shares != int32(g.shares) || g.n > 0 && last != g.tail {
			return bad("a pending group's counts do not match its chain")
		}
		p.pend.insert(p, gi)
		if g.n > idSetFew {
			p.indexBig(gi)
		}
	}
	usedGroup := make([]bool, p.groups.n)
	for i := p.freeGroup; i != -1; i = p.group(i).head {
		if i < 0 || i >= p.groups.n || usedGroup[i] || p.group(i).used {
			return bad("a broken free list of groups")
		}
		usedGroup[i] = true
	}
	for i := p.freeRep; i != -1; i = p.rep(i).next {
		if !inReps(i) || usedRep[i] {
			return bad("a broken free list of reports")
		}
		usedRep[i] = true
	}
	for gid := range p.pendARC {
		if _, ok := p.pend.find(p, &gid); !ok {
			return bad("presentations of a group that is not pending")
		}
	}
	return nil
}

// enc appends little-endian fields.
type enc struct{ b []byte }

func (e *enc) u8(v byte)    { e.b = append(e.b, v) }
func (e *enc) u16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}
func (e *enc) bytes(v []byte) { e.u32(uint32(len(v))); e.b = append(e.b, v...) }
func (e *enc) str(v string)   { e.u32(uint32(len(v))); e.b = append(e.b, v...) }
func (e *enc) arc(m map[[32]byte][32]byte) {
	e.u32(uint32(len(m)))
	for x, h := range m {
		e.b = append(e.b, x[:]...)
		e.b = append(e.b, h[:]...)
	}
}

// dec reads enc's fields; the first short read sets err and every later
// read returns zeros.
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail() {
	if d.err == nil {
		d.err = errors.New("short")
	}
	d.b = nil
}

func (d *dec) take(n int) []byte {
	if d.err != nil || n < 0 || n > len(d.b) {
		d.fail()
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u8() byte {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *dec) u16() uint16 {
	if b := d.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (d *dec) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if b := d.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// count reads a u32 count of elements of at least min bytes each; a count
// the rest cannot hold fails (no allocation from a forged count).
func (d *dec) count(min int) int {
	n := int(d.u32())
	if d.err != nil || n*min > len(d.b) {
		d.fail()
		return 0
	}
	return n
}

func (d *dec) bytesField() []byte { return d.take(d.count(1)) }
func (d *dec) str() string        { return string(d.bytesField()) }

func (d *dec) arc() map[[32]byte][32]byte {
	n := d.count(64)
	if n == 0 {
		return nil
	}
	m := make(map[[32]byte][32]byte, n)
	for i := 0; i < n; i++ {
		var x, h [32]byte
		copy(x[:], d.take(32))
		copy(h[:], d.take(32))
		m[x] = h
	}
	return m
}
