//go:build chdb

package chdb

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Bind replaces each positional "?" of query, outside quoted strings,
// quoted identifiers and comments, by the literal of the next arg
// (Literal), as clickhouse-go binds positional arguments client-side.
// Errors when the number of "?" and of args differ or an arg has no
// literal.
func Bind(query string, args ...any) (string, error) {
	if len(args) == 0 {
		return query, nil
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			j := skipQuoted(query, i)
			b.WriteString(query[i:j])
			i = j - 1
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			j := strings.IndexByte(query[i:], '\n')
			if j < 0 {
				j = len(query) - i
			}
			b.WriteString(query[i : i+j])
			i += j - 1
		case c == '/' && i+1 < len(query) && query[i+1] == '*':
			j := strings.Index(query[i+2:], "*/")
			end := len(query)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			b.WriteString(query[i:end])
			i = end - 1
		case c == '?':
			if n >= len(args) {
				return "", fmt.Errorf("chdb: %.80s: more ? than the %d arguments", query, len(args))
			}
			lit, err := Literal(args[n])
			if err != nil {
				return "", fmt.Errorf("chdb: argument %d of %.80s: %w", n+1, query, err)
			}
			if strings.HasSuffix(b.String(), "-") { // a-? must not become a comment
				b.WriteByte(' ')
			}
			b.WriteString(lit)
			n++
		default:
			b.WriteByte(c)
		}
	}
	if n != len(args) {
		return "", fmt.Errorf("chdb: %.80s: %d ? for %d arguments", query, n, len(args))
	}
	return b.String(), nil
}

// skipQuoted returns the index just past the quoted token starting at
// query[i] (its quote character, doubled or backslash-escaped inside).
func skipQuoted(query string, i int) int {
	q := query[i]
	for j := i + 1; j < len(query); j++ {
		switch query[j] {
		case '\\':
			j++
		case q:
			if j+1 < len(query) && query[j+1] == q {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(query)
}

// quoteString is s as a ClickHouse string literal: quote and backslash
// escaped, control bytes (NUL included: the query travels as a C string)
// as \xHH; other bytes, valid UTF-8 or not, as they are.
func quoteString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\x%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// quoteIdent is name as a backquoted identifier.
func quoteIdent(name string) string {
	return "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`").Replace(name) + "`"
}

// dateTimeLayout is how ClickHouse prints and parses a DateTime.
const dateTimeLayout = "2006-01-02 15:04:05"

// Literal is v as a ClickHouse literal: nil → NULL; strings and []byte →
// quoted strings (binary-safe); integers, floats (nan, inf, -inf) and bool
// (1, 0) as numbers; time.Time → toDateTime('YYYY-MM-DD hh:mm:ss', 'UTC')
// (second precision); slices and arrays → [a, b, …]; pointers → what they
// point to (nil → NULL). Other types are an error.
func Literal(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "NULL", nil
	case string:
		return quoteString(x), nil
	case []byte:
		return quoteString(string(x)), nil
	case time.Time:
		return "toDateTime(" + quoteString(x.UTC().Format(dateTimeLayout)) + ", 'UTC')", nil
	case bool:
		if x {
			return "1", nil
		}
		return "0", nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return quoteString(rv.String()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), nil
	case reflect.Float32, reflect.Float64:
		return floatLiteral(rv.Float(), rv.Type().Bits()), nil
	case reflect.Bool:
		return Literal(rv.Bool())
	case reflect.Pointer:
		if rv.IsNil() {
			return "NULL", nil
		}
		return Literal(rv.Elem().Interface())
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8 {
			return quoteString(string(rv.Bytes())), nil
		}
		parts := make([]string, rv.Len())
		for i := range parts {
			p, err := Literal(rv.Index(i).Interface())
			if err != nil {
				return "", err
			}
			parts[i] = p
		}
		return "[" + strings.Join(parts, ", ") + "]", nil
	}
	return "", fmt.Errorf("no ClickHouse literal for a %T", v)
}

func floatLiteral(f float64, bits int) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}
