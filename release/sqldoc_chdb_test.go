//go:build chdb

package release

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSQLCookbookChDB is TestSQLCookbook on the current ClickHouse engine
// (chDB 26.7, default settings): the same sample, written through the
// same Writer (OpenConn on the engine's connection) into database
// crowdlog, and every sql block of docs/sql.md run in crowdlog_analyst,
// whose rows must equal those computed from the sample (recipeRows, equal
// to each block's tsv block). Unlike the 18.16 test, the analyst database
// exists before the sample is written, so its rows reach the copies
// through the publish_* materialized views rather than the backfill. chDB
// has no users: the blocks run as the session's only user, not as a
// read-only analyst (that part is tested on 18.16).
func TestSQLCookbookChDB(t *testing.T) {
	blocks := cookbookBlocks(t)
	e := chdbEngine(t)
	if !strings.HasPrefix(e.Version(), "26.") {
		t.Fatalf("chDB %s, want the 26.x engine of scripts/chdb-lib.sh", e.Version())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, adb := DefaultDatabase, AnalystDatabase(DefaultDatabase)
	drop := func() {
		if _, err := e.QueryTSV("", "DROP DATABASE IF EXISTS "+adb+"; DROP DATABASE IF EXISTS "+db); err != nil {
			t.Error(err)
		}
	}
	drop()
	t.Cleanup(drop)
	if _, err := e.QueryTSV("", "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	w, err := OpenConn(ctx, e.Conn(db), db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.Server().LowCardinality {
		t.Errorf("chDB %s: Probe says no LowCardinality; the cookbook should run on the schema current servers get", e.Version())
	}
	if _, err := OpenAnalystDatabaseConn(ctx, e.Conn(""), e.Conn(adb), db); err != nil {
		t.Fatal(err)
	}
	writeSampleWith(t, ctx, w, sample())
	engine := "chDB " + e.Version()
	n := checkRecipes(t, engine, blocks, func(sql string) (string, error) { return e.QueryTSV(adb, sql) })
	t.Logf("%s: %d of %d recipes returned the rows computed from the sample", engine, n, len(blocks))
}

// TestEpochRangesChDB is TestEpochRanges on chDB 26.7 (LowCardinality
// schema, as Open picks there).
func TestEpochRangesChDB(t *testing.T) {
	e := chdbEngine(t)
	db := chdbDatabase(t, e, "epochs")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := OpenConn(ctx, e.Conn(db), db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	engine := "chDB " + e.Version()
	n, ranged := checkEpochRanges(t, ctx, engine, w)
	if !t.Failed() {
		t.Logf("%s: %d epoch names, %d with a range, all as computed in Go", engine, n, ranged)
	}
}
