//go:build chdb

package release

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse/chdb"
)

// chdbEngine returns the process's chDB session (infra/clickhouse/chdb).
func chdbEngine(t *testing.T) *chdb.Engine {
	t.Helper()
	e, err := chdb.Open()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// chdbDatabase creates a fresh database (and names its analyst database)
// on the chDB session; both are dropped after the test.
func chdbDatabase(t *testing.T, e *chdb.Engine, prefix string) string {
	t.Helper()
	db := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	if _, err := e.QueryTSV("", "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.QueryTSV("", "DROP DATABASE IF EXISTS "+AnalystDatabase(db)+"; DROP DATABASE IF EXISTS "+db)
	})
	return db
}

// TestStatementsChDB runs the statement workload (engines_test.go) on
// chDB, the current ClickHouse engine, with its default settings except
// mutations_sync = 0 (a server's default, so that the writer's
// system.mutations poll runs), once with the schema as written and once
// with the LowCardinality columns Open picks on current servers.
func TestStatementsChDB(t *testing.T) {
	e := chdbEngine(t)
	if !strings.HasPrefix(e.Version(), "26.") {
		t.Fatalf("chDB %s, want the 26.x engine of scripts/chdb-lib.sh", e.Version())
	}
	for _, lc := range []bool{false, true} {
		t.Run(fmt.Sprintf("LowCardinality=%v", lc), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			db := chdbDatabase(t, e, "stmts")
			async := map[string]string{"mutations_sync": "0"}
			ec := engineConns{conn: e.ConnWith(db, async), admin: e.ConnWith("", async),
				views: e.ConnWith(AnalystDatabase(db), async), db: db, lowCardinality: lc}
			name := fmt.Sprintf("chDB %s (LowCardinality %v)", e.Version(), lc)
			sc := runStatements(t, ctx, name, ec)
			sc.log(t, name)
		})
	}
}
