package apps

import "testing"

func TestMeaning(t *testing.T) {
	for _, c := range []struct {
		app  App
		want string
	}{
		{QueryApp{}, ""},
		{ClickApp{}, "url-level=domain"},
		{ClickApp{Level: URLFull}, "url-level=full"},
		{URLApp{Level: URLDir}, "url-level=dir"},
		{ReformulationApp{}, "gap=" + DefaultSessionGap.String() + " order=time"},
		{ReformulationApp{Sorted: true, Gap: DefaultSessionGap}, "gap=" + DefaultSessionGap.String() + " order=sorted"},
	} {
		if got := Meaning(c.app); got != c.want {
			t.Errorf("%s %+v: meaning %q, want %q", c.app.Name(), c.app, got, c.want)
		}
	}
	// defaults written out: nil bucket lists mean the default lists
	if Meaning(LTRApp{}) != Meaning(LTRApp{Level: URLDomain, Buckets: Buckets{Rank: DefaultRankBuckets, Dwell: DefaultDwellBuckets, Length: DefaultLengthBuckets}}) {
		t.Error("LTR defaults and explicit defaults differ in meaning")
	}
	if Meaning(LTRApp{}) == Meaning(LTRApp{Buckets: Buckets{Rank: []int{1, 5}}}) {
		t.Error("other rank buckets have the same meaning")
	}
}
