package runner

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/tests/truth"
)

const bundled = "../../testdata/aol-top1000.tsv.gz"

func needClickHouse(t *testing.T) {
	t.Helper()
	if _, err := clickhouse.ServerBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ClickHouse is required in CI: %v", err)
		}
		t.Skipf("no ClickHouse: %v", err)
	}
}

// startClickHouse starts a ClickHouse server in dir/clickhouse for a test
// (the caller stops it), failing the test when it cannot.
func startClickHouse(ctx context.Context, t *testing.T, dir string) *clickhouse.Server {
	t.Helper()
	ch, err := clickhouse.Start(ctx, filepath.Join(dir, "clickhouse"))
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestRunEndToEnd runs `crowdlog run` in process on the whole bundled log
// through embedded NATS, kfake and a real ClickHouse server, and compares
// the export with the release computed directly from the raw log.
func TestRunEndToEnd(t *testing.T) {
	needClickHouse(t)
	if testing.Short() {
		t.Skip("full-log end-to-end run in -short mode")
	}
	cases := []struct {
		policy    string
		k         int
		maxUsers  int
		tokensOff bool
	}{
		// The whole bundled log: 899 items. Tokens off: the release is
		// what these cases check; tokens and ARC on every report cost
		// about 3 ms of issuer and aggregator CPU per report (240,000
		// reports: 10 of the suite's minutes on 2 cores), so FT_u and
		// FT_a with tokens run in TestRunTokens on the first users, and
		// the whole log with tokens in `make demo` and `make bench-bounds`
		// (which compares its export with the tokens-off one).
		{"ft-u", 5, 0, true},
		{"ft-a", 10, 0, true},
	}
	for _, c := range cases {
		t.Run(c.policy, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out.tsv")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			defer cancel()
			sum, err := Run(ctx, Config{Input: bundled, App: "query", Policy: c.policy, K: c.k,
				Export: out, StateDir: filepath.Join(dir, "state"), Partitions: 4, TokensOff: c.tokensOff})
			if err != nil {
				t.Fatal(err)
			}
			want, err := truth.Release(bundled, c.policy, c.k, c.maxUsers)
			if err != nil {
				t.Fatal(err)
			}
			got, header, err := truth.ReadExport(out)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s k=%d: %d items expected, %d released; header %v; sent %d decrypted %d dropped %d",
				c.policy, c.k, len(want), len(got), header, sum.Sent, sum.Decrypted, sum.AggregatorDropped)
			if d := truth.Diff(want, got, 10); len(d) > 0 {
				t.Fatalf("export differs from the raw-log release (%d vs %d items):\n%v", len(got), len(want), d)
			}
			if c.policy == "ft-u" && c.k == 5 && len(got) != 899 {
				t.Fatalf("ft-u k=5 released %d items, want 899", len(got))
			}
		})
	}
}
