package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every decoding error: the bytes are truncated,
// oversized, of an unknown version or otherwise not a valid message. Services
// count and drop such messages.
var ErrMalformed = errors.New("protocol: malformed message")

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}

// writer appends length-prefixed fields to a byte slice.
type writer struct{ B []byte }

func (w *writer) u8(v byte)       { w.B = append(w.B, v) }
func (w *writer) u16(v uint16)    { w.B = binary.BigEndian.AppendUint16(w.B, v) }
func (w *writer) u32(v uint32)    { w.B = binary.BigEndian.AppendUint32(w.B, v) }
func (w *writer) raw(p []byte)    { w.B = append(w.B, p...) }
func (w *writer) bytes8(p []byte) { w.u8(byte(len(p))); w.raw(p) }
func (w *writer) bytes16(p []byte) {
	w.u16(uint16(len(p)))
	w.raw(p)
}
func (w *writer) bytes32(p []byte) {
	w.u32(uint32(len(p)))
	w.raw(p)
}

// reader consumes fields; the first failure sticks in err.
type reader struct {
	B   []byte
	Err error
}

func (r *reader) fail(what string) {
	if r.Err == nil {
		r.Err = malformed("truncated %s", what)
	}
}

func (r *reader) take(n int, what string) []byte {
	if r.Err != nil {
		return nil
	}
	if n < 0 || n > len(r.B) {
		r.fail(what)
		return nil
	}
	p := r.B[:n:n]
	r.B = r.B[n:]
	return p
}

func (r *reader) u8(what string) byte {
	p := r.take(1, what)
	if p == nil {
		return 0
	}
	return p[0]
}

func (r *reader) u16(what string) uint16 {
	p := r.take(2, what)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint16(p)
}

func (r *reader) u32(what string) uint32 {
	p := r.take(4, what)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

func (r *reader) bytes8(what string) []byte  { return r.take(int(r.u8(what)), what) }
func (r *reader) bytes16(what string) []byte { return r.take(int(r.u16(what)), what) }
func (r *reader) bytes32(what string) []byte { return r.take(int(r.u32(what)), what) }

// done reports the sticky error, or a malformed error when bytes remain.
func (r *reader) done(what string) error {
	if r.Err != nil {
		return r.Err
	}
	if len(r.B) != 0 {
		return malformed("%d trailing bytes after %s", len(r.B), what)
	}
	return nil
}

func (r *reader) version(what string) {
	v := r.u8(what + " version")
	if r.Err == nil && v != Version {
		r.Err = malformed("%s version %d, want %d (upgrade the sender or this service)", what, v, Version)
	}
}
