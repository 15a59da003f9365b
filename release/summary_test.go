package release

import (
	"reflect"
	"testing"
)

func TestShapeSummary(t *testing.T) {
	l := func(pol string, reports, users, tags uint64) Undecrypted {
		return Undecrypted{App: "query", Epoch: "e", Policy: pol, K: 5, Reports: reports, Users: users, Tags: tags}
	}
	lines := []Undecrypted{l("ft-u", 1, 1, 10), l("ft-u", 3, 2, 1), l("ft-u", 2, 2, 4), l("ft-u", 7, 4, 1), l("ft-a", 5, 3, 2)}
	if got := ShapeSummary(lines, SummaryExact, nil); len(got) != 5 || got[0].Reports != 7 {
		t.Fatalf("exact: %+v", got)
	}
	want := []Undecrypted{l("ft-u", 4, 4, 1), l("ft-a", 4, 3, 2), l("ft-u", 2, 2, 5), l("ft-u", 1, 1, 10)}
	if got := ShapeSummary(lines, SummaryCoarse, nil); !reflect.DeepEqual(got, want) {
		t.Fatalf("coarse: %+v\nwant %+v", got, want)
	}
	if got := ShapeSummary(lines, SummaryNone, nil); len(got) != 0 {
		t.Fatalf("none: %+v", got)
	}
	dp := func(pol string, _ int) bool { return pol == "ft-a" }
	if got := ShapeSummary(lines, SummaryExact, dp); len(got) != 4 {
		t.Fatalf("withheld ft-a lines still present: %+v", got)
	}
	if m, err := ParseSummaryMode(""); err != nil || m != SummaryCoarse {
		t.Fatal("empty mode is not coarse")
	}
	if _, err := ParseSummaryMode("noisy"); err == nil {
		t.Fatal("unknown mode accepted")
	}
}
