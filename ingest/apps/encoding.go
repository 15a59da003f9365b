package apps

import (
	"errors"
	"strings"
)

// Sep is the separator between the fields of a composite artifact
// (reformulation "q1 → q2", click "query → url", ltr
// "query → url → feature → bucket"): a space, U+2192 RIGHTWARDS ARROW, a
// space. It keeps released items readable for analysts (CrowdLogging §3.3
// writes reformulations as "dog → puppy").
const Sep = " → "

// Field escapes inside composite artifacts. After EscapeField a field holds
// no U+2192 at all, so splitting on Sep is unambiguous whatever the fields
// contain (spaces, tabs, other arrows). Only two sequences are escaped, in
// the JSON-like spelling analysts recognize:
//
//	"\" (U+005C) → `\u005c`
//	"→" (U+2192) → `\u2192`
//
// Decoding is also correct as two plain replace-alls, `\u2192` → "→" first,
// then `\u005c` → "\" (what the ClickHouse views in release/views.sql do),
// because neither escape contains a backslash after its first byte.
const (
	escBackslash = `\u005c`
	escArrow     = `\u2192`
)

var (
	fieldEscaper   = strings.NewReplacer(`\`, escBackslash, "→", escArrow)
	fieldUnescaper = strings.NewReplacer(escArrow, "→", escBackslash, `\`)
)

// EscapeField returns s with "\" written as `\u005c` and "→" as `\u2192`,
// so that the result contains no U+2192 and can be joined with Sep.
func EscapeField(s string) string {
	if !strings.ContainsAny(s, `\→`) {
		return s
	}
	return fieldEscaper.Replace(s)
}

// UnescapeField inverts EscapeField. Errors: s contains a raw "→" (it was not
// produced by EscapeField) or a backslash that does not start `\u005c` or
// `\u2192`.
func UnescapeField(s string) (string, error) {
	if !strings.ContainsAny(s, `\→`) {
		return s, nil
	}
	if strings.Contains(s, "→") {
		return "", errors.New("pipelines: artifact field holds an unescaped U+2192")
	}
	for i := strings.IndexByte(s, '\\'); i >= 0; {
		rest := s[i:]
		if !strings.HasPrefix(rest, escBackslash) && !strings.HasPrefix(rest, escArrow) {
			return "", errors.New(`pipelines: artifact field holds a backslash that starts neither \u005c nor \u2192`)
		}
		j := strings.IndexByte(rest[1:], '\\')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return fieldUnescaper.Replace(s), nil
}

// Join escapes every field with EscapeField and joins them with Sep:
// Join("dog", "puppy") == "dog → puppy". It is the encoding of every
// composite artifact (docs/applications.md).
func Join(fields ...string) string {
	esc := make([]string, len(fields))
	for i, f := range fields {
		esc[i] = EscapeField(f)
	}
	return strings.Join(esc, Sep)
}

// Split decodes a composite artifact made by Join into its fields
// (Split(Join(f...)) == f for any fields, f non-empty). It is applied to
// released items, which arrive from the network: errors when want > 0 and
// the number of fields differs from want, or when a field is not a valid
// EscapeField output.
func Split(item string, want int) ([]string, error) {
	parts := strings.Split(item, Sep)
	if want > 0 && len(parts) != want {
		return nil, errors.New("pipelines: artifact has the wrong number of fields")
	}
	for i, p := range parts {
		u, err := UnescapeField(p)
		if err != nil {
			return nil, err
		}
		parts[i] = u
	}
	return parts, nil
}
