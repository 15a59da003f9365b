package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// writeSubset writes the first n users of the bundled log to a gzip file in
// dir and returns its path.
func writeSubset(t *testing.T, dir string, n int) string {
	t.Helper()
	path, err := truth.Subset(bundled, dir, n)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAppsEndToEnd runs every mining application besides query (covered by
// TestRunEndToEnd) under FT_u and FT_a through embedded NATS, kfake and one
// shared real ClickHouse server (a database per subtest), and compares each
// export item by item with tests/truth's release computed straight from
// the raw log. User counts per app keep each run near 15-30k reports, so the
// whole test stays within a few minutes on 2 cores. Some cases use
// non-default options to check that they reach the clients. What each case
// checks is its app's mining and release, so tokens are on in two cases
// only (one FT_u with ARC presentations, one FT_a with report tokens): a
// token names no app, and TestRunTokens and TestRunEndToEnd run tokens on
// the query app.
func TestAppsEndToEnd(t *testing.T) {
	needClickHouse(t)
	if testing.Short() {
		t.Skip("end-to-end runs in -short mode")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ch := startClickHouse(ctx, t, dir)
	defer ch.Stop()
	gap := 10 * time.Minute
	ltrB := apps.Buckets{Rank: []int{1, 3}, Dwell: []time.Duration{time.Minute, time.Hour}, Length: []int{2}}
	cases := []struct {
		app    string
		users  int
		policy string
		k      int
		o      apps.Options
		to     truth.Options
		tokens bool // tokens on (report tokens; ARC under FT_u)
	}{
		{"reformulation", 150, "ft-u", 2, apps.Options{}, truth.Options{}, true},
		{"reformulation", 150, "ft-a", 3, apps.Options{SessionGap: gap}, truth.Options{SessionGap: gap}, false},
		{"click", 60, "ft-u", 2, apps.Options{}, truth.Options{}, false},
		{"click", 60, "ft-a", 3, apps.Options{URLLevel: "full"}, truth.Options{URLLevel: "full"}, true},
		{"url", 40, "ft-u", 2, apps.Options{URLLevel: "dir"}, truth.Options{URLLevel: "dir"}, false},
		{"url", 40, "ft-a", 3, apps.Options{}, truth.Options{}, false},
		{"ltr", 25, "ft-u", 2, apps.Options{}, truth.Options{}, false},
		{"ltr", 25, "ft-a", 3, apps.Options{Buckets: ltrB},
			truth.Options{RankBuckets: ltrB.Rank, DwellBuckets: ltrB.Dwell, LengthBuckets: ltrB.Length}, false},
		{"keyword", 30, "ft-u", 2, apps.Options{}, truth.Options{}, false},
		{"keyword", 30, "ft-a", 3, apps.Options{}, truth.Options{}, false},
	}
	subsets := map[int]string{}
	for i, c := range cases {
		t.Run(c.app+"/"+c.policy, func(t *testing.T) {
			input := subsets[c.users]
			if input == "" {
				input = writeSubset(t, dir, c.users)
				subsets[c.users] = input
			}
			sub := t.TempDir()
			out := filepath.Join(sub, "out.tsv")
			t0 := time.Now()
			sum, err := Run(ctx, Config{Input: input, App: c.app, AppOptions: c.o, Policy: c.policy, K: c.k,
				TokensOff: !c.tokens, Export: out, StateDir: filepath.Join(sub, "state"), Partitions: 4,
				ClickHouse: ch.TCPAddr, Database: fmt.Sprintf("apps_%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			want, err := truth.AppRelease(input, c.app, c.policy, c.k, 0, c.to)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := truth.ReadExport(out)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %s k=%d, %d users: %d reports sent, %d decrypted (relays dropped %d %v, aggregator dropped %d); %d items expected, %d released, %s",
				c.app, c.policy, c.k, c.users, sum.Sent, sum.Decrypted, sum.RelayDropped, sum.RelayDrops, sum.AggregatorDropped,
				len(want), len(got), time.Since(t0).Round(time.Second))
			if len(want) == 0 {
				t.Fatal("the raw-log release is empty: the case tests nothing")
			}
			if d := truth.Diff(want, got, 10); len(d) > 0 {
				t.Fatalf("export differs from the raw-log release (%d vs %d items):\n%v", len(got), len(want), d)
			}
		})
	}
}
