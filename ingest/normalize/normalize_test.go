package normalize

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestQuery(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
		ok   bool
	}{
		{"plain", "weather boston", "weather boston", true},
		{"upper ascii", "Weather BOSTON", "weather boston", true},
		{"trim", "  weather  ", "weather", true},
		{"collapse spaces", "new   york\t\tcity", "new york city", true},
		{"tabs and newlines", "\tnew\nyork\r\n", "new york", true},
		{"nbsp", "new\u00a0york", "new york", true},
		{"nbsp run", "new\u00a0 \u00a0york", "new york", true},
		{"ideographic space", "東京\u3000タワー", "東京 タワー", true},
		{"em space and line separator", "a\u2003b\u2028c", "a b c", true},
		{"next line U+0085", "a\u0085b", "a b", true},
		{"full-width latin", "ＧＯＯＧＬＥ　Ｍａｐｓ", "google maps", true},
		{"full-width digits", "ｉｐｈｏｎｅ　５", "iphone 5", true},
		{"half-width katakana", "ｶﾀｶﾅ", "カタカナ", true},
		{"ligature fi", "ﬁnd ﬂights", "find flights", true},
		{"ligature ffl", "waﬄe", "waffle", true},
		{"superscript", "x²", "x2", true},
		{"roman numeral", "Ⅻ", "xii", true},
		{"circled", "①", "1", true},
		{"decomposed accent", "cafe\u0301", "café", true},
		{"precomposed accent", "CAFÉ", "café", true},
		{"greek", "ΣΟΦΙΑ", "σοφια", true},
		{"kelvin sign", "\u212a", "k", true},
		{"ohm sign", "\u2126", "ω", true},
		{"dotted capital I simple mapping", "İstanbul", "istanbul", true},
		{"sharp s not folded", "STRAßE", "straße", true},
		{"zero width space kept", "a\u200bb", "a\u200bb", true},
		{"invalid utf8", "a\xffb", "a\ufffdb", true},
		{"empty", "", "", false},
		{"only spaces", " \t\u00a0\u3000 ", "", false},
		{"placeholder", "-", "", false},
		{"placeholder padded", "  -\t", "", false},
		{"full-width hyphen-minus is placeholder", "－", "", false},
		{"double dash kept", "--", "--", true},
		{"dash word", "- news", "- news", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Query(tc.in)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Query(%q) = (%q, %v), want (%q, %v)", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// checkInvariants asserts the properties every output of Query must have.
func checkInvariants(t *testing.T, in string) {
	t.Helper()
	got, ok := Query(in)
	if !utf8.ValidString(got) {
		t.Fatalf("Query(%q) = %q: invalid UTF-8", in, got)
	}
	if ok != (got != "") {
		t.Fatalf("Query(%q) = (%q, %v): ok must equal non-empty", in, got, ok)
	}
	if !ok {
		return
	}
	if got == Placeholder {
		t.Fatalf("Query(%q) kept the placeholder", in)
	}
	if strings.HasPrefix(got, " ") || strings.HasSuffix(got, " ") || strings.Contains(got, "  ") {
		t.Fatalf("Query(%q) = %q: leading, trailing or double space", in, got)
	}
	if strings.TrimSpace(got) != got {
		t.Fatalf("Query(%q) = %q: untrimmed Unicode white space", in, got)
	}
	for _, r := range got {
		if r != ' ' && strings.ContainsRune(" \t\n\v\f\r\u0085\u00a0\u2028\u2029\u3000", r) {
			t.Fatalf("Query(%q) = %q: contains white space %U", in, got, r)
		}
	}
	again, ok2 := Query(got)
	if again != got || !ok2 {
		t.Fatalf("not idempotent: Query(%q) = %q, Query(%q) = (%q, %v)", in, got, got, again, ok2)
	}
}

func TestQueryInvariantsOnTable(t *testing.T) {
	for _, s := range []string{"", "-", " - ", "ＡＢＣ", "ﬁ", "a\u00a0\u00a0b", "\u0301", " \u0301x", "e\t\u0301", "\xc0\x80", "ǅ", "ﬀ", "Å"} {
		checkInvariants(t, s)
	}
}

func FuzzQuery(f *testing.F) {
	for _, s := range []string{
		"", "-", "weather boston", "  Weather\tBOSTON  ", "ＧＯＯＧＬＥ　Ｍａｐｓ", "ﬁnd ﬂights",
		"new\u00a0york", "cafe\u0301", "İstanbul", "a\xffb", "\u3000-\u3000", "ǅ\u0345\u0301", "ΣΟΦΙΑ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkInvariants(t, s)
	})
}

func BenchmarkQuery(b *testing.B) {
	in := "  Cheap Flights to NEW\u00a0York  city "
	for b.Loop() {
		Query(in)
	}
}
