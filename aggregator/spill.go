package aggregator

import (
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
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

func (m *memSpill) close() error { m.chunks = nil; return nil }

// fileSpill keeps records in a file of its own in a directory, unlinked
// as soon as it is created, so it disappears with the process whatever
// way it ends (a SIGKILL included) and no other process can open it. Each
// record is sealed with ChaCha20-Poly1305 (RFC 8439) under a key drawn
// when the file is created and held only in this process's memory, with
// the record's offset as nonce: the file alone — a disk image, a backup
// — reveals nothing of the reports, and a record changed on disk fails
// get instead of entering a recovery. ref = the record's offset; a record
// is a u32 length and the sealed bytes. Writes are buffered in memory up
// to 1 MiB and read back from the buffer until flushed.
type fileSpill struct {
	f       *os.File
	aead    cipher.AEAD
	size    int64  // bytes written to f
	buf     []byte // records after size, not yet written
	scratch []byte
}

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

func (s *fileSpill) nonce(off int64) []byte {
	var n [chacha20poly1305.NonceSize]byte
	binary.BigEndian.PutUint64(n[4:], uint64(off))
	return n[:]
}

func (s *fileSpill) put(b []byte) (uint64, error) {
	off := s.size + int64(len(s.buf))
	sealed := len(b) + s.aead.Overhead()
	if len(s.buf) > 0 && len(s.buf)+4+sealed > cap(s.buf) {
		if err := s.flush(); err != nil {
			return 0, err
		}
	}
	s.buf = binary.BigEndian.AppendUint32(s.buf, uint32(sealed))
	s.buf = s.aead.Seal(s.buf, s.nonce(off), b, nil)
	return uint64(off), nil
}

func (s *fileSpill) flush() error {
	if _, err := s.f.WriteAt(s.buf, s.size); err != nil {
		return fmt.Errorf("aggregator: write spill file (is its disk full? --spill-dir): %w", err)
	}
	s.size += int64(len(s.buf))
	s.buf = s.buf[:0]
	return nil
}

func (s *fileSpill) get(ref uint64) ([]byte, error) {
	off := int64(ref)
	var rec []byte
	if off >= s.size {
		i := off - s.size
		if i+4 > int64(len(s.buf)) {
			return nil, fmt.Errorf("aggregator: spill reference %d out of range", ref)
		}
		n := int64(binary.BigEndian.Uint32(s.buf[i:]))
		rec = s.buf[i+4 : i+4+n]
	} else {
		var h [4]byte
		if _, err := s.f.ReadAt(h[:], off); err != nil {
			return nil, fmt.Errorf("aggregator: read spill file: %w", err)
		}
		n := int(binary.BigEndian.Uint32(h[:]))
		if cap(s.scratch) < n {
			s.scratch = make([]byte, n)
		}
		rec = s.scratch[:n]
		if _, err := s.f.ReadAt(rec, off+4); err != nil {
			return nil, fmt.Errorf("aggregator: read spill file: %w", err)
		}
	}
	pt, err := s.aead.Open(nil, s.nonce(off), rec, nil)
	if err != nil {
		return nil, errors.New("aggregator: a spill record does not authenticate (the spill file was changed on disk)")
	}
	return pt, nil
}

func (s *fileSpill) close() error { s.buf = nil; return s.f.Close() }
