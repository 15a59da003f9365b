package prio3

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// Batch logs: each aggregator service keeps every batch in an append-only
// file of its own, StateDir/<role>-batch-<day>-<generation>.log, instead of
// rewriting its whole state per step or answer. A record is
//
//	length(u32: of the payload) ‖ CRC-32C(u32: of the payload) ‖ payload
//	payload = 'A' ‖ count(u64) ‖ checksum(32) ‖ aggregate(len32: L × 16 B) ‖
//	          ids (the reports committed since the previous record: n(u32) ‖
//	          n × (id(16) [helper: ‖ digest(16)]))
//	        | 'F' ‖ the whole batch (putBatch, state version 4)
//
// A file starts with an 'F' record; each step or answer that commits
// reports appends one 'A' record (the running aggregate, count and
// checksum, and the new ids: DigestSize + 16 bytes per report at the
// helper, 16 at the leader, plus L × 16 B per record) and syncs the file;
// a change of the batch's noise draw or collected flag, or a file grown to
// twice its batch's size plus CompactBytes, starts the next generation
// with one 'F' record (the collected batch's, without ids, is about
// L × 16 B). The service's small snapshot names, per batch, the generation
// and the length of the file that belongs to it; a restore reads exactly
// that prefix and cuts the rest (written after the snapshot: the
// snapshot is the truth, as before), and removes the files no snapshot
// names. Since the snapshot is written after the batch logs and before
// the helper answers (or the leader sends), what either aggregator told
// the other is on disk.

// CompactBytes is the slack a batch log may grow beyond twice its
// batch's encoded size before it is rewritten.
const CompactBytes = 4 << 20

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// batchRef is the snapshot's entry of a batch: its log's generation and
// the length that belongs to the snapshot.
type batchRef struct {
	gen  uint32
	size int64
}

// batchStore is a service's batch logs.
type batchStore struct {
	dir    string
	prefix string // "prio3-leader" or "prio3-helper"
	helper bool
	vdaf   *p3.VDAF
	refs   map[p3.Day]batchRef
	// full: per day, the size of the batch's last 'F' record, for the
	// compaction rule
	full map[p3.Day]int64
	// stale: files to remove once the snapshot no longer names them
	stale []string
	// Written counts the bytes appended to batch logs (benchmarks).
	Written int64
}

func newBatchStore(dir, prefix string, helper bool, v *p3.VDAF) *batchStore {
	return &batchStore{dir: dir, prefix: prefix, helper: helper, vdaf: v, refs: map[p3.Day]batchRef{}, full: map[p3.Day]int64{}}
}

func (s *batchStore) path(day p3.Day, gen uint32) string {
	return filepath.Join(s.dir, fmt.Sprintf("%s-batch-%d-%d.log", s.prefix, uint32(day), gen))
}

func frame(payload []byte) []byte {
	out := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint32(out, uint32(len(payload)))
	binary.BigEndian.PutUint32(out[4:], crc32.Checksum(payload, crcTable))
	return append(out, payload...)
}

// dirty reports whether b has a change its log lacks, and whether that
// change needs a full record.
func (s *batchStore) dirty(day p3.Day, b *batch) (any, full bool) {
	_, logged := s.refs[day]
	full = !logged || (b.noise != nil && !b.noiseLogged) || (b.collected && !b.collectedLogged)
	return full || len(b.fresh) > 0, full
}

// flush appends to each batch's log what it lacks and syncs it; it returns
// whether a file was created (the directory then needs a sync, which
// writeState does). The refs it updates go to disk with the next
// snapshot.
func (s *batchStore) flush(bs map[p3.Day]*batch) error {
	for day, b := range bs {
		any, full := s.dirty(day, b)
		if !any {
			continue
		}
		ref, logged := s.refs[day]
		var payload []byte
		if !full && ref.size > 2*s.full[day]+CompactBytes {
			full = true
		}
		if full {
			w := protocol.Writer{}
			w.U8('F')
			putBatch(&w, b, s.helper)
			payload = w.B
		} else {
			w := protocol.Writer{B: make([]byte, 0, 64+16*len(b.fresh)*2+s.vdaf.Config.Length*16)}
			w.U8('A')
			putU64(&w, b.count)
			w.Raw(b.checksum[:])
			w.Bytes32(p3.EncodeAggregate(&b.agg))
			putIDs(&w, b, b.fresh, s.helper)
			payload = w.B
		}
		rec := frame(payload)
		if full {
			gen := uint32(1)
			if logged {
				gen = ref.gen + 1
				s.stale = append(s.stale, s.path(day, ref.gen))
			}
			if err := writeNew(s.path(day, gen), rec); err != nil {
				return err
			}
			s.refs[day] = batchRef{gen: gen, size: int64(len(rec))}
			s.full[day] = int64(len(rec))
		} else {
			if err := appendSync(s.path(day, ref.gen), ref.size, rec); err != nil {
				return err
			}
			s.refs[day] = batchRef{gen: ref.gen, size: ref.size + int64(len(rec))}
		}
		s.Written += int64(len(rec))
		b.fresh = b.fresh[:0:0]
		b.noiseLogged = b.noise != nil
		b.collectedLogged = b.collected
	}
	return nil
}

// drop forgets day's log (removed after the next snapshot).
func (s *batchStore) drop(day p3.Day) {
	if ref, ok := s.refs[day]; ok {
		s.stale = append(s.stale, s.path(day, ref.gen))
		delete(s.refs, day)
		delete(s.full, day)
	}
}

// cleanup removes the files the snapshot just written no longer names.
func (s *batchStore) cleanup() {
	for _, p := range s.stale {
		os.Remove(p)
	}
	s.stale = nil
}

// writeNew creates path with rec, synced (mode 0600: a batch log holds an
// aggregate share, never a client's plaintext).
func writeNew(path string, rec []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("prio3: batch log: %w (is --state-dir writable?)", err)
	}
	if _, err := f.Write(rec); err != nil {
		f.Close()
		return fmt.Errorf("prio3: batch log %s: %w (is the disk of --state-dir full?)", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("prio3: batch log %s: sync: %w", path, err)
	}
	return f.Close()
}

// appendSync writes rec at offset at of path and syncs it.
func appendSync(path string, at int64, rec []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("prio3: batch log: %w", err)
	}
	if _, err := f.WriteAt(rec, at); err != nil {
		f.Close()
		return fmt.Errorf("prio3: batch log %s: %w (is the disk of --state-dir full?)", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("prio3: batch log %s: sync: %w", path, err)
	}
	return f.Close()
}

// load reads every batch refs names (its log's prefix, the rest cut off),
// removes the logs the refs do not name and returns the batches. Errors
// wrap protocol.ErrMalformed (a damaged log) or the file system's.
func (s *batchStore) load(refs map[p3.Day]batchRef) (map[p3.Day]*batch, error) {
	bs := map[p3.Day]*batch{}
	for day, ref := range refs {
		path := s.path(day, ref.gen)
		f, err := os.OpenFile(path, os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("prio3: batch log of %s: %w (the snapshot names a log that is gone: restore the state directory whole)", day, err)
		}
		buf := make([]byte, ref.size)
		_, err = io.ReadFull(f, buf)
		if err == nil {
			err = f.Truncate(ref.size)
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("prio3: batch log %s: %w", path, err)
		}
		b, full, err := s.replay(buf)
		if err != nil {
			return nil, fmt.Errorf("prio3: batch log %s: %w", path, err)
		}
		b.noiseLogged, b.collectedLogged = b.noise != nil, b.collected
		bs[day] = b
		s.full[day] = full
	}
	s.refs = refs
	entries, _ := os.ReadDir(s.dir)
	for _, e := range entries {
		day, gen, ok := s.parseName(e.Name())
		if ok {
			if ref, named := refs[day]; !named || ref.gen != gen {
				os.Remove(filepath.Join(s.dir, e.Name()))
			}
		}
	}
	return bs, nil
}

func (s *batchStore) parseName(name string) (p3.Day, uint32, bool) {
	rest, ok := strings.CutPrefix(name, s.prefix+"-batch-")
	if !ok {
		return 0, 0, false
	}
	rest, ok = strings.CutSuffix(rest, ".log")
	if !ok {
		return 0, 0, false
	}
	d, g, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, false
	}
	day, err1 := strconv.ParseUint(d, 10, 32)
	gen, err2 := strconv.ParseUint(g, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return p3.Day(day), uint32(gen), true
}

// replay rebuilds a batch from its log's records; it returns the batch and
// the size of its last 'F' record.
func (s *batchStore) replay(buf []byte) (*batch, int64, error) {
	var b *batch
	var full int64
	for len(buf) > 0 {
		if len(buf) < 8 {
			return nil, 0, protocol.Malformed("prio3 batch log: a torn record header")
		}
		n := int(binary.BigEndian.Uint32(buf))
		if n > len(buf)-8 {
			return nil, 0, protocol.Malformed("prio3 batch log: a record of %d bytes in %d", n, len(buf)-8)
		}
		payload := buf[8 : 8+n]
		if crc32.Checksum(payload, crcTable) != binary.BigEndian.Uint32(buf[4:]) {
			return nil, 0, protocol.Malformed("prio3 batch log: a record fails its checksum")
		}
		r := protocol.Reader{B: payload}
		switch kind := r.U8("record kind"); {
		case r.Err != nil:
		case kind == 'F':
			b = getBatch(&r, s.vdaf, s.helper, stateVersion)
			full = int64(8 + n)
		case kind == 'A' && b != nil && !b.collected:
			b.count = getU64(&r, "count")
			copy(b.checksum[:], r.Take(32, "checksum"))
			if agg := r.Bytes32("aggregate"); r.Err == nil {
				b.agg, r.Err = s.vdaf.DecodeAggregate(agg)
			}
			getIDs(&r, b, s.helper, stateVersion)
		default:
			r.Err = protocol.Malformed("prio3 batch log: record kind %q out of place", kind)
		}
		if err := r.Done("prio3 batch log record"); err != nil {
			return nil, 0, err
		}
		buf = buf[8+n:]
	}
	if b == nil {
		return nil, 0, protocol.Malformed("prio3 batch log: empty")
	}
	if b.ids != nil && !sameIDs(b) {
		return nil, 0, protocol.Malformed("prio3 batch log: count or checksum does not match the ids")
	}
	return b, full, nil
}

// putRefs encodes refs: n(u32) ‖ n × (day(u32) ‖ generation(u32) ‖ length(u64)).
func putRefs(w *protocol.Writer, refs map[p3.Day]batchRef) {
	days := sortedDays(refs)
	w.U32(uint32(len(days)))
	for _, d := range days {
		w.U32(uint32(d))
		w.U32(refs[d].gen)
		putU64(w, uint64(refs[d].size))
	}
}

func getRefs(r *protocol.Reader) map[p3.Day]batchRef {
	refs := map[p3.Day]batchRef{}
	n := r.U32("batch logs")
	if r.Err == nil && int(n) > len(r.B)/16 {
		r.Err = protocol.Malformed("prio3 snapshot claims %d batch logs", n)
	}
	for i := 0; i < int(n) && r.Err == nil; i++ {
		d := p3.Day(r.U32("day"))
		ref := batchRef{gen: r.U32("generation"), size: int64(getU64(r, "log length"))}
		if _, dup := refs[d]; (dup || ref.size <= 0 || ref.size > 1<<40) && r.Err == nil {
			r.Err = protocol.Malformed("prio3 snapshot: batch log of %s twice or of length %d", d, ref.size)
		}
		refs[d] = ref
	}
	return refs
}

// errNoSnapshot: loadSnapshot found no file.
var errNoSnapshot = errors.New("no snapshot")
