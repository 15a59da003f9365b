// Package normalize implements crowdlog's query normalization N(q)
// ( CrowdLogging, Feild et al. SIGIR 2011, §3.3 "Query
// frequency mining": a normalized form that collapses minor differences such
// as spacing and capitalization). Every client must map the same query to the
// same bytes, or the threshold scheme never sees k identical artifacts.
package normalize

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Placeholder is the AOL log's stand-in for an empty query. Queries that
// normalize to it are dropped.
const Placeholder = "-"

// maxRounds bounds the fixpoint loop in Query. In practice one round reaches
// the fixpoint; a second round only happens for the rare code points whose
// lower-case mapping is not NFKC-stable.
const maxRounds = 4

// Query returns N(s), the normalized form of the raw query s, and whether it
// should be kept:
//
//  1. invalid UTF-8 bytes become U+FFFD, so the result is always valid UTF-8;
//  2. Unicode NFKC (golang.org/x/text/unicode/norm; UAX #15): compatibility
//     forms fold to their plain form, e.g. full-width "ＡＢＣ" → "ABC",
//     the ligature "ﬁ" → "fi", NBSP and ideographic space → " ";
//  3. lower-casing with strings.ToLower, i.e. Unicode simple (1:1) case
//     mapping from UnicodeData.txt — not locale-sensitive (Turkish dotted
//     İ becomes plain "i") and not full case folding ("ß" stays "ß");
//  4. every run of Unicode white space (unicode.IsSpace: ASCII tab/CR/LF/VT/FF,
//     U+0085, U+00A0 and the Zs/Zl/Zp separators) becomes one ASCII space, and
//     leading and trailing white space is removed.
//
// Steps 2–4 repeat until nothing changes (at most a few rounds), which makes
// Query idempotent: Query(Query(s)) == Query(s).
//
// The boolean is false, and the string empty, when the result is empty or is
// the AOL placeholder "-"; such queries are not artifacts.
func Query(s string) (string, bool) {
	s = strings.ToValidUTF8(s, string(utf8.RuneError))
	for range maxRounds {
		n := collapseSpace(strings.ToLower(norm.NFKC.String(s)))
		if n == s {
			break
		}
		s = n
	}
	if s == "" || s == Placeholder {
		return "", false
	}
	return s, true
}

// collapseSpace trims s and replaces every run of Unicode white space with a
// single ASCII space. It returns s itself when s is already in that form.
func collapseSpace(s string) string {
	clean := true
	prevSpace := true // treats the start as a space, so a leading space is unclean
	for _, r := range s {
		sp := unicode.IsSpace(r)
		if sp && (r != ' ' || prevSpace) {
			clean = false
			break
		}
		prevSpace = sp
	}
	if clean && !prevSpace {
		return s
	}
	if clean && s == "" {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	pending := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			pending = b.Len() > 0
			continue
		}
		if pending {
			b.WriteByte(' ')
			pending = false
		}
		b.WriteRune(r)
	}
	return b.String()
}
