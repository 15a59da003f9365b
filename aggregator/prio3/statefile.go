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
//	leader state(len32, Leader.MarshalBinary without batches) ‖ batch logs
//
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

func encodeLeaderFile(l *Leader, next map[int]int64, done map[p3.Day]string, refs map[p3.Day]batchRef) ([]byte, error) {
	st, err := withoutBatches(&l.batches, l.MarshalBinary)
	if err != nil {
		return nil, err
	}
	w := protocol.Writer{B: make([]byte, 0, len(st)+64+12*len(next)+16*len(done)+16*len(refs))}
	w.Raw([]byte(leaderFileMagic))
	w.U8(leaderFileVersion)
	parts := slices.Sorted(maps.Keys(next))
	w.U32(uint32(len(parts)))
	for _, p := range parts {
		w.U32(uint32(p))
		putU64(&w, uint64(next[p]))
	}
	days := sortedDays(done)
	w.U32(uint32(len(days)))
	for _, d := range days {
		w.U32(uint32(d))
		w.Bytes8([]byte(done[d]))
	}
	w.Bytes32(st)
	putRefs(&w, refs)
	return w.B, nil
}

// decodeLeaderFile rebuilds the leader service's state from a snapshot:
// the leader (with its batches only from a version 1 file), the offsets,
// the outcomes and the batch logs (nil from a version 1 file). Errors wrap
// protocol.ErrMalformed or ErrConfig.
func decodeLeaderFile(cfg Config, b []byte) (*Leader, map[int]int64, map[p3.Day]string, map[p3.Day]batchRef, error) {
	r := protocol.Reader{B: b}
	if m := r.Take(len(leaderFileMagic), "magic"); r.Err == nil && string(m) != leaderFileMagic {
		r.Err = protocol.Malformed("not a prio3 leader snapshot")
	}
	version := r.U8("version")
	if r.Err == nil && version != leaderFileVersion && version != leaderFileVersionInline {
		r.Err = protocol.Malformed("prio3 leader snapshot version %d, want %d", version, leaderFileVersion)
	}
	next := map[int]int64{}
	n := r.U32("partitions")
	if r.Err == nil && int(n) > len(r.B)/12 {
		r.Err = protocol.Malformed("prio3 leader snapshot claims %d partitions", n)
	}
	for i := 0; i < int(n) && r.Err == nil; i++ {
		p := int(r.U32("partition"))
		off := int64(getU64(&r, "offset"))
		if _, dup := next[p]; (dup || off < 0) && r.Err == nil {
			r.Err = protocol.Malformed("prio3 leader snapshot: partition %d twice or a negative offset", p)
		}
		next[p] = off
	}
	done := map[p3.Day]string{}
	k := r.U32("days")
	if r.Err == nil && int(k) > len(r.B)/5 {
		r.Err = protocol.Malformed("prio3 leader snapshot claims %d days", k)
	}
	for i := 0; i < int(k) && r.Err == nil; i++ {
		d := p3.Day(r.U32("day"))
		done[d] = string(r.Bytes8("outcome"))
	}
	st := r.Bytes32("leader state")
	var refs map[p3.Day]batchRef
	if version == leaderFileVersion {
		refs = getRefs(&r)
	}
	if err := r.Done("prio3 leader snapshot"); err != nil {
		return nil, nil, nil, nil, err
	}
	l, err := RestoreLeader(cfg, st)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if refs != nil && len(l.batches) > 0 {
		return nil, nil, nil, nil, protocol.Malformed("prio3 leader snapshot: batches both inline and in logs")
	}
	return l, next, done, refs, nil
}

// loadLeader restores the leader and its batch logs from dir, or starts a
// new one when there is no snapshot.
func loadLeader(dir string, cfg Config) (*Leader, map[int]int64, map[p3.Day]string, *batchStore, error) {
	path := filepath.Join(dir, LeaderStateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		l, err := NewLeader(cfg)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		store := newBatchStore(dir, "prio3-leader", false, l.vdaf)
		if _, err := store.load(map[p3.Day]batchRef{}); err != nil {
			return nil, nil, nil, nil, err
		}
		return l, map[int]int64{}, map[p3.Day]string{}, store, nil
	}
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("prio3 leader: read snapshot: %w", err)
	}
	l, next, done, refs, err := decodeLeaderFile(cfg, b)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("prio3 leader: snapshot %s: %w (a state directory of another campaign or measurement? give each its own --state-dir)", path, err)
	}
	store := newBatchStore(dir, "prio3-leader", false, l.vdaf)
	if refs != nil {
		if l.batches, err = store.load(refs); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("prio3 leader: %w", err)
		}
	}
	return l, next, done, store, nil
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
