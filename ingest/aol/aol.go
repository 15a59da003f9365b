// Package aol reads search logs in the common tab-separated shapes as a
// stream of records: the AOL 2006 log (header `AnonID Query QueryTime
// ItemRank ClickURL`, click columns optional) and the Excite 1997/1999 logs
// (`AnonID QueryTime Query`, no header), plain or gzipped, from a file or
// from stdin ("-").
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
//
// Time formats and columns are detected per file, from the first good line
// (see Options.TimeFormat): QueryTime as `2006-01-02 15:04:05` (AOL), RFC
// 3339, Unix seconds or the compact `yymmddHHMMSS` of the Excite logs (e.g.
// 970916105432 = 1997-09-16 10:54:32); the columns in AOL order, or in
// Excite order on 3-field lines whose second field is the time. Every later
// line must have the same format and column order, or it is a bad line
// (ReasonTimeDetected): a log is written by one program, and a line in
// another shape is more likely garbage than data. The formats share no
// value (Unix seconds have at most 11 digits, yymmddHHMMSS exactly 12).
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

// Column orders reported in Stats.Columns.
const (
	// ColumnsAOL is AnonID, Query, QueryTime, and optionally ItemRank and
	// ClickURL (5 fields, or 3 when the click columns are absent).
	ColumnsAOL = "AOL (AnonID Query QueryTime [ItemRank ClickURL])"
	// ColumnsExcite is AnonID, QueryTime, Query: 3 fields, no header, as in
	// the Excite 1997 and 1999 logs.
	ColumnsExcite = "Excite (AnonID QueryTime Query)"
)

// Bad-line reasons reported in BadLine.Reason. They never contain line content.
const (
	ReasonFieldCount = "wrong field count (want 5 tab-separated fields AnonID Query QueryTime ItemRank ClickURL, " +
		"or 3: AnonID Query QueryTime, or AnonID QueryTime Query)"
	ReasonTime = "bad QueryTime (want 2006-01-02 15:04:05, RFC 3339, Unix seconds or yymmddHHMMSS; " +
		"other layouts with Options.TimeFormat, the CLI's --time-format)"
	ReasonTimeLayout = "QueryTime does not match the given time format (Options.TimeFormat, the CLI's --time-format)"
	ReasonAnonID     = "empty AnonID"
	ReasonItemRank   = "bad ItemRank (want empty or a positive decimal integer)"
	ReasonTooLong    = "line longer than 1 MiB"
)

// ReasonTimeDetected is the reason of a bad QueryTime once the first good
// line fixed the format (named as in Stats.TimeFormat) and column order
// (Stats.Columns): e.g. "bad QueryTime (want yymmddHHMMSS in the Excite
// column, as on the first good line)".
func ReasonTimeDetected(format, columns string) string {
	col := "third"
	if columns == ColumnsExcite {
		col = "second"
	}
	return "bad QueryTime (want " + format + " in the " + col + " column, as on the first good line)"
}

// Options configure a Reader. The zero value detects the time format.
type Options struct {
	// TimeFormat is how QueryTime is written: "" or FormatAuto detects it
	// from the first good line; FormatAOL, FormatRFC3339, FormatUnix or
	// FormatExcite name one; anything else is a Go time layout (reference
	// time "2006-01-02 15:04:05", e.g. "02/01/2006 15:04") parsed as UTC
	// unless it carries a zone. Column order is detected either way.
	TimeFormat string
}

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
	// TimeFormat names the QueryTime format in use: the one given in
	// Options, or the one detected on the first good line (e.g.
	// "yymmddHHMMSS"); "" while none is known.
	TimeFormat string
	// Columns is ColumnsAOL or ColumnsExcite once the first good line is
	// read; "" before.
	Columns string
}

// String summarizes s in one line, e.g.
// "407930 lines, 407929 records, 0 bad, header: yes, time format:
// 2006-01-02 15:04:05, columns: AOL (…)" or, with bad lines,
// "... 3 bad, header: no; first bad lines: 1 (empty AnonID), 7 (...)".
func (s Stats) String() string {
	var b strings.Builder
	hdr := "no"
	if s.Header {
		hdr = "yes"
	}
	fmt.Fprintf(&b, "%d lines, %d records, %d bad, header: %s", s.Lines, s.Records, s.Bad, hdr)
	if s.TimeFormat != "" {
		fmt.Fprintf(&b, ", time format: %s", s.TimeFormat)
	}
	if s.Columns != "" {
		fmt.Fprintf(&b, ", columns: %s", s.Columns)
	}
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

// Reader streams Records from a search log. It is not safe for concurrent
// use.
type Reader struct {
	br      *bufio.Reader
	gz      *gzip.Reader // non-nil when the input is gzip-compressed
	file    *os.File     // non-nil when opened by Open from a file
	stats   Stats
	err     error // sticky I/O error or io.EOF
	closed  bool
	formats []timeFormat // candidates: the given one, autoFormats, then the detected one
	given   bool         // formats came from Options.TimeFormat
	cols    int          // colsUnknown until the first good line
	badTime string       // the reason of a bad time once cols is known
}

// Column orders.
const (
	colsUnknown = iota
	colsAOL
	colsExcite
)

// Stdin is the path that makes Open, OpenOptions and ReadUsersOptions read
// standard input.
const Stdin = "-"

// Open is OpenOptions with the zero Options (the time format detected).
func Open(path string) (*Reader, error) {
	return OpenOptions(path, Options{})
}

// OpenOptions opens the log at path, plain or gzip-compressed, or standard
// input when path is Stdin ("-"; Close then leaves stdin open). Compression
// is detected from the gzip magic bytes (1f 8b), not from the file name.
// Errors: opts.TimeFormat is not a usable layout, the file cannot be opened,
// or it starts like gzip but has an invalid gzip header. The caller must
// Close the Reader.
func OpenOptions(path string, opts Options) (*Reader, error) {
	if _, err := resolveFormat(opts.TimeFormat); err != nil {
		return nil, err
	}
	if path == Stdin {
		r, err := NewReaderOptions(os.Stdin, opts)
		if err != nil {
			return nil, fmt.Errorf("aol: stdin: %w", err)
		}
		return r, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("aol: open log: %w (check the path given to Open, the CLI's --input)", err)
	}
	r, err := NewReaderOptions(f, opts)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("aol: %s: %w", path, err)
	}
	r.file = f
	return r, nil
}

// NewReader is NewReaderOptions with the zero Options.
func NewReader(r io.Reader) (*Reader, error) {
	return NewReaderOptions(r, Options{})
}

// NewReaderOptions reads a log from r, plain or gzip-compressed (detected
// from the magic bytes). Errors: opts.TimeFormat is not a usable layout,
// reading the first bytes fails, or the gzip header is invalid. Close
// releases the decompressor but does not close r.
func NewReaderOptions(r io.Reader, opts Options) (*Reader, error) {
	formats, err := resolveFormat(opts.TimeFormat)
	if err != nil {
		return nil, err
	}
	rd := &Reader{formats: formats, given: formats != nil}
	if rd.given {
		rd.stats.TimeFormat = formats[0].name
	} else {
		rd.formats = autoFormats
	}
	src := bufio.NewReaderSize(r, MaxLineBytes+2)
	magic, err := src.Peek(2)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("aol: read log start: %w", err)
	}
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
		rec, reason := r.parse(line)
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
// reason it is malformed. Accepted: 5 fields (AOL), or 3 fields: AnonID,
// Query, QueryTime as in AOL rows without a click whose trailing tabs were
// lost, or AnonID, QueryTime, Query (Excite). The first good line fixes the
// time format (unless given) and the column order for the rest of the input.
func (r *Reader) parse(line []byte) (Record, string) {
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
	if n != 5 && n != 3 || r.cols == colsExcite && n != 3 {
		return Record{}, ReasonFieldCount
	}
	id := strings.TrimSpace(string(f[0]))
	if id == "" {
		return Record{}, ReasonAnonID
	}
	// Find the time: AOL's third field, or Excite's second on 3-field
	// lines. While the order is unknown and both parse (an Excite query
	// such as "1999" reads as Unix seconds), the more specific format wins
	// (the earlier in autoFormats); on a tie, AOL order.
	cols, fi := colsAOL, -1
	var ts time.Time
	if r.cols != colsExcite {
		ts, fi = r.parseTime(f[2])
	}
	if n == 3 && r.cols != colsAOL {
		if t, i := r.parseTime(f[1]); i >= 0 && (fi < 0 || i < fi) {
			ts, fi, cols = t, i, colsExcite
		}
	}
	if fi < 0 {
		switch {
		case r.given:
			return Record{}, ReasonTimeLayout
		case r.cols != colsUnknown:
			return Record{}, r.badTime
		}
		return Record{}, ReasonTime
	}
	rec := Record{AnonID: id, Query: string(f[1]), QueryTime: ts}
	if cols == colsExcite {
		rec.Query = string(f[2])
	}
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
	if r.cols == colsUnknown { // the first good line: fix its shape
		r.cols = cols
		r.stats.Columns = ColumnsAOL
		if cols == colsExcite {
			r.stats.Columns = ColumnsExcite
		}
		r.formats = []timeFormat{r.formats[fi]}
		r.stats.TimeFormat = r.formats[0].name
		r.badTime = ReasonTimeDetected(r.stats.TimeFormat, r.stats.Columns)
	}
	return rec, ""
}

// parseTime parses field with the candidate formats and returns the time
// and the index of the first format that matched, or -1.
func (r *Reader) parseTime(field []byte) (time.Time, int) {
	s := string(bytes.TrimSpace(field))
	for i, tf := range r.formats {
		if t, ok := tf.parse(s); ok {
			return t, i
		}
	}
	return time.Time{}, -1
}
