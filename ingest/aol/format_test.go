package aol

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// utc is time.Date in UTC, for expected times written by hand.
func utc(y int, mo time.Month, d, h, mi, s int) time.Time {
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
}

type want struct {
	line  int
	id, q string
	at    time.Time
}

func checkRecords(t *testing.T, name string, got []Record, w []want) {
	t.Helper()
	if len(got) != len(w) {
		t.Fatalf("%s: %d records %+v, want %d", name, len(got), got, len(w))
	}
	for i := range w {
		g := got[i]
		if g.Line != w[i].line || g.AnonID != w[i].id || g.Query != w[i].q || !g.QueryTime.Equal(w[i].at) || g.QueryTime.Location() != time.UTC {
			t.Errorf("%s: record %d = line %d %q %q %v, want line %d %q %q %v", name, i,
				g.Line, g.AnonID, g.Query, g.QueryTime, w[i].line, w[i].id, w[i].q, w[i].at)
		}
	}
}

// TestTimeFormats reads each accepted QueryTime format, auto-detected and
// given, against times computed by hand: 1141197432 s after the epoch is
// 2006-03-01 (13208 days = 1141171200 s) plus 26232 s = 07:17:12.
func TestTimeFormats(t *testing.T) {
	cases := []struct {
		name, in, format   string
		want               []want
		timeFormat, column string
	}{
		{"aol", "1\tweather\t2006-03-01 07:17:12\t\t\n", "",
			[]want{{1, "1", "weather", utc(2006, 3, 1, 7, 17, 12)}}, "2006-01-02 15:04:05", ColumnsAOL},
		{"rfc3339 with offset", "1\tweather\t2006-03-01T09:17:12+02:00\n2\tnews\t2006-03-01T07:17:12Z\n", "",
			[]want{{1, "1", "weather", utc(2006, 3, 1, 7, 17, 12)}, {2, "2", "news", utc(2006, 3, 1, 7, 17, 12)}}, "RFC 3339", ColumnsAOL},
		{"unix", "1\tweather\t1141197432\t2\thttp://example.com\n1\tnews\t0\n", "",
			[]want{{1, "1", "weather", utc(2006, 3, 1, 7, 17, 12)}, {2, "1", "news", utc(1970, 1, 1, 0, 0, 0)}}, "Unix seconds", ColumnsAOL},
		{"excite compact in AOL columns", "7\tweather\t970916105432\n", "",
			[]want{{1, "7", "weather", utc(1997, 9, 16, 10, 54, 32)}}, "yymmddHHMMSS", ColumnsAOL},
		{"excite columns", "2A9E\t970916105432\tcheap flights\n2A9E\t970916105501\t\nB77C\t000101000000\tnew year\nB77C\t681231235959\tlate\n", "",
			[]want{{1, "2A9E", "cheap flights", utc(1997, 9, 16, 10, 54, 32)}, {2, "2A9E", "", utc(1997, 9, 16, 10, 55, 1)},
				{3, "B77C", "new year", utc(2000, 1, 1, 0, 0, 0)}, {4, "B77C", "late", utc(2068, 12, 31, 23, 59, 59)}}, "yymmddHHMMSS", ColumnsExcite},
		// A numeric Excite query also reads as Unix seconds: the more
		// specific format (yymmddHHMMSS) decides the column order.
		{"excite numeric query first", "u\t970916105432\t1999\nu\t970916105433\tnews\n", "",
			[]want{{1, "u", "1999", utc(1997, 9, 16, 10, 54, 32)}, {2, "u", "news", utc(1997, 9, 16, 10, 54, 33)}}, "yymmddHHMMSS", ColumnsExcite},
		{"unix 11 digits", "1\ta\t99999999999\n", "",
			[]want{{1, "1", "a", time.Date(5138, 11, 16, 9, 46, 39, 0, time.UTC)}}, "Unix seconds", ColumnsAOL},
		{"given unix", "1\ta\t1141197432\n", FormatUnix,
			[]want{{1, "1", "a", utc(2006, 3, 1, 7, 17, 12)}}, "Unix seconds", ColumnsAOL},
		{"given excite", "1\t970916105432\ta\n", "yymmddHHMMSS",
			[]want{{1, "1", "a", utc(1997, 9, 16, 10, 54, 32)}}, "yymmddHHMMSS", ColumnsExcite},
		{"given layout", "1\ta\t16/09/1997 10:54\n", "02/01/2006 15:04",
			[]want{{1, "1", "a", utc(1997, 9, 16, 10, 54, 0)}}, "02/01/2006 15:04", ColumnsAOL},
		{"given layout with zone", "1\ta\t16/Sep/1997:10:54:32 -0700\n", "02/Jan/2006:15:04:05 -0700",
			[]want{{1, "1", "a", utc(1997, 9, 16, 17, 54, 32)}}, "02/Jan/2006:15:04:05 -0700", ColumnsAOL},
	}
	for _, c := range cases {
		r, err := NewReaderOptions(strings.NewReader(c.in), Options{TimeFormat: c.format})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		checkRecords(t, c.name, readAll(t, r), c.want)
		st := r.Stats()
		if st.Bad != 0 || st.TimeFormat != c.timeFormat || st.Columns != c.column {
			t.Errorf("%s: stats %v, want time format %q, columns %q", c.name, st, c.timeFormat, c.column)
		}
	}
}

func TestTimeFormatBadLines(t *testing.T) {
	// Auto: lines before the first good one name every accepted format;
	// after it, the detected one.
	in := "1\ta\tyesterday\n" + // 1 no format
		"1\ta\t970916105432\n" + // 2 good: yymmddHHMMSS, AOL columns
		"1\ta\t2006-03-01 07:17:12\n" + // 3 another format
		"1\t970916105433\ta\n" + // 4 Excite columns in an AOL-order file
		"1\ta\t971316105432\n" + // 5 month 13
		"1\ta\t97091610543\n" + // 6 11 digits
		"1\tb\t970916105434\n" // 7 good
	r := mustReader(t, in)
	checkRecords(t, "auto", readAll(t, r), []want{{2, "1", "a", utc(1997, 9, 16, 10, 54, 32)}, {7, "1", "b", utc(1997, 9, 16, 10, 54, 34)}})
	detected := ReasonTimeDetected("yymmddHHMMSS", ColumnsAOL)
	wantBad := []BadLine{{1, ReasonTime}, {3, detected}, {4, detected}, {5, detected}, {6, detected}}
	st := r.Stats()
	if st.Bad != len(wantBad) || len(st.Examples) != len(wantBad) {
		t.Fatalf("stats %v", st)
	}
	for i, w := range wantBad {
		if st.Examples[i] != w {
			t.Errorf("bad line %d = %+v, want %+v", i, st.Examples[i], w)
		}
	}
	if !strings.Contains(detected, "yymmddHHMMSS") || !strings.Contains(ReasonTime, "--time-format") {
		t.Errorf("reasons do not say what was expected: %q, %q", detected, ReasonTime)
	}

	// An Excite file: a 5-field line is the wrong field count.
	r = mustReader(t, "u\t970916105432\ta\nu\ta\t970916105432\t1\thttp://x\n")
	readAll(t, r)
	if st := r.Stats(); st.Records != 1 || st.Bad != 1 || st.Examples[0] != (BadLine{2, ReasonFieldCount}) {
		t.Errorf("excite with AOL line: stats %v", st)
	}

	// Given: other formats are bad with ReasonTimeLayout.
	r, err := NewReaderOptions(strings.NewReader("1\ta\t2006-03-01 07:17:12\n1\ta\t1141197432\n1\ta\t100000000000\n"), Options{TimeFormat: FormatUnix})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, "given unix", readAll(t, r), []want{{2, "1", "a", utc(2006, 3, 1, 7, 17, 12)}})
	if st := r.Stats(); st.Bad != 2 || st.Examples[0] != (BadLine{1, ReasonTimeLayout}) || st.Examples[1] != (BadLine{3, ReasonTimeLayout}) {
		t.Errorf("given unix: stats %v", st)
	}
}

func TestTimeFormatOption(t *testing.T) {
	for _, ok := range []string{"", "auto", "AOL", "rfc3339", "RFC 3339", "unix", "excite", "yymmddHHMMSS", TimeLayout,
		time.RFC3339, "2006-01-02", "Jan _2 2006 15:04:05", "20060102150405"} {
		if _, err := NewReaderOptions(strings.NewReader(""), Options{TimeFormat: ok}); err != nil {
			t.Errorf("TimeFormat %q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"hello", "15:04:05", "yyyy-mm-dd", "2006-01 15:04"} {
		_, err := NewReaderOptions(strings.NewReader(""), Options{TimeFormat: bad})
		if err == nil || !strings.Contains(err.Error(), "Go time layout") {
			t.Errorf("TimeFormat %q: err %v, want a layout error", bad, err)
		}
		if _, err := OpenOptions(filepath.Join(t.TempDir(), "missing"), Options{TimeFormat: bad}); err == nil || !strings.Contains(err.Error(), "Go time layout") {
			t.Errorf("OpenOptions with TimeFormat %q: err %v, want a layout error first", bad, err)
		}
	}
}

func TestStdin(t *testing.T) {
	p := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(p, gz(t, "u\t970916105432\tweather\nv\t970916105433\tnews\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = old }()
	var ids []string
	st, err := ReadUsersOptions(Stdin, Options{TimeFormat: FormatExcite}, func(u User) error {
		ids = append(ids, u.AnonID)
		return nil
	})
	if err != nil || st.Records != 2 || strings.Join(ids, ",") != "u,v" {
		t.Fatalf("stdin: ids %v stats %v err %v", ids, st, err)
	}
	// Close left stdin (f) open.
	if _, err := f.Stat(); err != nil {
		t.Errorf("stdin closed by the reader: %v", err)
	}
}
