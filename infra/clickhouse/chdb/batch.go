//go:build chdb

package chdb

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

var insertRE = regexp.MustCompile(`(?is)^\s*INSERT\s+INTO\s+(?:TABLE\s+)?([^\s(]+)\s*(?:\(([^)]*)\))?\s*(?:VALUES\s*)?;?\s*$`)

// PrepareBatch prepares "INSERT INTO table [(col, …)]" (no VALUES data):
// it reads the table's column types (DESCRIBE TABLE), buffers the rows
// given to Append as literals of those types, and Send runs one INSERT …
// VALUES (…), (…) with them. Without a column list the batch takes every
// column that is not MATERIALIZED, ALIAS or EPHEMERAL. opts are ignored.
func (c *Conn) PrepareBatch(ctx context.Context, query string, _ ...driver.PrepareBatchOption) (driver.Batch, error) {
	m := insertRE.FindStringSubmatch(query)
	if m == nil {
		return nil, fmt.Errorf("chdb: PrepareBatch takes INSERT INTO table [(columns)], not %.80q", query)
	}
	out, err := c.e.run(ctx, c.db, c.settings, "DESCRIBE TABLE "+m[1], "TabSeparated")
	if err != nil {
		return nil, fmt.Errorf("chdb: columns of %s: %w", m[1], err)
	}
	types := map[string]string{}
	var all []string
	for _, l := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		f := strings.Split(l, "\t")
		if len(f) < 3 {
			continue
		}
		name, err := unescapeTSV(f[0])
		if err != nil {
			return nil, err
		}
		typ, err := unescapeTSV(f[1])
		if err != nil {
			return nil, err
		}
		types[name] = typ
		if f[2] == "" || f[2] == "DEFAULT" {
			all = append(all, name)
		}
	}
	cols := all
	if strings.TrimSpace(m[2]) != "" {
		cols = nil
		for _, n := range strings.Split(m[2], ",") {
			n = strings.Trim(strings.TrimSpace(n), "`\"")
			if _, ok := types[n]; !ok {
				return nil, fmt.Errorf("chdb: %s has no column %q", m[1], n)
			}
			cols = append(cols, n)
		}
	}
	b := &Batch{conn: c, ctx: ctx, table: m[1], cols: cols}
	for _, n := range cols {
		b.types = append(b.types, types[n])
	}
	return b, nil
}

// Batch is a prepared INSERT of Conn.PrepareBatch. Its other driver.Batch
// methods (AppendStruct, Column, Columns) are not provided.
type Batch struct {
	driver.Batch // nil: methods not implemented here

	conn  *Conn
	ctx   context.Context
	table string
	cols  []string
	types []string
	rows  []string // "(lit, lit, …)"
	n     int      // rows appended, flushed included
	sent  bool
}

var _ driver.Batch = (*Batch)(nil)

// ErrBatchSent is returned by a Batch used after Send, Abort or Close.
var ErrBatchSent = errors.New("chdb: batch already sent or aborted")

// Append adds one row: one value per column, converted to a literal of
// the column's type (String: string or []byte; integers: any Go integer
// within the column's range; floats: any Go number; Date: time.Time (its
// UTC day) or a string; DateTime: time.Time or a string; Nullable: nil
// too; Array: a slice).
func (b *Batch) Append(v ...any) error {
	if b.sent {
		return ErrBatchSent
	}
	if len(v) != len(b.cols) {
		return fmt.Errorf("chdb: insert into %s: %d values for the %d columns %v", b.table, len(v), len(b.cols), b.cols)
	}
	lits := make([]string, len(v))
	for i, x := range v {
		l, err := typedLiteral(x, b.types[i], b.conn.e.loc)
		if err != nil {
			return fmt.Errorf("chdb: insert into %s, column %s (%s): %w", b.table, b.cols[i], b.types[i], err)
		}
		lits[i] = l
	}
	b.rows = append(b.rows, "("+strings.Join(lits, ", ")+")")
	b.n++
	return nil
}

// AppendStruct is not provided (ErrNotImplemented).
func (b *Batch) AppendStruct(any) error { return ErrNotImplemented }

// Flush inserts the buffered rows and keeps the batch open.
func (b *Batch) Flush() error {
	if b.sent {
		return ErrBatchSent
	}
	if len(b.rows) == 0 {
		return nil
	}
	q := "INSERT INTO " + b.table + " (" + strings.Join(quoteAll(b.cols), ", ") + ") VALUES " + strings.Join(b.rows, ", ")
	if _, err := b.conn.e.run(b.ctx, b.conn.db, b.conn.settings, q, "TabSeparated"); err != nil {
		return fmt.Errorf("chdb: insert %d rows into %s: %w", len(b.rows), b.table, err)
	}
	b.rows = nil
	return nil
}

// Send inserts the buffered rows (nothing when there are none) and closes
// the batch.
func (b *Batch) Send() error {
	if err := b.Flush(); err != nil {
		b.sent = true
		return err
	}
	b.sent = true
	return nil
}

// Abort drops the buffered rows and closes the batch.
func (b *Batch) Abort() error {
	if b.sent {
		return ErrBatchSent
	}
	b.rows, b.sent = nil, true
	return nil
}

// Close is Abort without the error of a batch already sent.
func (b *Batch) Close() error {
	b.rows, b.sent = nil, true
	return nil
}

// IsSent reports whether Send, Abort or Close ended the batch.
func (b *Batch) IsSent() bool { return b.sent }

// Rows is the number of rows appended.
func (b *Batch) Rows() int { return b.n }

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = quoteIdent(n)
	}
	return out
}

var intBits = map[string]int{"8": 8, "16": 16, "32": 32, "64": 64}

// typedLiteral is v as a literal for a column of ClickHouse type typ.
func typedLiteral(v any, typ string, loc *time.Location) (string, error) {
	t := baseType(typ)
	rv := reflect.ValueOf(v)
	if v == nil || (rv.Kind() == reflect.Pointer && rv.IsNil()) {
		if !strings.Contains(typ, "Nullable(") {
			return "", fmt.Errorf("NULL for a column that is not Nullable")
		}
		return "NULL", nil
	}
	if rv.Kind() == reflect.Pointer {
		return typedLiteral(rv.Elem().Interface(), typ, loc)
	}
	switch {
	case t == "String" || strings.HasPrefix(t, "FixedString("):
		switch x := v.(type) {
		case string:
			return quoteString(x), nil
		case []byte:
			return quoteString(string(x)), nil
		}
		if rv.Kind() == reflect.String {
			return quoteString(rv.String()), nil
		}
	case t == "Date" || t == "Date32":
		switch x := v.(type) {
		case time.Time:
			return quoteString(x.UTC().Format("2006-01-02")), nil
		case string:
			return quoteString(x), nil
		}
	case strings.HasPrefix(t, "DateTime"):
		switch x := v.(type) {
		case time.Time:
			layout := dateTimeLayout
			if strings.HasPrefix(t, "DateTime64") {
				layout += ".999999999"
			}
			return quoteString(x.In(loc).Format(layout)), nil
		case string:
			return quoteString(x), nil
		}
	case strings.HasPrefix(t, "Int") || strings.HasPrefix(t, "UInt"):
		unsigned := strings.HasPrefix(t, "U")
		bits, ok := intBits[strings.TrimPrefix(strings.TrimPrefix(t, "U"), "Int")]
		if !ok {
			return Literal(v) // Int128, Int256, …
		}
		switch rv.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			x := rv.Int()
			if unsigned && (x < 0 || (bits < 64 && x > int64(uint64(1)<<bits-1))) ||
				!unsigned && bits < 64 && (x < -(int64(1)<<(bits-1)) || x > int64(1)<<(bits-1)-1) {
				return "", fmt.Errorf("%d is out of range", x)
			}
			return strconv.FormatInt(x, 10), nil
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			x := rv.Uint()
			if unsigned && bits < 64 && x > uint64(1)<<bits-1 || !unsigned && x > uint64(1)<<(bits-1)-1 {
				return "", fmt.Errorf("%d is out of range", x)
			}
			return strconv.FormatUint(x, 10), nil
		case reflect.Bool:
			return Literal(v)
		}
	case strings.HasPrefix(t, "Float"):
		switch rv.Kind() {
		case reflect.Float32, reflect.Float64:
			return floatLiteral(rv.Float(), rv.Type().Bits()), nil
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			return Literal(v)
		}
	case t == "Bool":
		if rv.Kind() == reflect.Bool {
			return Literal(v)
		}
	default: // Array, Tuple, Decimal, UUID, …: the generic literal
		return Literal(v)
	}
	return "", fmt.Errorf("converting %T to %s is unsupported", v, typ)
}
