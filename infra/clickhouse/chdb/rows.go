//go:build chdb

package chdb

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	chdriver "github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// field is one value of a result row: its text, unescaped, or NULL.
type field struct {
	s    string
	null bool
}

// Rows are the rows of one Query, read whole from the engine's
// TabSeparatedWithNamesAndTypes output. Scan converts each value by its
// ClickHouse type into the destination's Go type.
type Rows struct {
	names, types []string
	data         [][]field
	loc          *time.Location
	i            int // next row is data[i]
	cur          []field
	err          error
	closed       bool
}

var _ chdriver.Rows = (*Rows)(nil)

// parseRows reads TabSeparatedWithNamesAndTypes output: a line of names,
// a line of types, then one line per row; values escaped (\t, \n, \\, …),
// NULL as \N.
func parseRows(out []byte, loc *time.Location) (*Rows, error) {
	r := &Rows{loc: loc}
	if len(out) == 0 {
		return r, nil
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) < 2 {
		return nil, fmt.Errorf("chdb: result without its names and types lines: %.80q", out)
	}
	var err error
	if r.names, err = splitUnescape(lines[0]); err != nil {
		return nil, err
	}
	if r.types, err = splitUnescape(lines[1]); err != nil {
		return nil, err
	}
	if len(r.names) != len(r.types) {
		return nil, fmt.Errorf("chdb: %d column names for %d types", len(r.names), len(r.types))
	}
	for _, l := range lines[2:] {
		parts := strings.Split(l, "\t")
		if len(parts) != len(r.names) {
			return nil, fmt.Errorf("chdb: a row of %d values for %d columns: %.80q", len(parts), len(r.names), l)
		}
		row := make([]field, len(parts))
		for i, p := range parts {
			if p == `\N` {
				row[i] = field{null: true}
				continue
			}
			if row[i].s, err = unescapeTSV(p); err != nil {
				return nil, err
			}
		}
		r.data = append(r.data, row)
	}
	return r, nil
}

func splitUnescape(line string) ([]string, error) {
	parts := strings.Split(line, "\t")
	for i, p := range parts {
		u, err := unescapeTSV(p)
		if err != nil {
			return nil, err
		}
		parts[i] = u
	}
	return parts, nil
}

// unescapeTSV undoes ClickHouse's TabSeparated escaping of one value.
func unescapeTSV(s string) (string, error) {
	if strings.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i == len(s) {
			return "", fmt.Errorf("chdb: TabSeparated value ends in a backslash: %.80q", s)
		}
		switch e := s[i]; e {
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'r':
			b.WriteByte('\r')
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '0':
			b.WriteByte(0)
		case 'a':
			b.WriteByte('\a')
		case 'v':
			b.WriteByte('\v')
		case 'x':
			if i+2 >= len(s) {
				return "", fmt.Errorf("chdb: short \\x escape in %.80q", s)
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return "", fmt.Errorf("chdb: bad \\x escape in %.80q", s)
			}
			b.WriteByte(byte(v))
			i += 2
		default: // \\, \', \", \t written as is, …
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}

// Next advances to the next row.
func (r *Rows) Next() bool {
	if r.closed || r.err != nil || r.i >= len(r.data) {
		r.cur = nil
		return false
	}
	r.cur = r.data[r.i]
	r.i++
	return true
}

// Scan stores the current row's values into dest, one per column:
// *string, *[]byte, every int and uint width, *float32, *float64, *bool,
// *time.Time (Date: 00:00 UTC of the day; DateTime: in UTC), *any,
// pointers to pointers of those (nil for NULL) and sql.Scanner. A NULL
// into another destination leaves it unchanged, as clickhouse-go does.
func (r *Rows) Scan(dest ...any) error {
	if r.cur == nil {
		return errors.New("chdb: Scan called without a successful Next")
	}
	if len(dest) != len(r.cur) {
		return fmt.Errorf("chdb: Scan of %d values into %d destinations (columns %v)", len(r.cur), len(dest), r.names)
	}
	for i, d := range dest {
		if err := scanValue(d, r.cur[i], r.types[i], r.loc); err != nil {
			return fmt.Errorf("chdb: column %s (%s): %w", r.names[i], r.types[i], err)
		}
	}
	return nil
}

// baseType strips Nullable(…) and LowCardinality(…).
func baseType(t string) string {
	for {
		switch {
		case strings.HasPrefix(t, "Nullable(") && strings.HasSuffix(t, ")"):
			t = t[len("Nullable(") : len(t)-1]
		case strings.HasPrefix(t, "LowCardinality(") && strings.HasSuffix(t, ")"):
			t = t[len("LowCardinality(") : len(t)-1]
		default:
			return t
		}
	}
}

// parseTime reads a Date, Date32, DateTime or DateTime64 value.
func parseTime(s, typ string, loc *time.Location) (time.Time, error) {
	t := baseType(typ)
	if strings.HasPrefix(t, "Date") && !strings.HasPrefix(t, "DateTime") {
		d, err := time.ParseInLocation("2006-01-02", s, time.UTC)
		return d, err
	}
	if i := strings.IndexByte(t, '\''); i >= 0 { // DateTime('Zone'), DateTime64(3, 'Zone')
		if j := strings.IndexByte(t[i+1:], '\''); j >= 0 {
			if l, err := time.LoadLocation(t[i+1 : i+1+j]); err == nil {
				loc = l
			}
		}
	}
	layout := dateTimeLayout
	if strings.Contains(s, ".") {
		layout += ".999999999"
	}
	v, err := time.ParseInLocation(layout, s, loc)
	if err != nil {
		return time.Time{}, err
	}
	return v.UTC(), nil
}

// natural is the value of f as the Go type a driver would hand to
// sql.Scanner or *any.
func natural(f field, typ string, loc *time.Location) (any, error) {
	if f.null {
		return nil, nil
	}
	t := baseType(typ)
	switch {
	case strings.HasPrefix(t, "Date"):
		return parseTime(f.s, t, loc)
	case strings.HasPrefix(t, "Int"):
		return strconv.ParseInt(f.s, 10, 64)
	case strings.HasPrefix(t, "UInt"):
		return strconv.ParseUint(f.s, 10, 64)
	case strings.HasPrefix(t, "Float"):
		return strconv.ParseFloat(f.s, 64)
	case t == "Bool":
		return f.s == "true" || f.s == "1", nil
	}
	return f.s, nil
}

func scanValue(dest any, f field, typ string, loc *time.Location) error {
	if sc, ok := dest.(sql.Scanner); ok {
		v, err := natural(f, typ, loc)
		if err != nil {
			return err
		}
		if u, ok := v.(uint64); ok && u <= math.MaxInt64 {
			v = int64(u)
		}
		return sc.Scan(v)
	}
	switch d := dest.(type) {
	case *any:
		v, err := natural(f, typ, loc)
		*d = v
		return err
	case *string:
		if !f.null {
			*d = f.s
		}
		return nil
	case *[]byte:
		if !f.null {
			*d = []byte(f.s)
		}
		return nil
	case *time.Time:
		if f.null {
			return nil
		}
		v, err := parseTime(f.s, typ, loc)
		if err != nil {
			return err
		}
		*d = v
		return nil
	case *bool:
		if f.null {
			return nil
		}
		switch f.s {
		case "1", "true":
			*d = true
		case "0", "false":
			*d = false
		default:
			return fmt.Errorf("%q is not a bool", f.s)
		}
		return nil
	case driver.Valuer:
		return fmt.Errorf("cannot scan into a %T", dest)
	}
	rv := reflect.ValueOf(dest)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("destination %T is not a non-nil pointer", dest)
	}
	el := rv.Elem()
	if el.Kind() == reflect.Pointer { // **T: nil for NULL
		if f.null {
			el.Set(reflect.Zero(el.Type()))
			return nil
		}
		nv := reflect.New(el.Type().Elem())
		if err := scanValue(nv.Interface(), f, typ, loc); err != nil {
			return err
		}
		el.Set(nv)
		return nil
	}
	if f.null {
		return nil
	}
	switch el.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v, err := strconv.ParseInt(f.s, 10, el.Type().Bits())
		if err != nil {
			return fmt.Errorf("into %T: %w", dest, err)
		}
		el.SetInt(v)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v, err := strconv.ParseUint(f.s, 10, el.Type().Bits())
		if err != nil {
			return fmt.Errorf("into %T: %w", dest, err)
		}
		el.SetUint(v)
	case reflect.Float32, reflect.Float64:
		v, err := strconv.ParseFloat(f.s, el.Type().Bits())
		if err != nil {
			return fmt.Errorf("into %T: %w", dest, err)
		}
		el.SetFloat(v)
	case reflect.String:
		el.SetString(f.s)
	default:
		return fmt.Errorf("cannot scan into a %T", dest)
	}
	return nil
}

// ScanStruct is not provided (ErrNotImplemented).
func (r *Rows) ScanStruct(any) error { return ErrNotImplemented }

// Totals is not provided (ErrNotImplemented).
func (r *Rows) Totals(...any) error { return ErrNotImplemented }

// Columns returns the column names.
func (r *Rows) Columns() []string { return append([]string(nil), r.names...) }

// ColumnTypes describes the columns (name and ClickHouse type).
func (r *Rows) ColumnTypes() []chdriver.ColumnType {
	out := make([]chdriver.ColumnType, len(r.names))
	for i := range r.names {
		out[i] = columnType{name: r.names[i], typ: r.types[i]}
	}
	return out
}

// Close ends the rows.
func (r *Rows) Close() error { r.closed = true; return nil }

// Err is the error met while iterating (none: rows are read whole).
func (r *Rows) Err() error { return r.err }

// HasData reports whether the result has rows.
func (r *Rows) HasData() bool { return len(r.data) > 0 }

type columnType struct{ name, typ string }

func (c columnType) Name() string             { return c.name }
func (c columnType) Nullable() bool           { return strings.HasPrefix(c.typ, "Nullable(") }
func (c columnType) ScanType() reflect.Type   { return reflect.TypeFor[string]() }
func (c columnType) DatabaseTypeName() string { return c.typ }

// row is QueryRow's result.
type row struct {
	rows *Rows
	err  error
}

func (r *row) Err() error { return r.err }

func (r *row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		return sql.ErrNoRows
	}
	return r.rows.Scan(dest...)
}

func (r *row) ScanStruct(any) error { return ErrNotImplemented }
