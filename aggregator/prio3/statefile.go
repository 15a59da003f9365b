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

// The services' snapshot files. The helper's is the Helper's encoded state
// (Helper.MarshalBinary). The leader's, big-endian:
//
//	magic "P3LS" ‖ version(1) ‖ n partitions(u32) ‖ n × (partition(u32) ‖
//	next offset(u64)) ‖ n days(u32) ‖ n × (day(u32) ‖ outcome(len8)) ‖
//	leader state(len32, Leader.MarshalBinary)
//
// outcome is "collected" or why the batch was never revealed
// ("small_batch", "helper_refused"). Files are written to a temporary file
// beside the target, synced, then renamed (a crash leaves the previous
// snapshot), mode 0600: the leader's holds its prep states and its input
// shares' aggregates (one of two additive shares: nothing about a client
// without the helper's), never a client's plaintext.
const leaderFileMagic = "P3LS"

const leaderFileVersion byte = 1

func encodeLeaderFile(l *Leader, next map[int]int64, done map[p3.Day]string) ([]byte, error) {
	st, err := l.MarshalBinary()
	if err != nil {
		return nil, err
	}
	w := protocol.Writer{B: make([]byte, 0, len(st)+64+12*len(next)+16*len(done))}
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
	return w.B, nil
}

// decodeLeaderFile rebuilds the leader service's state from a snapshot.
// Errors wrap protocol.ErrMalformed or ErrConfig.
func decodeLeaderFile(cfg Config, b []byte) (*Leader, map[int]int64, map[p3.Day]string, error) {
	r := protocol.Reader{B: b}
	if m := r.Take(len(leaderFileMagic), "magic"); r.Err == nil && string(m) != leaderFileMagic {
		r.Err = protocol.Malformed("not a prio3 leader snapshot")
	}
	if v := r.U8("version"); r.Err == nil && v != leaderFileVersion {
		r.Err = protocol.Malformed("prio3 leader snapshot version %d, want %d", v, leaderFileVersion)
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
	if err := r.Done("prio3 leader snapshot"); err != nil {
		return nil, nil, nil, err
	}
	l, err := RestoreLeader(cfg, st)
	if err != nil {
		return nil, nil, nil, err
	}
	return l, next, done, nil
}

// loadLeader restores the leader from dir's snapshot, or starts a new one
// when there is none.
func loadLeader(dir string, cfg Config) (*Leader, map[int]int64, map[p3.Day]string, error) {
	path := filepath.Join(dir, LeaderStateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		l, err := NewLeader(cfg)
		if err != nil {
			return nil, nil, nil, err
		}
		return l, map[int]int64{}, map[p3.Day]string{}, nil
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("prio3 leader: read snapshot: %w", err)
	}
	l, next, done, err := decodeLeaderFile(cfg, b)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("prio3 leader: snapshot %s: %w (a state directory of another campaign or measurement? give each its own --state-dir)", path, err)
	}
	return l, next, done, nil
}

// loadHelper restores the helper from dir's snapshot, or starts a new one.
func loadHelper(dir string, cfg Config) (*Helper, error) {
	path := filepath.Join(dir, HelperStateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return NewHelper(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("prio3 helper: read snapshot: %w", err)
	}
	h, err := RestoreHelper(cfg, b)
	if err != nil {
		return nil, fmt.Errorf("prio3 helper: snapshot %s: %w (a state directory of another campaign or measurement? give each its own --state-dir)", path, err)
	}
	return h, nil
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
