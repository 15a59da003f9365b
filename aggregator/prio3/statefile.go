package prio3

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// The services' snapshot files, written after the batch logs
// (batchlog.go) and before anything the state holds leaves the process.
// The leader's, big-endian:
//
//	magic "P3LS" ‖ version(1: 2) ‖ n partitions(u32) ‖ n × (partition(u32) ‖
//	next offset(u64)) ‖ n days(u32) ‖ n × (day(u32) ‖ outcome(len8)) ‖
//	leader state(len32, Leader.MarshalBinary without batches, and without
//	the pending reports named by offset) ‖ batch logs ‖ n pending uploads(u32)
//	‖ n × (partition(u32) ‖ offset(u64))
//
// A pending report is named by its upload's offset, not kept with its prep
// state (16 B × L): a restarted leader reads those uploads from the topic
// again and prepares them anew (deterministic), so the uploads topic's
// retention must exceed the leader's longest outage.
// The helper's:
//
//	magic "P3HS" ‖ version(1: 1) ‖ helper state(len32, Helper.MarshalBinary
//	without batches) ‖ batch logs
//
// batch logs = putRefs (each batch's log generation and length). Version 1
// leader files and bare helper states (their batches inside, written
// before the batch logs) are still read; their batches go to new logs at
// the next write. outcome is "collected" or why the batch was never
// revealed ("small_batch", "helper_refused"). Files are written to a
// temporary file beside the target, synced, then renamed (a crash leaves
// the previous snapshot), mode 0600: the leader's holds its prep states
// (one of two additive shares: nothing about a client without the
// helper's), never a client's plaintext.
const leaderFileMagic = "P3LS"

const helperFileMagic = "P3HS"

const (
	leaderFileVersion       byte = 2
	leaderFileVersionInline byte = 1 // batches inside the leader state
	helperFileVersion       byte = 1
)

// withoutBatches runs f with *bs swapped for an empty map.
func withoutBatches(bs *map[p3.Day]*batch, f func() ([]byte, error)) ([]byte, error) {
	saved := *bs
	*bs = map[p3.Day]*batch{}
	defer func() { *bs = saved }()
	return f()
}

// upLoc is where an upload sits in the uploads topic.
type upLoc struct {
	part int
	off  int64
}

// leaderFile is the leader service's snapshot besides the Leader: the next
// offset of each partition, the days' outcomes, the batch logs and the
// uploads whose reports were pending (queued again from the topic at a
// restart, Leader.repend).
type leaderFile struct {
	next map[int]int64
	done map[p3.Day]string
	refs map[p3.Day]batchRef
	redo map[upLoc]bool
}

// encodeLeaderFile encodes l and f; at maps pending report ids to their
// uploads: those reports are named by offset (pendingAt), the others (a
// state restored from a version 1 file) kept inline with their prep state.
func encodeLeaderFile(l *Leader, f *leaderFile, at map[p3.ReportID]upLoc) ([]byte, error) {
	var locs []upLoc
	inline := map[p3.ReportID][]*pending{}
	for id, ps := range l.pending {
		if loc, ok := at[id]; ok {
			locs = append(locs, loc)
		} else {
			inline[id] = ps
		}
	}
	for loc := range f.redo {
		// not read again yet: still pending
		locs = append(locs, loc)
	}
	slices.SortFunc(locs, func(a, b upLoc) int {
		if a.part != b.part {
			return a.part - b.part
		}
		return int(a.off - b.off)
	})
	saved := l.pending
	l.pending = inline
	st, err := withoutBatches(&l.batches, l.MarshalBinary)
	l.pending = saved
	if err != nil {
		return nil, err
	}
	w := protocol.Writer{B: make([]byte, 0, len(st)+64+12*len(f.next)+16*len(f.done)+16*len(f.refs)+12*len(locs))}
	w.Raw([]byte(leaderFileMagic))
	w.U8(leaderFileVersion)
	parts := slices.Sorted(maps.Keys(f.next))
	w.U32(uint32(len(parts)))
	for _, p := range parts {
		w.U32(uint32(p))
		putU64(&w, uint64(f.next[p]))
	}
	days := sortedDays(f.done)
	w.U32(uint32(len(days)))
	for _, d := range days {
		w.U32(uint32(d))
		w.Bytes8([]byte(f.done[d]))
	}
	w.Bytes32(st)
	putRefs(&w, f.refs)
	w.U32(uint32(len(locs)))
	for _, loc := range locs {
		w.U32(uint32(loc.part))
		putU64(&w, uint64(loc.off))
	}
	return w.B, nil
}

// decodeLeaderFile rebuilds the leader service's state from a snapshot:
// the leader (with its batches only from a version 1 file) and the rest
// (no batch logs and no pending offsets from a version 1 file). Errors
// wrap protocol.ErrMalformed or ErrConfig.
func decodeLeaderFile(cfg Config, b []byte) (*Leader, *leaderFile, error) {
	r := protocol.Reader{B: b}
	if m := r.Take(len(leaderFileMagic), "magic"); r.Err == nil && string(m) != leaderFileMagic {
		r.Err = protocol.Malformed("not a prio3 leader snapshot")
	}
	version := r.U8("version")
	if r.Err == nil && version != leaderFileVersion && version != leaderFileVersionInline {
		r.Err = protocol.Malformed("prio3 leader snapshot version %d, want %d", version, leaderFileVersion)
	}
	f := &leaderFile{next: map[int]int64{}, done: map[p3.Day]string{}, redo: map[upLoc]bool{}}
	n := r.U32("partitions")
	if r.Err == nil && int(n) > len(r.B)/12 {
		r.Err = protocol.Malformed("prio3 leader snapshot claims %d partitions", n)
	}
	for i := 0; i < int(n) && r.Err == nil; i++ {
		p := int(r.U32("partition"))
		off := int64(getU64(&r, "offset"))
		if _, dup := f.next[p]; (dup || off < 0) && r.Err == nil {
			r.Err = protocol.Malformed("prio3 leader snapshot: partition %d twice or a negative offset", p)
		}
		f.next[p] = off
	}
	k := r.U32("days")
	if r.Err == nil && int(k) > len(r.B)/5 {
		r.Err = protocol.Malformed("prio3 leader snapshot claims %d days", k)
	}
	for i := 0; i < int(k) && r.Err == nil; i++ {
		d := p3.Day(r.U32("day"))
		f.done[d] = string(r.Bytes8("outcome"))
	}
	st := r.Bytes32("leader state")
	if version == leaderFileVersion {
		f.refs = getRefs(&r)
		m := r.U32("pending uploads")
		if r.Err == nil && int(m) > len(r.B)/12 {
			r.Err = protocol.Malformed("prio3 leader snapshot claims %d pending uploads", m)
		}
		for i := 0; i < int(m) && r.Err == nil; i++ {
			loc := upLoc{part: int(r.U32("partition")), off: int64(getU64(&r, "offset"))}
			if next, ok := f.next[loc.part]; r.Err == nil && (!ok || loc.off < 0 || loc.off >= next || f.redo[loc]) {
				r.Err = protocol.Malformed("prio3 leader snapshot: pending upload at partition %d offset %d not yet read or twice", loc.part, loc.off)
			}
			f.redo[loc] = true
		}
	}
	if err := r.Done("prio3 leader snapshot"); err != nil {
		return nil, nil, err
	}
	l, err := RestoreLeader(cfg, st)
	if err != nil {
		return nil, nil, err
	}
	if f.refs != nil && len(l.batches) > 0 {
		return nil, nil, protocol.Malformed("prio3 leader snapshot: batches both inline and in logs")
	}
	return l, f, nil
}

// loadLeader restores the leader and its batch logs from dir, or starts a
// new one when there is no snapshot.
func loadLeader(dir string, cfg Config) (*Leader, *leaderFile, *batchStore, error) {
	path := filepath.Join(dir, LeaderStateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		l, err := NewLeader(cfg)
		if err != nil {
			return nil, nil, nil, err
		}
		store := newBatchStore(dir, "prio3-leader", false, l.vdaf)
		if _, err := store.load(map[p3.Day]batchRef{}); err != nil {
			return nil, nil, nil, err
		}
		return l, &leaderFile{next: map[int]int64{}, done: map[p3.Day]string{}, redo: map[upLoc]bool{}}, store, nil
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("prio3 leader: read snapshot: %w", err)
	}
	l, f, err := decodeLeaderFile(cfg, b)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("prio3 leader: snapshot %s: %w (a state directory of another campaign or measurement? give each its own --state-dir)", path, err)
	}
	store := newBatchStore(dir, "prio3-leader", false, l.vdaf)
	if f.refs != nil {
		if l.batches, err = store.load(f.refs); err != nil {
			return nil, nil, nil, fmt.Errorf("prio3 leader: %w", err)
		}
	}
	return l, f, store, nil
}

func encodeHelperFile(h *Helper, refs map[p3.Day]batchRef) ([]byte, error) {
	st, err := withoutBatches(&h.batches, h.MarshalBinary)
	if err != nil {
		return nil, err
	}
	w := protocol.Writer{B: make([]byte, 0, len(st)+16+16*len(refs))}
	w.Raw([]byte(helperFileMagic))
	w.U8(helperFileVersion)
	w.Bytes32(st)
	putRefs(&w, refs)
	return w.B, nil
}

// decodeHelperFile rebuilds the helper (without batches) and its batch
// logs from a snapshot; a bare helper state (the format before batch
// logs) comes back with its batches and nil refs. Errors wrap
// protocol.ErrMalformed or ErrConfig.
func decodeHelperFile(cfg Config, b []byte) (*Helper, map[p3.Day]batchRef, error) {
	if len(b) < len(helperFileMagic) || string(b[:len(helperFileMagic)]) != helperFileMagic {
		h, err := RestoreHelper(cfg, b)
		return h, nil, err
	}
	r := protocol.Reader{B: b[len(helperFileMagic):]}
	if v := r.U8("version"); r.Err == nil && v != helperFileVersion {
		r.Err = protocol.Malformed("prio3 helper snapshot version %d, want %d", v, helperFileVersion)
	}
	st := r.Bytes32("helper state")
	refs := getRefs(&r)
	if err := r.Done("prio3 helper snapshot"); err != nil {
		return nil, nil, err
	}
	h, err := RestoreHelper(cfg, st)
	if err != nil {
		return nil, nil, err
	}
	if len(h.batches) > 0 {
		return nil, nil, protocol.Malformed("prio3 helper snapshot: batches both inline and in logs")
	}
	return h, refs, nil
}

// loadHelper restores the helper and its batch logs from dir, or starts a
// new one.
func loadHelper(dir string, cfg Config) (*Helper, *batchStore, error) {
	path := filepath.Join(dir, HelperStateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		h, err := NewHelper(cfg)
		if err != nil {
			return nil, nil, err
		}
		store := newBatchStore(dir, "prio3-helper", true, h.vdaf)
		if _, err := store.load(map[p3.Day]batchRef{}); err != nil {
			return nil, nil, err
		}
		return h, store, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("prio3 helper: read snapshot: %w", err)
	}
	h, refs, err := decodeHelperFile(cfg, b)
	if err != nil {
		return nil, nil, fmt.Errorf("prio3 helper: snapshot %s: %w (a state directory of another campaign or measurement? give each its own --state-dir)", path, err)
	}
	store := newBatchStore(dir, "prio3-helper", true, h.vdaf)
	if refs != nil {
		if h.batches, err = store.load(refs); err != nil {
			return nil, nil, fmt.Errorf("prio3 helper: %w", err)
		}
	}
	return h, store, nil
}

// writeState replaces dir/name with b atomically (synced temporary file,
// rename, directory synced).
func writeState(dir, name string, b []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("prio3: state directory: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
		return fmt.Errorf("prio3: write snapshot (is the disk of --state-dir full?): %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
