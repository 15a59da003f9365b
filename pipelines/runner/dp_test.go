package runner

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// TestRunDPu runs `crowdlog run --policy dp-u` (d = 3) on the bundled log
// through real NATS, kfake and ClickHouse and checks: every released item
// is among the users' d most recent distinct queries with ≥ k_shamir users
// (raw-log truth), released counts are non-negative integers with users =
// impressions, the ledger row records the achieved (ε, δ), and a second
// release over the budget is refused before ingesting.
func TestRunDPu(t *testing.T) {
	needClickHouse(t)
	dir := t.TempDir()
	input := bundled // 1,000 users, at most d = 3 reports each
	out := filepath.Join(dir, "dp.tsv")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ch, err := clickhouse.Start(ctx, filepath.Join(dir, "ch"))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Stop()
	dp := policy.Params{Epsilon: 10, D: 3, ShamirK: 2}
	cfg := Config{Input: input, App: "query", Policy: "dp-u", DP: dp, Export: out, Dataset: "test",
		Budget: release.Budget{Epsilon: 15}, StateDir: filepath.Join(dir, "state"), Partitions: 2,
		ClickHouse: ch.TCPAddr, Database: "dptest"}
	sum, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := ResolvePolicy("dp-u", 5, dp, input)
	if err != nil {
		t.Fatal(err)
	}
	limited, err := truth.RecentDistinctUsers(input, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := truth.ReadExport(out)
	if err != nil {
		t.Fatal(err)
	}
	for item, row := range got {
		if limited[item] < pol.ShamirK {
			t.Fatalf("released an item with %d < k_shamir=%d users among the limited data", limited[item], pol.ShamirK)
		}
		if row.Users != row.Impressions || row.Users < 0 {
			t.Fatalf("released counts %d/%d", row.Impressions, row.Users)
		}
	}
	t.Logf("%s; sent %d reports, %d items released", pol, sum.Sent, len(got))
	if sum.Sent > int64(3*1000) {
		t.Fatalf("clients sent %d reports, more than d=3 per user", sum.Sent)
	}

	w, err := release.Open(ctx, ch.TCPAddr, "dptest")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rows, err := w.Ledger(ctx, "test", "all")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Policy != "dp-u" || rows[0].K != pol.ShamirK || rows[0].App != "query" ||
		math.Abs(rows[0].Epsilon-pol.AchievedEpsilon) > 1e-9 || math.Abs(rows[0].Delta-pol.AchievedDelta) > 1e-12 {
		t.Fatalf("ledger %+v, want one dp-u row spending (%v, %v)", rows, pol.AchievedEpsilon, pol.AchievedDelta)
	}
	// the same epoch again, another app: over the ε budget of 15, refused before ingest
	cfg.App, cfg.Export, cfg.StateDir = "keyword", "", filepath.Join(dir, "state2")
	if _, err := Run(ctx, cfg); !errors.Is(err, release.ErrOverBudget) {
		t.Fatalf("second DP release in the epoch: err %v, want ErrOverBudget", err)
	}
	if rows, _ := w.Ledger(ctx, "test", "all"); len(rows) != 1 {
		t.Fatalf("refused release spent: ledger has %d rows", len(rows))
	}
}
