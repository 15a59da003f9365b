package apps

import (
	"errors"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// TestAppsMatchTruth mines the first truthUsers users of the bundled real log with every app and
// compares each artifact's instances and distinct users with
// tests/truth's independent computation from the raw file (k = 1, so
// every artifact). Only counts are logged. It also checks time order.
func TestAppsMatchTruth(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the 31 MB real log")
	}
	const truthUsers = 300
	var users []aol.User
	stop := errors.New("enough users")
	_, err := aol.ReadUsers(realLog, func(u aol.User) error {
		if len(users) == truthUsers {
			return stop
		}
		users = append(users, u)
		return nil
	})
	if err != nil && !errors.Is(err, stop) {
		t.Fatal(err)
	}
	for _, c := range []struct {
		app string
		o   Options
		to  truth.Options
	}{
		{"query", Options{}, truth.Options{}},
		{"reformulation", Options{}, truth.Options{}},
		{"reformulation", Options{SessionGap: 5 * time.Minute}, truth.Options{SessionGap: 5 * time.Minute}},
		{"reformulation", Options{SessionGap: 10 * time.Minute}, truth.Options{SessionGap: 10 * time.Minute}},
		{"reformulation", Options{PairOrder: PairSorted}, truth.Options{SortedPairs: true}},
		{"click", Options{}, truth.Options{}},
		{"click", Options{URLLevel: URLFull}, truth.Options{URLLevel: "full"}},
		{"url", Options{URLLevel: URLDir}, truth.Options{URLLevel: "dir"}},
		{"ltr", Options{}, truth.Options{}},
		{"ltr", Options{Buckets: Buckets{Rank: []int{2}, Dwell: []time.Duration{time.Second, time.Hour}, Length: []int{1, 5}}},
			truth.Options{RankBuckets: []int{2}, DwellBuckets: []time.Duration{time.Second, time.Hour}, LengthBuckets: []int{1, 5}}},
		{"keyword", Options{}, truth.Options{}},
	} {
		t.Run(c.app, func(t *testing.T) {
			app, err := LookupWith(c.app, c.o)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]truth.Row{}
			n := 0
			for _, u := range users {
				seen := map[string]bool{}
				arts := app.Mine(u.Records)
				for i, a := range arts {
					if i > 0 && a.Time.Before(arts[i-1].Time) {
						t.Fatalf("artifacts out of time order")
					}
					r := got[a.Primary]
					r.Item = a.Primary
					r.Impressions++
					if !seen[a.Primary] {
						seen[a.Primary] = true
						r.Users++
					}
					got[a.Primary] = r
					n++
				}
			}
			want, err := truth.AppRelease(realLog, c.app, "ft-a", 1, truthUsers, c.to)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %+v: %d instances, %d distinct artifacts", c.app, c.o, n, len(got))
			if d := truth.Diff(want, got, 10); len(d) > 0 {
				t.Fatalf("app differs from the raw-log truth (%d vs %d artifacts):\n%v", len(got), len(want), d)
			}
		})
	}
}
