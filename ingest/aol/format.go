package aol

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Named time formats of Options.TimeFormat. Each one parses a QueryTime
// (surrounding white space removed) into a UTC time with second resolution
// or finer.
const (
	// FormatAuto ("" works too) detects the format from the file's first
	// good line, trying FormatAOL, FormatRFC3339, FormatExcite, FormatUnix in
	// that order, and requires it on every later line.
	FormatAuto = "auto"
	// FormatAOL is TimeLayout, "2006-01-02 15:04:05", read as UTC (the AOL
	// log's nominal local time).
	FormatAOL = "aol"
	// FormatRFC3339 is RFC 3339 (e.g. "2006-03-01T07:17:12Z" or with an
	// offset "+02:00", fractions allowed); the instant is kept and returned
	// in UTC.
	FormatRFC3339 = "rfc3339"
	// FormatUnix is decimal seconds since 1970-01-01 00:00:00 UTC, 1 to 11
	// digits (e.g. "1141197432"; 11 digits reach the year 5138), so that no
	// value is both Unix seconds and FormatExcite.
	FormatUnix = "unix"
	// FormatExcite is the compact yymmddHHMMSS of the Excite logs (Go layout
	// ExciteLayout), exactly 12 digits, read as UTC; yy 69–99 is 1969–1999
	// and 00–68 is 2000–2068 (Go's two-digit-year rule). E.g.
	// "970916105432" is 1997-09-16 10:54:32.
	FormatExcite = "excite"
)

// ExciteLayout is the Go layout of FormatExcite.
const ExciteLayout = "060102150405"

// Accepted describes, for error messages, the input shapes a Reader with
// default Options accepts and how to read others.
const Accepted = "tab-separated lines AnonID, Query, QueryTime[, ItemRank, ClickURL] (AOL) or AnonID, QueryTime, Query (Excite), " +
	"plain or gzip; QueryTime as 2006-01-02 15:04:05, RFC 3339, Unix seconds or yymmddHHMMSS; " +
	"any other time layout with Options.TimeFormat, the CLI's --time-format (a Go layout, e.g. \"02/Jan/2006:15:04:05\")"

// timeFormat parses one QueryTime field.
type timeFormat struct {
	name  string // shown in Stats.TimeFormat
	parse func(s string) (time.Time, bool)
}

var (
	fmtAOL = timeFormat{"2006-01-02 15:04:05", func(s string) (time.Time, bool) {
		t, err := time.ParseInLocation(TimeLayout, s, time.UTC)
		return t, err == nil
	}}
	fmtRFC3339 = timeFormat{"RFC 3339", func(s string) (time.Time, bool) {
		t, err := time.Parse(time.RFC3339, s)
		return t.UTC(), err == nil
	}}
	fmtExcite = timeFormat{"yymmddHHMMSS", func(s string) (time.Time, bool) {
		if len(s) != 12 || !allDigits(s) {
			return time.Time{}, false
		}
		t, err := time.ParseInLocation(ExciteLayout, s, time.UTC)
		return t, err == nil
	}}
	fmtUnix = timeFormat{"Unix seconds", func(s string) (time.Time, bool) {
		if s == "" || len(s) > 11 || !allDigits(s) {
			return time.Time{}, false
		}
		v, err := strconv.ParseInt(s, 10, 64)
		return time.Unix(v, 0).UTC(), err == nil
	}}
)

// autoFormats is the detection order of FormatAuto: the formats share no
// value, so the order only matters for the column order (see Reader.parse).
var autoFormats = []timeFormat{fmtAOL, fmtRFC3339, fmtExcite, fmtUnix}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// resolveFormat maps Options.TimeFormat to its formats: nil for auto, or
// the one given. A custom Go layout must carry at least a year, a month and
// a day: formatting a reference time with it and parsing the result back
// must give the same date, otherwise every line would be bad (or get year
// 0) and the error is better said at once.
func resolveFormat(s string) ([]timeFormat, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", FormatAuto:
		return nil, nil
	case FormatAOL, strings.ToLower(TimeLayout):
		return []timeFormat{fmtAOL}, nil
	case FormatRFC3339, "rfc 3339", strings.ToLower(time.RFC3339):
		return []timeFormat{fmtRFC3339}, nil
	case FormatUnix:
		return []timeFormat{fmtUnix}, nil
	case FormatExcite, "yymmddhhmmss", ExciteLayout:
		return []timeFormat{fmtExcite}, nil
	}
	ref := time.Date(2001, 2, 3, 16, 5, 6, 0, time.UTC)
	back, err := time.ParseInLocation(s, ref.Format(s), time.UTC)
	if err != nil || back.Year() != ref.Year() || back.Month() != ref.Month() || back.Day() != ref.Day() {
		return nil, fmt.Errorf("aol: time format %q is not a Go time layout with a year, month and day "+
			"(write the reference time Mon Jan 2 15:04:05 MST 2006 in the log's layout, e.g. \"02/01/2006 15:04:05\"; "+
			"or use auto, aol, rfc3339, unix or excite)", s)
	}
	layout := s
	return []timeFormat{{layout, func(v string) (time.Time, bool) {
		t, err := time.ParseInLocation(layout, v, time.UTC)
		return t.UTC(), err == nil
	}}}, nil
}
