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

func Malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}

// Writer appends length-prefixed fields to a byte slice.
type Writer struct{ B []byte }

func (w *Writer) U8(v byte)       { w.B = append(w.B, v) }
func (w *Writer) U16(v uint16)    { w.B = binary.BigEndian.AppendUint16(w.B, v) }
func (w *Writer) U32(v uint32)    { w.B = binary.BigEndian.AppendUint32(w.B, v) }
func (w *Writer) Raw(p []byte)    { w.B = append(w.B, p...) }
func (w *Writer) Bytes8(p []byte) { w.U8(byte(len(p))); w.Raw(p) }
func (w *Writer) Bytes16(p []byte) {
	w.U16(uint16(len(p)))
	w.Raw(p)
}
func (w *Writer) Bytes32(p []byte) {
	w.U32(uint32(len(p)))
	w.Raw(p)
}

// Reader consumes fields; the first failure sticks in err.
type Reader struct {
	B   []byte
	Err error
}

func (r *Reader) Fail(what string) {
	if r.Err == nil {
		r.Err = Malformed("truncated %s", what)
	}
}

func (r *Reader) Take(n int, what string) []byte {
	if r.Err != nil {
		return nil
	}
	if n < 0 || n > len(r.B) {
		r.Fail(what)
		return nil
	}
	p := r.B[:n:n]
	r.B = r.B[n:]
	return p
}

func (r *Reader) U8(what string) byte {
	p := r.Take(1, what)
	if p == nil {
		return 0
	}
	return p[0]
}

func (r *Reader) U16(what string) uint16 {
	p := r.Take(2, what)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint16(p)
}

func (r *Reader) U32(what string) uint32 {
	p := r.Take(4, what)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

func (r *Reader) Bytes8(what string) []byte  { return r.Take(int(r.U8(what)), what) }
func (r *Reader) Bytes16(what string) []byte { return r.Take(int(r.U16(what)), what) }
func (r *Reader) Bytes32(what string) []byte { return r.Take(int(r.U32(what)), what) }

// Done reports the sticky error, or a malformed error when bytes remain.
func (r *Reader) Done(what string) error {
	if r.Err != nil {
		return r.Err
	}
	if len(r.B) != 0 {
		return Malformed("%d trailing bytes after %s", len(r.B), what)
	}
	return nil
}

func (r *Reader) ReadVersion(what string) {
	v := r.U8(what + " version")
	if r.Err == nil && v != Version {
		r.Err = Malformed("%s version %d, want %d (upgrade the sender or this service)", what, v, Version)
	}
}
