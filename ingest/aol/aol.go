// Package aol reads the AOL 2006 search log in its TSV layout
// (header `AnonID Query QueryTime ItemRank ClickURL`,
// optionally gzipped) as a stream of records.
//
// Reading is tolerant: a malformed line is counted in Stats, remembered (line
// number and reason, never its content) among the first MaxExamples bad
// lines, and skipped. Only I/O and decompression errors stop a Reader.
//
// Header handling: when line 1 is the AOL header (fields compared
// case-insensitively, a UTF-8 byte-order mark and a trailing CR ignored) it
// is skipped and Stats.Header is true. Otherwise line 1 is treated as data,
// because some AOL files (e.g. per-user splits) have no header; if it is not
// valid data it is simply counted as a bad line.
package aol

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// TimeLayout is the layout of the QueryTime field (Go reference time),
// e.g. "2006-03-01 07:33:28". The log does not state a zone; times are parsed
// as UTC and should be treated as the log's nominal local time.
const TimeLayout = "2006-01-02 15:04:05"

// MaxLineBytes is the longest line accepted, excluding its line terminator
// ("\n" or "\r\n"): 1 MiB. Longer lines are counted as bad and skipped
// without being held in memory.
const MaxLineBytes = 1 << 20

// MaxExamples is how many bad lines Stats.Examples keeps (the first ones).
const MaxExamples = 20

// Header lists the AOL TSV column names in file order.
var Header = []string{"AnonID", "Query", "QueryTime", "ItemRank", "ClickURL"}

// Bad-line reasons reported in BadLine.Reason. They never contain line content.
const (
	ReasonFieldCount = "wrong field count (want 5 tab-separated fields, or 3 without click columns)"
	ReasonTime       = "bad QueryTime (want " + TimeLayout + ")"
	ReasonAnonID     = "empty AnonID"
	ReasonItemRank   = "bad ItemRank (want empty or a positive decimal integer)"
	ReasonTooLong    = "line longer than 1 MiB"
)

// Record is one row of the log.
type Record struct {
	// Line is the 1-based line number in the (decompressed) input.
	Line int
	// AnonID is the anonymous user id, as written (AOL ids are decimal), with
	// surrounding white space removed; never empty.
	AnonID string
	// Query is the raw query text, not normalized; may be empty or "-".
	Query string
	// QueryTime is the time of the query (second resolution, UTC nominal).
	QueryTime time.Time
	// ItemRank is the clicked result's rank (1-based); 0 when the field is
	// empty or absent.
	ItemRank int
	// ClickURL is the clicked result's URL; empty when there was no click or
	// the field is absent.
	ClickURL string
}

// BadLine identifies one skipped line.
type BadLine struct {
	// Line is the 1-based line number.
	Line int
	// Reason is one of the Reason* constants.
	Reason string
}

// Stats summarizes what a Reader has consumed so far.
// Invariant: Lines == Records + Bad + (1 if Header else 0).
type Stats struct {
	// Lines is the number of lines read, including a header line. A final
	// line without a terminating newline counts; an empty input has 0 lines.
	Lines int
	// Records is the number of records returned by Next.
	Records int
	// Bad is the number of skipped malformed lines.
	Bad int
	// Header reports whether line 1 was the AOL header (and so skipped).
	Header bool
	// Examples holds the first MaxExamples bad lines, in input order.
	Examples []BadLine
}

// String summarizes s in one line, e.g.
// "407930 lines, 407929 records, 0 bad, header: yes" or, with bad lines,
// "... 3 bad, header: no; first bad lines: 1 (empty AnonID), 7 (...)".
func (s Stats) String() string {
	var b strings.Builder
	hdr := "no"
	if s.Header {
		hdr = "yes"
	}
	fmt.Fprintf(&b, "%d lines, %d records, %d bad, header: %s", s.Lines, s.Records, s.Bad, hdr)
	for i, e := range s.Examples {
		if i == 0 {
			b.WriteString("; first bad lines: ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d (%s)", e.Line, e.Reason)
	}
	if s.Bad > len(s.Examples) && len(s.Examples) > 0 {
		fmt.Fprintf(&b, " and %d more", s.Bad-len(s.Examples))
	}
	return b.String()
}

// Reader streams Records from an AOL TSV log. It is not safe for concurrent
// use.
type Reader struct {
	br     *bufio.Reader
	gz     *gzip.Reader // non-nil when the input is gzip-compressed
	file   *os.File     // non-nil when opened by Open
	stats  Stats
	err    error // sticky I/O error or io.EOF
	closed bool
}

// Open opens the log at path, plain or gzip-compressed. Compression is
// detected from the gzip magic bytes (1f 8b), not from the file name.
// Errors: the file cannot be opened, or it starts like gzip but has an
// invalid gzip header. The caller must Close the Reader.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("aol: open log: %w (check the --input path)", err)
	}
	r, err := NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("aol: %s: %w", path, err)
	}
	r.file = f
	return r, nil
}

// NewReader reads a log from r, plain or gzip-compressed (detected from the
// magic bytes). Errors: reading the first bytes fails, or the gzip header is
// invalid. Close releases the decompressor but does not close r.
func NewReader(r io.Reader) (*Reader, error) {
	src := bufio.NewReaderSize(r, MaxLineBytes+2)
	magic, err := src.Peek(2)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("aol: read log start: %w", err)
	}
	rd := &Reader{}
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(src)
		if err != nil {
			return nil, fmt.Errorf("aol: input looks gzip-compressed but its header is invalid: %w (is the file truncated?)", err)
		}
		rd.gz = gz
		rd.br = bufio.NewReaderSize(gz, MaxLineBytes+2)
	} else {
		rd.br = src
	}
	return rd, nil
}

// Close releases the Reader and, when it came from Open, closes the file.
// Calling Close twice is harmless.
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	var errs []error
	if r.gz != nil {
		errs = append(errs, r.gz.Close())
	}
	if r.file != nil {
		errs = append(errs, r.file.Close())
	}
	return errors.Join(errs...)
}

// Stats returns the counts so far. Examples is a copy.
func (r *Reader) Stats() Stats {
	s := r.stats
	s.Examples = append([]BadLine(nil), r.stats.Examples...)
	return s
}

// Next returns the next well-formed record. It returns io.EOF after the last
// one. Malformed lines are skipped and counted (see Stats), never returned as
// errors; any other error is an I/O or decompression error (e.g. a truncated
// gzip stream), and Next keeps returning it.
func (r *Reader) Next() (Record, error) {
	for {
		if r.err != nil {
			return Record{}, r.err
		}
		if r.closed {
			return Record{}, errors.New("aol: Next called after Close")
		}
		line, tooLong, err := r.readLine()
		if err != nil {
			r.err = err
			if !errors.Is(err, io.EOF) {
				r.err = fmt.Errorf("aol: reading line %d: %w", r.stats.Lines+1, err)
			}
			continue
		}
		r.stats.Lines++
		n := r.stats.Lines
		if tooLong {
			r.bad(n, ReasonTooLong)
			continue
		}
		if n == 1 {
			line = bytes.TrimPrefix(line, []byte("\ufeff"))
			if isHeader(line) {
				r.stats.Header = true
				continue
			}
		}
		rec, reason := parse(line)
		if reason != "" {
			r.bad(n, reason)
			continue
		}
		rec.Line = n
		r.stats.Records++
		return rec, nil
	}
}

func (r *Reader) bad(line int, reason string) {
	r.stats.Bad++
	if len(r.stats.Examples) < MaxExamples {
		r.stats.Examples = append(r.stats.Examples, BadLine{Line: line, Reason: reason})
	}
}

// readLine returns the next line without its terminator. The slice is valid
// until the next call. tooLong reports a line over MaxLineBytes, whose bytes
// have been discarded. err is io.EOF only when no bytes remain.
func (r *Reader) readLine() (line []byte, tooLong bool, err error) {
	line, err = r.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// Discard the rest of this line.
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = r.br.ReadSlice('\n')
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, false, err
		}
		return nil, true, nil
	}
	if err != nil {
		if !errors.Is(err, io.EOF) {
			return nil, false, err
		}
		if len(line) == 0 {
			return nil, false, io.EOF
		}
		// Final line without newline: the next call reports io.EOF.
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) > MaxLineBytes {
		return nil, true, nil
	}
	return line, false, nil
}

func isHeader(line []byte) bool {
	fields := bytes.Split(line, []byte("\t"))
	if len(fields) != len(Header) {
		return false
	}
	for i, f := range fields {
		if !strings.EqualFold(strings.TrimSpace(string(f)), Header[i]) {
			return false
		}
	}
	return true
}

// parse turns one line (without terminator) into a Record, or returns the
// reason it is malformed. Accepted: 5 fields, or 3 fields (AnonID, Query,
// QueryTime) as in AOL rows without a click whose trailing tabs were lost.
func parse(line []byte) (Record, string) {
	var f [5][]byte
	n := 0
	rest := line
	for {
		i := bytes.IndexByte(rest, '\t')
		if n == len(f) {
			return Record{}, ReasonFieldCount
		}
		if i < 0 {
			f[n] = rest
			n++
			break
		}
		f[n] = rest[:i]
		n++
		rest = rest[i+1:]
	}
	if n != 5 && n != 3 {
		return Record{}, ReasonFieldCount
	}
	id := strings.TrimSpace(string(f[0]))
	if id == "" {
		return Record{}, ReasonAnonID
	}
	ts, err := time.ParseInLocation(TimeLayout, string(bytes.TrimSpace(f[2])), time.UTC)
	if err != nil {
		return Record{}, ReasonTime
	}
	rec := Record{AnonID: id, Query: string(f[1]), QueryTime: ts}
	if n == 5 {
		if rank := bytes.TrimSpace(f[3]); len(rank) > 0 {
			v, err := strconv.Atoi(string(rank))
			if err != nil || v < 1 {
				return Record{}, ReasonItemRank
			}
			rec.ItemRank = v
		}
		rec.ClickURL = string(bytes.TrimSpace(f[4]))
	}
	return rec, ""
}
