package aol

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const hdr = "AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n"

// readAll drains r and returns its records.
func readAll(t testing.TB, r *Reader) []Record {
	t.Helper()
	var out []Record
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, rec)
	}
}

func mustReader(t testing.TB, s string) *Reader {
	t.Helper()
	r, err := NewReader(strings.NewReader(s))
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	return r
}

func gz(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestParseWellFormed(t *testing.T) {
	in := hdr +
		"142\trentdirect.com\t2006-03-01 07:17:12\t\t\n" +
		"142\twestchester.gov\t2006-03-20 03:55:57\t1\thttp://www.westchestergov.com\r\n" +
		"217\tlottery\t2006-03-01 11:58:51\t\thttp://www.calottery.com\n" +
		"217\tno click columns\t2006-03-02 00:00:00" // 3 fields, no final newline
	r := mustReader(t, in)
	got := readAll(t, r)
	want := []Record{
		{Line: 2, AnonID: "142", Query: "rentdirect.com", QueryTime: time.Date(2006, 3, 1, 7, 17, 12, 0, time.UTC)},
		{Line: 3, AnonID: "142", Query: "westchester.gov", QueryTime: time.Date(2006, 3, 20, 3, 55, 57, 0, time.UTC), ItemRank: 1, ClickURL: "http://www.westchestergov.com"},
		{Line: 4, AnonID: "217", Query: "lottery", QueryTime: time.Date(2006, 3, 1, 11, 58, 51, 0, time.UTC), ClickURL: "http://www.calottery.com"},
		{Line: 5, AnonID: "217", Query: "no click columns", QueryTime: time.Date(2006, 3, 2, 0, 0, 0, 0, time.UTC)},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !got[i].QueryTime.Equal(want[i].QueryTime) {
			t.Errorf("record %d time %v, want %v", i, got[i].QueryTime, want[i].QueryTime)
		}
		got[i].QueryTime, want[i].QueryTime = time.Time{}, time.Time{}
		if got[i] != want[i] {
			t.Errorf("record %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	st := r.Stats()
	if st.Lines != 5 || st.Records != 4 || st.Bad != 0 || !st.Header {
		t.Errorf("stats = %+v", st)
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("Next after end = %v, want io.EOF", err)
	}
}

func TestBadLines(t *testing.T) {
	long := "1\t" + strings.Repeat("x", MaxLineBytes) + "\t2006-03-01 00:00:00\t\t\n"
	in := hdr +
		"1\tok\t2006-03-01 00:00:00\t\t\n" + // 2 ok
		"1\tfour\tfields\t\n" + // 3 field count
		"\tq\t2006-03-01 00:00:00\t\t\n" + // 4 empty AnonID
		"1\tq\t2006-13-01 00:00:00\t\t\n" + // 5 bad month
		"1\tq\t01/03/2006\t\t\n" + // 6 bad time layout
		"1\tq\t2006-03-01 00:00:00\tfirst\t\n" + // 7 bad rank
		"1\tq\t2006-03-01 00:00:00\t-3\t\n" + // 8 negative rank
		"\n" + // 9 empty line
		long + // 10 too long
		"1\tq\t2006-03-01 00:00:00\t\t\t\n" + // 11 six fields
		"1\tafter\t2006-03-01 00:00:01\t2\thttp://x\n" // 12 ok
	r := mustReader(t, in)
	got := readAll(t, r)
	if len(got) != 2 || got[0].Line != 2 || got[1].Line != 12 || got[1].ItemRank != 2 {
		t.Fatalf("records = %+v", got)
	}
	st := r.Stats()
	aolTime := ReasonTimeDetected("2006-01-02 15:04:05", ColumnsAOL)
	wantBad := []BadLine{
		{3, ReasonFieldCount}, {4, ReasonAnonID}, {5, aolTime}, {6, aolTime},
		{7, ReasonItemRank}, {8, ReasonItemRank}, {9, ReasonFieldCount}, {10, ReasonTooLong}, {11, ReasonFieldCount},
	}
	if st.Lines != 12 || st.Records != 2 || st.Bad != len(wantBad) || !st.Header {
		t.Fatalf("stats = %v", st)
	}
	if len(st.Examples) != len(wantBad) {
		t.Fatalf("examples = %+v", st.Examples)
	}
	for i := range wantBad {
		if st.Examples[i] != wantBad[i] {
			t.Errorf("example %d = %+v, want %+v", i, st.Examples[i], wantBad[i])
		}
	}
	s := st.String()
	for _, frag := range []string{"12 lines", "2 records", "9 bad", "header: yes", "3 (" + ReasonFieldCount + ")", "10 (" + ReasonTooLong + ")"} {
		if !strings.Contains(s, frag) {
			t.Errorf("String() = %q, missing %q", s, frag)
		}
	}
}

func TestLineAtLimit(t *testing.T) {
	prefix := "1\t"
	suffix := "\t2006-03-01 00:00:00\t\t"
	q := strings.Repeat("y", MaxLineBytes-len(prefix)-len(suffix))
	line := prefix + q + suffix
	if len(line) != MaxLineBytes {
		t.Fatal("bad test setup")
	}
	for _, term := range []string{"\n", "\r\n"} {
		r := mustReader(t, line+term+line+"x"+term)
		got := readAll(t, r)
		st := r.Stats()
		if len(got) != 1 || len(got[0].Query) != len(q) || st.Bad != 1 || st.Examples[0].Reason != ReasonTooLong {
			t.Errorf("terminator %q: %d records, stats %v", term, len(got), st)
		}
	}
	// Without a final newline.
	r := mustReader(t, line)
	if got := readAll(t, r); len(got) != 1 || r.Stats().Bad != 0 {
		t.Errorf("unterminated line at limit: %d records, stats %v", len(got), r.Stats())
	}
	r = mustReader(t, line+"x")
	if got := readAll(t, r); len(got) != 0 || r.Stats().Bad != 1 || r.Stats().Lines != 1 {
		t.Errorf("unterminated long line: %d records, stats %v", len(got), r.Stats())
	}
}

func TestExamplesCapped(t *testing.T) {
	in := hdr + strings.Repeat("garbage\n", 50)
	r := mustReader(t, in)
	readAll(t, r)
	st := r.Stats()
	if st.Bad != 50 || len(st.Examples) != MaxExamples || st.Examples[MaxExamples-1].Line != MaxExamples+1 {
		t.Fatalf("stats = %v", st)
	}
	if !strings.Contains(st.String(), "and 30 more") {
		t.Errorf("String() = %q", st.String())
	}
}

func TestHeaderless(t *testing.T) {
	r := mustReader(t, "5\tq\t2006-03-01 00:00:00\t\t\n6\tq2\t2006-03-01 00:00:00\t\t\n")
	got := readAll(t, r)
	st := r.Stats()
	if len(got) != 2 || got[0].Line != 1 || st.Header || st.Lines != 2 {
		t.Fatalf("records %+v stats %v", got, st)
	}
	// A broken first line that is neither header nor data is a bad line.
	r = mustReader(t, "AnonID,Query,QueryTime\n5\tq\t2006-03-01 00:00:00\t\t\n")
	got = readAll(t, r)
	st = r.Stats()
	if len(got) != 1 || st.Header || st.Bad != 1 || st.Examples[0].Line != 1 {
		t.Fatalf("records %+v stats %v", got, st)
	}
	// BOM and case differences in the header are tolerated.
	r = mustReader(t, "\ufeffanonid\tquery\tquerytime\titemrank\tclickurl\r\n5\tq\t2006-03-01 00:00:00\t\t\n")
	got = readAll(t, r)
	if st := r.Stats(); len(got) != 1 || !st.Header || st.Bad != 0 {
		t.Fatalf("records %+v stats %v", got, st)
	}
	// The header only counts on line 1.
	r = mustReader(t, "5\tq\t2006-03-01 00:00:00\t\t\n"+hdr)
	readAll(t, r)
	if st := r.Stats(); st.Header || st.Bad != 1 {
		t.Fatalf("stats %v", st)
	}
}

func TestEmptyInput(t *testing.T) {
	for _, in := range [][]byte{nil, gz(t, "")} {
		r, err := NewReader(bytes.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("Next = %v, want io.EOF", err)
		}
		if st := r.Stats(); st.Lines != 0 || st.Records != 0 || st.Bad != 0 {
			t.Fatalf("stats %v", st)
		}
	}
}

func TestOpenDetectsGzipByMagic(t *testing.T) {
	content := hdr + "7\tq\t2006-03-01 00:00:00\t\t\n8\tr\t2006-03-02 00:00:00\t3\thttp://y\n"
	dir := t.TempDir()
	// Names deliberately disagree with the content.
	plain := filepath.Join(dir, "log.gz")
	zipped := filepath.Join(dir, "log.tsv")
	if err := os.WriteFile(plain, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(zipped, gz(t, content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{plain, zipped} {
		r, err := Open(p)
		if err != nil {
			t.Fatalf("Open(%s): %v", p, err)
		}
		got := readAll(t, r)
		if len(got) != 2 || got[1].AnonID != "8" || got[1].ItemRank != 3 {
			t.Errorf("%s: records %+v", p, got)
		}
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := r.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
	if _, err := Open(filepath.Join(dir, "missing")); err == nil {
		t.Error("Open(missing) succeeded")
	}
}

func TestTruncatedGzipIsAnError(t *testing.T) {
	var content strings.Builder
	content.WriteString(hdr)
	for range 5000 {
		content.WriteString("9\tsome query\t2006-03-01 00:00:00\t\thttp://example.com\n")
	}
	z := gz(t, content.String())
	r, err := NewReader(bytes.NewReader(z[:len(z)-20]))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for {
		_, err = r.Next()
		if err != nil {
			break
		}
		n++
	}
	if errors.Is(err, io.EOF) {
		t.Fatalf("truncated gzip ended with io.EOF after %d records, want an error", n)
	}
	if _, err2 := r.Next(); err2 == nil || errors.Is(err2, io.EOF) {
		t.Errorf("error not sticky: %v", err2)
	}
	if _, err := NewReader(bytes.NewReader([]byte{0x1f, 0x8b, 0})); err == nil {
		t.Error("broken gzip header accepted")
	}
}

func TestReadUsersGroupsNonContiguous(t *testing.T) {
	in := hdr +
		"10\ta\t2006-03-01 00:00:00\t\t\n" +
		"10\tb\t2006-03-01 00:00:01\t\t\n" +
		"20\tc\t2006-03-01 00:00:00\t\t\n" +
		"bad line\n" +
		"10\td\t2006-03-02 00:00:00\t\t\n" +
		"30\te\t2006-03-01 00:00:00\t\t\n" +
		"20\tf\t2006-03-03 00:00:00\t\t\n"
	p := filepath.Join(t.TempDir(), "u.tsv.gz")
	if err := os.WriteFile(p, gz(t, in), 0o600); err != nil {
		t.Fatal(err)
	}
	var ids []string
	var queries []string
	st, err := ReadUsers(p, func(u User) error {
		ids = append(ids, u.AnonID)
		var q []string
		for _, r := range u.Records {
			if r.AnonID != u.AnonID {
				t.Errorf("user %s got record of %s", u.AnonID, r.AnonID)
			}
			q = append(q, r.Query)
		}
		queries = append(queries, strings.Join(q, ","))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ids, " ") != "10 20 30" || strings.Join(queries, " ") != "a,b,d c,f e" {
		t.Fatalf("ids %v queries %v", ids, queries)
	}
	if st.Records != 6 || st.Bad != 1 || st.Lines != 8 {
		t.Fatalf("stats %v", st)
	}
	stop := errors.New("stop")
	calls := 0
	_, err = ReadUsers(p, func(User) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
	if _, err := ReadUsers(filepath.Join(t.TempDir(), "none"), func(User) error { return nil }); err == nil {
		t.Fatal("missing file accepted")
	}
}

// realLog is the bundled real AOL subset (see /work/shared/data/README.md).
const realLog = "../../testdata/aol-top1000.tsv.gz"

// TestRealLog checks the reader against the published facts of the bundled
// log and against an independent line count done with compress/gzip+bufio.
func TestRealLog(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the 31 MB real log")
	}
	f, err := os.Open(realLog)
	if err != nil {
		t.Fatalf("open %s: %v", realLog, err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var lines, fiveFields int
	for sc.Scan() {
		lines++
		if strings.Count(sc.Text(), "\t") == 4 {
			fiveFields++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	users := map[string]bool{}
	var prevKey string
	queryRecords := 0 // rows collapsed on (AnonID, Query, QueryTime), the README's "query records"
	st, err := ReadUsers(realLog, func(u User) error {
		if users[u.AnonID] {
			t.Errorf("user delivered twice")
		}
		users[u.AnonID] = true
		for i, r := range u.Records {
			if i > 0 && r.QueryTime.Before(u.Records[i-1].QueryTime) {
				t.Errorf("records of a user out of time order at line %d", r.Line)
			}
			key := r.AnonID + "\t" + r.Query + "\t" + r.QueryTime.String()
			if key != prevKey {
				queryRecords++
			}
			prevKey = key
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("real log: %v; %d users, %d query records", st, len(users), queryRecords)
	if st.Lines != lines || !st.Header || st.Records != fiveFields-1 || st.Bad != 0 {
		t.Errorf("stats %v, independent count: %d lines, %d five-field lines", st, lines, fiveFields)
	}
	// Published in the data README: 407,929 rows, 318,023 query records, 1,000 users.
	if st.Records != 407929 || queryRecords != 318023 || len(users) != 1000 {
		t.Errorf("got %d rows, %d query records, %d users; README says 407929, 318023, 1000", st.Records, queryRecords, len(users))
	}
}

// fuzzFormats are the Options.TimeFormat values FuzzReader picks from.
var fuzzFormats = []string{"", FormatAOL, FormatRFC3339, FormatUnix, FormatExcite, "02/01/2006 15:04"}

func FuzzReader(f *testing.F) {
	f.Add([]byte(hdr+"142\trentdirect.com\t2006-03-01 07:17:12\t\t\n"), uint8(0))
	f.Add([]byte("142\tq\t2006-03-01 07:17:12\t1\thttp://x\r\n\n\t\t\t\t\n"), uint8(1))
	f.Add([]byte("1\tq\t2006-03-01 07:17:12"), uint8(0))
	f.Add([]byte("\ufeffAnonID\tQuery\tQueryTime\tItemRank\tClickURL\r\n1\t-\t2006-02-30 00:00:00\tx\t\n"), uint8(0))
	f.Add(gz(f, hdr+"5\tq\t2006-03-01 00:00:00\t\t\n"), uint8(0))
	f.Add([]byte{0x1f, 0x8b}, uint8(0))
	f.Add([]byte{}, uint8(0))
	f.Add([]byte("1\tq\t2006-03-01T07:17:12+02:00\n1\tr\t2006-03-01T07:17:12.5Z\n"), uint8(0))
	f.Add([]byte("1\tq\t1141197432\t2\thttp://x\n1\tr\t100000000000\n"), uint8(0))
	f.Add([]byte("2A9E\t970916105432\tcheap flights\n2A9E\t970916105501\t\n2A9E\tq\t970916105501\n"), uint8(0))
	f.Add([]byte("u\t970916105432\t1999\nu\t991316105432\tx\n"), uint8(4))
	f.Add([]byte("u\tq\t16/09/1997 10:54\n"), uint8(5))
	f.Fuzz(func(t *testing.T, data []byte, format uint8) {
		opts := Options{TimeFormat: fuzzFormats[int(format)%len(fuzzFormats)]}
		r, err := NewReaderOptions(bytes.NewReader(data), opts)
		if err != nil {
			return // only a broken gzip header
		}
		defer r.Close()
		var recs []Record
		for {
			rec, err := r.Next()
			if err != nil {
				break // io.EOF or a decompression error
			}
			recs = append(recs, rec)
			if rec.AnonID == "" || rec.ItemRank < 0 || rec.Line < 1 || rec.Line > r.Stats().Lines ||
				rec.QueryTime.Location() != time.UTC {
				t.Fatalf("invalid record %+v", rec)
			}
		}
		st := r.Stats()
		header := 0
		if st.Header {
			header = 1
		}
		if st.Records != len(recs) || st.Lines != st.Records+st.Bad+header {
			t.Fatalf("stats %v inconsistent with %d records", st, len(recs))
		}
		if len(st.Examples) > MaxExamples || len(st.Examples) > st.Bad {
			t.Fatalf("examples %v", st.Examples)
		}
		if len(data) > 0 && data[0] != 0x1f && st.Lines != bytes.Count(data, []byte("\n"))+boolInt(!bytes.HasSuffix(data, []byte("\n"))) {
			t.Fatalf("counted %d lines in %q", st.Lines, data)
		}
		if st.Records > 0 && (st.TimeFormat == "" || st.Columns == "") {
			t.Fatalf("records without a time format or columns: %v", st)
		}
		// Detection is per file: giving the detected format explicitly
		// reads exactly the same records.
		if opts.TimeFormat == "" && st.Records > 0 {
			name := map[string]string{fmtAOL.name: FormatAOL, fmtRFC3339.name: FormatRFC3339, fmtUnix.name: FormatUnix, fmtExcite.name: FormatExcite}[st.TimeFormat]
			r2, err := NewReaderOptions(bytes.NewReader(data), Options{TimeFormat: name})
			if err != nil {
				t.Fatalf("detected format %q refused: %v", st.TimeFormat, err)
			}
			defer r2.Close()
			for i := 0; ; i++ {
				rec, err := r2.Next()
				if err != nil {
					if i != len(recs) {
						t.Fatalf("with the detected format %s: %d records, auto read %d", st.TimeFormat, i, len(recs))
					}
					break
				}
				if i >= len(recs) || rec != recs[i] {
					t.Fatalf("with the detected format %s: record %d = %+v, auto read %+v", st.TimeFormat, i, rec, recs)
				}
			}
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// BenchmarkReadBundled reads the whole bundled log (407,930 lines), time
// format detected; reports records/s.
func BenchmarkReadBundled(b *testing.B) {
	var n int
	for b.Loop() {
		r, err := Open(realLog)
		if err != nil {
			b.Fatal(err)
		}
		n = len(readAll(b, r))
		r.Close()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
