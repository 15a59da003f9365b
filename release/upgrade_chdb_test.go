//go:build chdb

package release

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestUpgradeViewsChDB runs the upgrade of an earlier crowdlog's database
// (runUpgrade) on chDB, the current ClickHouse engine: the earlier texts
// are created and written through with the settings they need there
// (joined_subquery_requires_alias = 0, allow_suspicious_low_cardinality_types
// = 1), as a database created on an older server and carried over holds
// them; Open, the reads and a release written before the upgrade with
// the engine's default settings (whose publish_* views fail) run with the
// engine's default settings.
func TestUpgradeViewsChDB(t *testing.T) {
	e := chdbEngine(t)
	if !strings.HasPrefix(e.Version(), "26.") {
		t.Fatalf("chDB %s, want the 26.x engine of scripts/chdb-lib.sh", e.Version())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := chdbDatabase(t, e, "upg")
	if _, err := e.QueryTSV("", "CREATE DATABASE "+AnalystDatabase(db)); err != nil {
		t.Fatal(err)
	}
	old := map[string]string{"joined_subquery_requires_alias": "0", "allow_suspicious_low_cardinality_types": "1"}
	runUpgrade(t, ctx, upgradeEnv{engine: "chDB " + e.Version(), db: db,
		conn: e.Conn(db), views: e.Conn(AnalystDatabase(db)), admin: e.Conn(""),
		oldConn: e.ConnWith(db, old), oldViews: e.ConnWith(AnalystDatabase(db), old), oldAdmin: e.ConnWith("", old),
		oldMVsFail: true})
}
