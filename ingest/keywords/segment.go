package keywords

import (
	"github.com/rivo/uniseg"
)

// Boundaries returns the word boundaries of s (Unicode Standard Annex #29,
// "Unicode Text Segmentation", §4 word boundaries, as implemented by
// github.com/rivo/uniseg for Unicode 15.0): the byte offsets, ascending,
// at which a word segment begins, and len(s). 0 and len(s) are always
// boundaries (an empty s has the single boundary 0).
//
// Words of scripts written with spaces come out whole ("new-york" has
// boundaries 0, 3, 4, 8; "don't" and "yahoo.com" are one segment each).
// Scripts written without spaces get a boundary around every ideograph
// (Han), every Hiragana and every Thai letter (rule WB999), while a run of
// Katakana stays one segment (WB13).
func Boundaries(s string) []int {
	out := make([]int, 1, len(s)/2+2)
	rest, state, at := s, -1, 0
	for len(rest) > 0 {
		var w string
		w, rest, state = uniseg.FirstWordInString(rest, state)
		at += len(w)
		out = append(out, at)
	}
	return out
}

// Match returns the indices ℓ of the monitored keywords that occur in the
// normalized query q, each once, in order of their first occurrence (by
// start offset, then by length).
//
// A keyword occurs in q when it is a substring of q that begins and ends at
// word boundaries of q (Boundaries, UAX #29). In scripts written with spaces
// this is whole-word matching: "flu" occurs in "flu shots", "bird-flu" and
// "(flu)", not in "influenza" or "flu.com". In scripts written without
// spaces every ideograph is bounded, so this is dictionary matching: every
// occurrence of a keyword as a substring of the run counts, overlapping and
// nested ones included. With the keywords 北京, 京大, 大学 and 北京大学,
// the query "北京大学" contains all four; "去北京" contains 北京; "北京北京"
// contains 北京 (once: an instance counts a keyword once, however often it
// occurs). A keyword mixing scripts matches where both ends fall on
// boundaries: "mp3下载" occurs in "免费mp3下载".
func (l *List) Match(q string) []int {
	b := Boundaries(q)
	var out []int
	for i, start := range b {
		for _, end := range b[i+1:] {
			if end-start > l.maxBytes {
				break
			}
			k, ok := l.index[q[start:end]]
			if !ok {
				continue
			}
			dup := false
			for _, o := range out {
				if o == k {
					dup = true
					break
				}
			}
			if !dup {
				out = append(out, k)
			}
		}
	}
	return out
}
