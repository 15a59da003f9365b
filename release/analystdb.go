package release

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The analyst database (docs/decisions.md, "Analysts see views only").
//
// The release database (DefaultDatabase, or the one given to Open) holds
// the raw tables of schema.sql: besides the completed releases they hold
// the rows of a release being written or interrupted, the stored noise
// draws of DP releases (release_draws) and whatever raw table comes next.
// Analysts get no right on it. They read AnalystDatabase(database)
// instead, which holds
//
//   - published copies of the raw tables analysts may see (published
//     below), with the raw table's name and structure: rows of completed
//     releases only (released_items, undecrypted_summary: keys with a
//     releases row; pdd_keyword_counts: days with a pdd_rounds row), and
//     every row of releases, pdd_rounds, pdd_withheld, pdd_campaigns and
//     privacy_ledger;
//   - the materialized views publish_<table> that fill the copies as user
//     default writes the raw tables (triggered by the insert of the
//     completion row: releases, pdd_rounds; or of the row itself);
//   - the analyst views of views.sql, created over the copies.
//
// Copies rather than views over the raw tables because ClickHouse 18.16
// runs a view with the rights of the user who reads it: a view in another
// database that reads the raw tables fails for the analyst with "Access
// denied to database" (TestAttackAnalystRawTables). A raw table that is not
// in published (release_draws, any new one) is never copied.

// AnalystDatabaseSuffix is appended to the release database's name to
// name its analyst database.
const AnalystDatabaseSuffix = "_analyst"

// AnalystDatabase returns the name of the analyst database of the release
// database database: database + AnalystDatabaseSuffix, e.g.
// "crowdlog_analyst" for "crowdlog".
func AnalystDatabase(database string) string { return database + AnalystDatabaseSuffix }

// dbNameRE accepts database names of up to 127 bytes: a release database
// name (identRE, ≤ 63) plus AnalystDatabaseSuffix fits.
var dbNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,126}$`)

// publishedTable is a raw table of schema.sql that analysts may read,
// copied into the analyst database.
type publishedTable struct {
	// name is the table's name in both databases.
	name string
	// columns are the copied columns, in schema.sql's order.
	columns []string
	// key identifies what is published together: with marker, the
	// columns shared with the marker table that name one completed
	// release (or PDD day); without, the columns that identify a row
	// (backfill skips rows already copied).
	key []string
	// marker, when set, is the raw table whose row marks key complete:
	// rows of this table are copied when that row is written, never
	// before. "" copies every row as it is written.
	marker string
	// engine, when set, replaces the raw table's engine in the copy.
	engine string
}

// published lists the raw tables analysts may see through the analyst
// database, in the order their copies are created. Release rows are
// copied when their releases row (or PDD day's pdd_rounds row) is written,
// so an interrupted release never reaches the analyst database.
var published = []publishedTable{
	{name: "releases",
		columns: []string{"app", "epoch", "policy", "k", "items", "impressions", "released_at"},
		key:     []string{"app", "epoch", "policy", "k"}},
	{name: "released_items",
		columns: []string{"app", "epoch", "policy", "k", "item", "variant", "impressions", "users", "released_at"},
		key:     []string{"app", "epoch", "policy", "k"}, marker: "releases"},
	{name: "undecrypted_summary",
		columns: []string{"app", "epoch", "policy", "k", "reports", "users", "tags", "released_at"},
		key:     []string{"app", "epoch", "policy", "k"}, marker: "releases"},
	// The ledger is shown whole (docs/sql.md): a spend counts from the
	// moment it is written. The copy collapses exact duplicates (a row
	// copied by both the backfill and its materialized view while Init
	// runs), which the raw MergeTree would keep.
	{name: "privacy_ledger",
		columns: []string{"dataset", "epoch", "app", "policy", "k", "epsilon", "delta", "params", "spent_at"},
		key:     []string{"dataset", "epoch", "app", "policy", "k", "spent_at"},
		engine:  "ReplacingMergeTree ORDER BY (dataset, epoch, spent_at, app, policy, k, epsilon, delta, params)"},
	{name: "pdd_rounds",
		columns: []string{"campaign", "day", "active", "grouped", "decrypted", "groups", "groups_complete",
			"groups_recovered", "groups_lost", "confidence", "epsilon", "max_count", "released_at"},
		key: []string{"campaign", "day"}},
	{name: "pdd_keyword_counts",
		columns: []string{"campaign", "day", "keyword", "count", "released_at"},
		key:     []string{"campaign", "day"}, marker: "pdd_rounds"},
	{name: "pdd_withheld",
		columns: []string{"campaign", "day", "reason", "detail", "recorded_at"},
		key:     []string{"campaign", "day", "reason"}},
	{name: "pdd_campaigns",
		columns: []string{"campaign", "mode", "epsilon", "sensitivity", "k", "params", "recorded_at"},
		key:     []string{"campaign", "mode", "epsilon", "sensitivity", "k", "params"}},
}

// PublishedTables returns the names of the raw tables copied into the
// analyst database (published rows only), in creation order. Every other
// raw table of the release database stays out of the analysts' reach.
func PublishedTables() []string {
	out := make([]string, len(published))
	for i, p := range published {
		out[i] = p.name
	}
	return out
}

// publishView is the name of the materialized view that fills the copy of
// table in the analyst database.
func publishView(table string) string { return "publish_" + table }

func quote(name string) string { return "`" + name + "`" }

func tuple(cols []string) string { return "(" + strings.Join(cols, ", ") + ")" }

// AnalystDatabaseStatements returns the DDL that creates (if missing) the
// analyst database of the release database database and fills it, to run
// as user default after the release database's schema exists, in order:
// CREATE DATABASE; one copy table per published raw table (CREATE TABLE
// … AS the raw table: same columns, same engine unless published says
// otherwise); one materialized view publish_<table> per copy (TO the
// copy, reading the raw tables); then one INSERT … SELECT per copy that
// backfills what was published before the views existed (rows not yet
// copied). Every statement is qualified (database.table), so it may run
// in a session of any current database, and idempotent: a rerun adds only
// what is missing. The analyst views (ViewStatements) are created
// separately, in a session whose current database is the analyst
// database (Init). Errors for a database name that is not an identifier.
func AnalystDatabaseStatements(database string) ([]string, error) {
	if !identRE.MatchString(database) {
		return nil, fmt.Errorf("release: database name %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes)", database)
	}
	raw, adb := quote(database)+".", quote(AnalystDatabase(database))+"."
	stmts := []string{"CREATE DATABASE IF NOT EXISTS " + quote(AnalystDatabase(database))}
	for _, p := range published {
		s := "CREATE TABLE IF NOT EXISTS " + adb + quote(p.name) + " AS " + raw + quote(p.name)
		if p.engine != "" {
			s += " ENGINE = " + p.engine
		}
		stmts = append(stmts, s)
	}
	for _, p := range published {
		stmts = append(stmts, "CREATE MATERIALIZED VIEW IF NOT EXISTS "+adb+quote(publishView(p.name))+
			" TO "+adb+quote(p.name)+" AS "+publishSelect(p, raw, adb))
	}
	for _, p := range published {
		cols := strings.Join(p.columns, ", ")
		s := "INSERT INTO " + adb + quote(p.name) + " " + tuple(p.columns) + " SELECT " + cols + " FROM " + raw + quote(p.name) + " WHERE "
		if p.marker != "" {
			s += tuple(p.key) + " IN (SELECT " + strings.Join(p.key, ", ") + " FROM " + raw + quote(p.marker) + ") AND "
		}
		s += tuple(p.key) + " NOT IN (SELECT " + strings.Join(p.key, ", ") + " FROM " + adb + quote(p.name) + ")"
		stmts = append(stmts, s)
	}
	return stmts, nil
}

// publishSelect is the SELECT of p's materialized view. Without a marker
// it copies the inserted rows. With one, the view is triggered by inserts
// into the marker table (the completion row, written last) and joins the
// inserted rows with p's raw rows of the same key that are not yet in the
// copy: the completed release's rows, read from the raw table as it is
// then. The raw columns are renamed p_<column> inside the join so that
// none is confused with a marker column of the same name (impressions,
// released_at). The joined subquery is aliased (raw_rows), which current
// ClickHouse requires (joined_subquery_requires_alias) and 18.16 accepts;
// ALL keeps every raw row of the key (the marker block holds one row per
// key).
func publishSelect(p publishedTable, raw, adb string) string {
	if p.marker == "" {
		return "SELECT " + strings.Join(p.columns, ", ") + " FROM " + raw + quote(p.name)
	}
	isKey := map[string]bool{}
	for _, k := range p.key {
		isKey[k] = true
	}
	var outer, inner []string
	for _, c := range p.columns {
		if isKey[c] {
			outer, inner = append(outer, c), append(inner, c)
			continue
		}
		outer, inner = append(outer, "p_"+c+" AS "+c), append(inner, c+" AS p_"+c)
	}
	keys := strings.Join(p.key, ", ")
	return "SELECT " + strings.Join(outer, ", ") +
		" FROM " + raw + quote(p.marker) +
		" ALL INNER JOIN (SELECT " + strings.Join(inner, ", ") + " FROM " + raw + quote(p.name) +
		" WHERE " + tuple(p.key) + " NOT IN (SELECT " + keys + " FROM " + adb + quote(p.name) + ")) AS raw_rows USING " + tuple(p.key)
}

// OpenAnalystDatabase creates or completes the analyst database of the
// release database database on the server at addr, as user default: the
// statements of AnalystDatabaseStatements, then the analyst views
// (ViewStatements) inside it, over the copies. The release database's
// schema must exist (Open). Idempotent; a rerun after an upgrade adds new
// views, replaces every view and publish_* materialized view whose
// statement is not the current one (a view of another crowdlog version:
// dropped and created again, recorded in ViewVersionsTable of the release
// database, logged at Info; the materialized views before the backfill)
// and backfills anything a failed publishing insert, or an insert while a
// materialized view was being replaced, missed. It
// returns the analyst database's name. ctx bounds the call
// (DefaultTimeout when it has no deadline).
func OpenAnalystDatabase(ctx context.Context, addr, database string) (string, error) {
	if _, err := AnalystDatabaseStatements(database); err != nil {
		return "", err
	}
	adb := AnalystDatabase(database)
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	conn, err := dial(ctx, addr, "default")
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var vconn driver.Conn
	defer func() {
		if vconn != nil {
			vconn.Close()
		}
	}()
	// the analyst database exists only after the first statements
	views := func(ctx context.Context) (driver.Conn, error) {
		vconn, err = dial(ctx, addr, adb)
		return vconn, err
	}
	return openAnalystDatabase(ctx, conn, views, database, " on "+addr)
}

// OpenAnalystDatabaseConn is OpenAnalystDatabase on connections already
// made: admin runs the analyst database's statements (qualified, in any
// current database; user default or another user with the rights to
// create databases, tables and views), views runs the analyst views and
// must have AnalystDatabase(database) as its current database (it is used
// only after the database was created). The connections stay open. It
// returns the analyst database's name; errors name the failing statement.
// ctx bounds the call (DefaultTimeout when it has no deadline).
func OpenAnalystDatabaseConn(ctx context.Context, admin, views driver.Conn, database string) (string, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	return openAnalystDatabase(ctx, admin, func(context.Context) (driver.Conn, error) { return views, nil }, database, "")
}

// openAnalystDatabase runs the analyst database's statements on conn, then
// the analyst views on the connection views returns; where ("" or " on
// addr") goes into errors.
func openAnalystDatabase(ctx context.Context, conn driver.Conn, views func(context.Context) (driver.Conn, error), database, where string) (string, error) {
	stmts, err := AnalystDatabaseStatements(database)
	if err != nil {
		return "", err
	}
	adb := AnalystDatabase(database)
	// The materialized views of another crowdlog version are replaced
	// (upgrade.go) before the backfill, which copies what the raw tables
	// received while a view was missing.
	var mvs []string
	for _, s := range stmts {
		if viewName(s) != "" {
			mvs = append(mvs, s)
			continue
		}
		if strings.HasPrefix(s, "INSERT") && mvs != nil {
			vs := viewSet{release: database, database: adb, stmts: mvs,
				create: func(ctx context.Context, s string) error { return conn.Exec(ctx, s) }}
			if _, err := applyViews(ctx, conn, vs, slog.Default()); err != nil {
				return "", fmt.Errorf("release: analyst database%s: %w", where, err)
			}
			mvs = nil
		}
		if err := conn.Exec(ctx, s); err != nil {
			return "", fmt.Errorf("release: analyst database %s%s (%.70s…): %w", adb, where, s, err)
		}
	}
	if mvs != nil {
		return "", fmt.Errorf("release: analyst database %s: materialized views without a backfill after them", adb)
	}
	// Exact duplicates of a ledger row (copied twice while the statements
	// above ran beside a release stage) merge now rather than at some
	// later merge: analysts sum the ledger without FINAL.
	if err := conn.Exec(ctx, "OPTIMIZE TABLE "+quote(adb)+".`privacy_ledger` FINAL"); err != nil {
		return "", fmt.Errorf("release: merge %s.privacy_ledger%s: %w", adb, where, err)
	}
	vconn, err := views(ctx)
	if err != nil {
		return "", err
	}
	vs := viewSet{release: database, database: adb, stmts: ViewStatements(),
		create: func(ctx context.Context, s string) error { return vconn.Exec(ctx, s) }}
	if _, err := applyViews(ctx, conn, vs, slog.Default()); err != nil {
		return "", fmt.Errorf("release: analyst views%s: %w", where, err)
	}
	return adb, nil
}
