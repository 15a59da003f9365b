//go:build chdb

package release

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSQLDocsChDB is TestSQLDocs on the current ClickHouse engine (chDB
// 26.7, default settings): docsSample written through the Writer into
// database crowdlog, the analyst database made before (its rows arrive
// through the publish_* materialized views), and every sql block of docs/
// outside docs/sql.md run in crowdlog_analyst, including those marked
// "not on 18.16". chDB has no users: the blocks run as the session's only
// user (the read-only analyst is tested on 18.16).
func TestSQLDocsChDB(t *testing.T) {
	blocks := docsSQLBlocks(t)
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
	if _, err := OpenAnalystDatabaseConn(ctx, e.Conn(""), e.Conn(adb), db); err != nil {
		t.Fatal(err)
	}
	writeSampleWith(t, ctx, w, docsSample())
	engine := "chDB " + e.Version()
	n := checkDocsBlocks(t, engine, false, blocks, func(sql string) (string, error) { return e.QueryTSV(adb, sql) })
	t.Logf("%s: %d of %d sql blocks outside docs/sql.md returned rows", engine, n, len(blocks))
}
