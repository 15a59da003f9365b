package apps

import (
	"bufio"
	"compress/gzip"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/normalize"
)

func TestLookup(t *testing.T) {
	app, err := Lookup("query")
	if err != nil {
		t.Fatal(err)
	}
	if app.Name() != "query" {
		t.Errorf("Name() = %q", app.Name())
	}
	_, err = Lookup("nope")
	if err == nil || !strings.Contains(err.Error(), "query") || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Lookup(nope) error = %v; want it to name the unknown and the known apps", err)
	}
	for _, n := range Apps() {
		a, err := Lookup(n)
		if err != nil || a.Name() != n {
			t.Errorf("Lookup(%q) = %v, %v", n, a, err)
		}
	}
}

func TestQueryAppMine(t *testing.T) {
	t0 := time.Date(2006, 3, 1, 10, 0, 0, 0, time.UTC)
	rec := func(q string, minutes int) aol.Record {
		return aol.Record{AnonID: "1", Query: q, QueryTime: t0.Add(time.Duration(minutes) * time.Minute)}
	}
	records := []aol.Record{
		rec("Weather  Boston", 0),
		rec("weather boston", 0),       // same normalized query: same instance (another click)
		rec("WEATHER BOSTON", 60*24),   // a day later, still consecutive: same instance
		rec("-", 60*24+1),              // placeholder: dropped
		rec("weather boston", 60*24+2), // still the same run (the placeholder is not a query)
		rec("ﬂights", 60*24+3),
		rec("   ", 60*24+4),            // empty: dropped
		rec("weather boston", 60*24+5), // after a different query: new instance
		rec("Ｆｌｉｇｈｔｓ", 60*24+6),
		rec("flights", 60*24+7),
	}
	got := QueryApp{}.Mine(records)
	want := []Artifact{
		{Primary: "weather boston", Secondary: "Weather  Boston", Time: records[0].QueryTime},
		{Primary: "flights", Secondary: "ﬂights", Time: records[5].QueryTime},
		{Primary: "weather boston", Secondary: "weather boston", Time: records[7].QueryTime},
		{Primary: "flights", Secondary: "Ｆｌｉｇｈｔｓ", Time: records[8].QueryTime},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d artifacts, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].Primary != want[i].Primary || got[i].Secondary != want[i].Secondary || !got[i].Time.Equal(want[i].Time) {
			t.Errorf("artifact %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if n := len(QueryApp{}.Mine(nil)); n != 0 {
		t.Errorf("Mine(nil) returned %d artifacts", n)
	}
}

const realLog = "../../testdata/aol-top1000.tsv.gz"

// TestQueryAppRealLog mines the bundled real AOL log and compares the
// multiset of primaries with an independent computation straight from the
// gzip file. Only aggregate numbers are asserted or logged.
func TestQueryAppRealLog(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the 31 MB real log")
	}
	app, err := Lookup("query")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	instances, users, secondaryMismatch := 0, 0, 0
	st, err := aol.ReadUsers(realLog, func(u aol.User) error {
		users++
		for _, a := range app.Mine(u.Records) {
			got[a.Primary]++
			instances++
			if n, _ := normalize.Query(a.Secondary); n != a.Primary {
				secondaryMismatch++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Bad != 0 {
		t.Errorf("real log has bad lines: %v", st)
	}
	if secondaryMismatch != 0 {
		t.Errorf("%d artifacts whose Secondary does not normalize to Primary", secondaryMismatch)
	}

	// Independent check: gzip + bufio, split on tab, normalize, collapse
	// consecutive identical normalized queries per user.
	want := map[string]int{}
	f, err := os.Open(realLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var prevUser, prevQuery string
	wantInstances := 0
	for first := true; sc.Scan(); first = false {
		if first {
			continue // header
		}
		fields := strings.Split(sc.Text(), "\t")
		q, ok := normalize.Query(fields[1])
		if !ok {
			continue
		}
		if fields[0] != prevUser || q != prevQuery {
			want[q]++
			wantInstances++
		}
		prevUser, prevQuery = fields[0], q
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	t.Logf("query app on real log: %d users, %d query instances, %d distinct queries (%v)", users, instances, len(got), st)
	if instances != wantInstances || !maps.Equal(got, want) {
		t.Errorf("app: %d instances, %d distinct; independent: %d instances, %d distinct", instances, len(got), wantInstances, len(want))
	}
	// Published in the data README.
	if len(got) != 160852 || users != 1000 {
		t.Errorf("%d distinct normalized queries, %d users; README says 160852 and 1000", len(got), users)
	}
}
