//go:build chdb

package prio3

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse/chdb"
	"github.com/crowdlog/crowdlog/release"
)

// TestStageIntoChDB runs testStage on chDB, the current ClickHouse engine
// (26.x), with a server's mutations_sync = 0.
func TestStageIntoChDB(t *testing.T) {
	e, err := chdb.Open()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := fmt.Sprintf("prio3_%d", time.Now().UnixNano())
	if _, err := e.QueryTSV("", "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.QueryTSV("", "DROP DATABASE IF EXISTS "+release.AnalystDatabase(db)+"; DROP DATABASE IF EXISTS "+db)
	})
	w, err := release.OpenConn(ctx, e.ConnWith(db, map[string]string{"mutations_sync": "0"}), db)
	if err != nil {
		t.Fatal(err)
	}
	testStage(t, w)
}
