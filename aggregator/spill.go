package aggregator

import (
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/chacha20poly1305"
)

// spill holds the bytes of an epoch's pending reports that recovery does
// not need until a group opens (the share's y, the ciphertext, and, in a
// group's first record, its tag and commitment), so the heap keeps only
// what recovery counts with: report ids, share x and a reference here
// (pending.go). put appends one record and returns its reference; get
// returns a copy of the record at ref. Records are written once and read
// any number of times; the store is dropped whole when its epoch closes.
type spill interface {
	put(b []byte) (uint64, error)
	get(ref uint64) ([]byte, error)
	close() error
	// discard closes the store and deletes what it keeps on disk (its
	// epoch closed): no snapshot needs it any more
	discard() error
}

// memSpill keeps records in 1 MiB chunks of the heap: a few allocations
// per MiB instead of one per report. It is the store of a Partition
// without SpillDir (offline tools, tests). ref = chunk<<32 | offset; a
// record is a u32 length and its bytes.
type memSpill struct {
	chunks [][]byte
}

const spillChunk = 1 << 20

func (m *memSpill) put(b []byte) (uint64, error) {
	need := 4 + len(b)
	if len(m.chunks) == 0 || len(m.chunks[len(m.chunks)-1])+need > cap(m.chunks[len(m.chunks)-1]) {
		m.chunks = append(m.chunks, make([]byte, 0, max(spillChunk, need)))
	}
	i := len(m.chunks) - 1
	c := m.chunks[i]
	ref := uint64(i)<<32 | uint64(len(c))
	c = binary.BigEndian.AppendUint32(c, uint32(len(b)))
	m.chunks[i] = append(c, b...)
	return ref, nil
}

func (m *memSpill) get(ref uint64) ([]byte, error) {
	i, off := int(ref>>32), int(ref&(1<<32-1))
	if i >= len(m.chunks) || off+4 > len(m.chunks[i]) {
		return nil, fmt.Errorf("aggregator: spill reference %#x out of range", ref)
	}
	c := m.chunks[i][off:]
	n := int(binary.BigEndian.Uint32(c))
	return append([]byte(nil), c[4:4+n]...), nil
}

func (m *memSpill) close() error   { m.chunks = nil; return nil }
func (m *memSpill) discard() error { return m.close() }

// fileSpill keeps records in files, each record sealed with
// ChaCha20-Poly1305 (RFC 8439) under its file's key with the record's
// offset as nonce: the file alone — a disk image, a backup — reveals
// nothing of the reports, and a record changed on disk fails get instead of
// entering a recovery. A record is a u32 length and the sealed bytes.
// Writes are buffered in memory up to 1 MiB and read back from the buffer
// until flushed.
//
// Without snapshots (store nil) it is one file, unlinked as soon as it is
// created, so it disappears with the process whatever way it ends (a
// SIGKILL included) and no other process can open it, under a key drawn
// when it is created and held only in this process's memory; ref = the
// record's offset.
//
// With snapshots (snapshot.go) the files are segments named by a random
// id in the partition's snapshot directory, each under a key derived from
// the aggregator's onion key and its id (snapStore.segmentAEAD), so the
// member that takes the partition over opens the segments a snapshot
// lists. Segments are written by one process only: a restored spill reads
// the listed segments (prev) and appends to a new one of its own. ref =
// segment index << refSegShift | offset.
type fileSpill struct {
	f       *os.File    // the segment written to; nil until the first put (snapshots)
	aead    cipher.AEAD // its key
	size    int64       // bytes written to f
	buf     []byte      // records after size, not yet written
	scratch []byte
	store   *snapStore // nil: one unlinked file under a random key
	dir     string     // the partition's snapshot directory (store set)
	id      [16]byte   // f's segment id (store set)
	prev    []*segment // earlier segments, read only (store set)
}

// segment is a read-only spill segment listed by a snapshot: records below
// size only.
type segment struct {
	f    *os.File
	id   [16]byte
	aead cipher.AEAD
	size int64
}

// refSegShift splits a fileSpill reference into segment index and offset
// (segments up to 256 TiB).
const refSegShift = 48

// newFileSpill creates an unlinked spill file in dir.
func newFileSpill(dir string) (*fileSpill, error) {
	f, err := os.CreateTemp(dir, "crowdlog-pending-*.spill")
	if err != nil {
		return nil, fmt.Errorf("aggregator: create a spill file in %s (set --spill-dir to a writable directory): %w", dir, err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("aggregator: unlink spill file %s: %w", filepath.Base(f.Name()), err)
	}
	var key [chacha20poly1305.KeySize]byte
	if _, err := rand.Read(key[:]); err != nil {
		f.Close()
		return nil, err
	}
	a, err := chacha20poly1305.New(key[:])
	if err != nil {
		f.Close()
		return nil, err
	}
	return &fileSpill{f: f, aead: a, buf: make([]byte, 0, spillChunk)}, nil
}

func spillNonce(off int64) []byte {
	var n [chacha20poly1305.NonceSize]byte
	binary.BigEndian.PutUint64(n[4:], uint64(off))
	return n[:]
}

func (s *fileSpill) put(b []byte) (uint64, error) {
	if s.f == nil {
		if err := s.newSegment(); err != nil {
			return 0, err
		}
	}
	off := s.size + int64(len(s.buf))
	sealed := len(b) + s.aead.Overhead()
	if len(s.buf) > 0 && len(s.buf)+4+sealed > cap(s.buf) {
		if err := s.flush(); err != nil {
			return 0, err
		}
	}
	s.buf = binary.BigEndian.AppendUint32(s.buf, uint32(sealed))
	s.buf = s.aead.Seal(s.buf, spillNonce(off), b, nil)
	return uint64(len(s.prev))<<refSegShift | uint64(off), nil
}

// newSegment starts the segment this spill writes to (snapshots).
func (s *fileSpill) newSegment() error {
	if s.store == nil {
		return errors.New("aggregator: spill file closed")
	}
	if _, err := rand.Read(s.id[:]); err != nil {
		return err
	}
	f, err := s.store.createSegment(s.dir, s.id)
	if err != nil {
		return err
	}
	s.f, s.aead, s.size = f, s.store.segmentAEAD(s.id), 0
	if s.buf == nil {
		s.buf = make([]byte, 0, spillChunk)
	}
	return nil
}

func (s *fileSpill) flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	if _, err := s.f.WriteAt(s.buf, s.size); err != nil {
		return fmt.Errorf("aggregator: write spill file (is its disk full? --spill-dir, --snapshot-dir): %w", err)
	}
	s.size += int64(len(s.buf))
	s.buf = s.buf[:0]
	return nil
}

func (s *fileSpill) get(ref uint64) ([]byte, error) {
	seg, off := int(ref>>refSegShift), int64(ref&(1<<refSegShift-1))
	f, aead, size, buf := s.f, s.aead, s.size, s.buf
	switch {
	case seg < len(s.prev):
		g := s.prev[seg]
		f, aead, size, buf = g.f, g.aead, g.size, nil
	case seg > len(s.prev) || s.f == nil:
		return nil, fmt.Errorf("aggregator: spill reference %#x out of range", ref)
	}
	var rec []byte
	if off >= size {
		i := off - size
		if i+4 > int64(len(buf)) {
			return nil, fmt.Errorf("aggregator: spill reference %#x out of range", ref)
		}
		n := int64(binary.BigEndian.Uint32(buf[i:]))
		if i+4+n > int64(len(buf)) {
			return nil, fmt.Errorf("aggregator: spill reference %#x out of range", ref)
		}
		rec = buf[i+4 : i+4+n]
	} else {
		var h [4]byte
		if _, err := f.ReadAt(h[:], off); err != nil {
			return nil, fmt.Errorf("aggregator: read spill file: %w", err)
		}
		n := int64(binary.BigEndian.Uint32(h[:]))
		if off+4+n > size {
			return nil, fmt.Errorf("aggregator: spill reference %#x: a record of %d bytes past its segment's %d", ref, n, size)
		}
		if int64(cap(s.scratch)) < n {
			s.scratch = make([]byte, n)
		}
		rec = s.scratch[:n]
		if _, err := f.ReadAt(rec, off+4); err != nil {
			return nil, fmt.Errorf("aggregator: read spill file: %w", err)
		}
	}
	pt, err := aead.Open(nil, spillNonce(off), rec, nil)
	if err != nil {
		return nil, errors.New("aggregator: a spill record does not authenticate (the spill file was changed on disk)")
	}
	return pt, nil
}

// segments flushes the spill and lists its segments with their sizes: the
// spill as a snapshot records it (store set).
func (s *fileSpill) segments() ([]segmentRef, error) {
	var out []segmentRef
	for _, g := range s.prev {
		out = append(out, segmentRef{id: g.id, size: g.size})
	}
	if s.f != nil {
		if err := s.flush(); err != nil {
			return nil, err
		}
		out = append(out, segmentRef{id: s.id, size: s.size})
	}
	return out, nil
}

func (s *fileSpill) discard() error {
	var names []string
	if s.store != nil {
		for _, g := range s.prev {
			names = append(names, filepath.Join(s.dir, segName(g.id)))
		}
		if s.f != nil {
			names = append(names, filepath.Join(s.dir, segName(s.id)))
		}
	}
	err := s.close()
	for _, n := range names {
		if rerr := os.Remove(n); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
			err = rerr
		}
	}
	return err
}

func (s *fileSpill) close() error {
	var first error
	for _, g := range s.prev {
		if err := g.f.Close(); err != nil && first == nil {
			first = err
		}
		s.store.release(g.id)
	}
	s.prev = nil
	if s.f != nil {
		if err := s.f.Close(); err != nil && first == nil {
			first = err
		}
		if s.store != nil {
			s.store.release(s.id)
		}
		s.f = nil
	}
	s.buf, s.store = nil, nil
	return first
}
