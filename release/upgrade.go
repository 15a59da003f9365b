package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Replacing the views of an earlier crowdlog (docs/decisions.md, "Views
// are replaced when their statement changes").
//
// Open creates the views with CREATE VIEW IF NOT EXISTS, which keeps a
// view of the same name whatever its text. A database created by an
// earlier crowdlog would keep that crowdlog's views forever, and a view
// text that was right on the server of its time may fail or return other
// rows on a newer server (ANY INNER JOIN, unaliased joined subqueries).
// So crowdlog records, in the release database's table ViewVersionsTable,
// the SHA-256 of the statement text that created each of its views (the
// analyst views in both databases, the publish_* materialized views of the
// analyst database), and replaces a view whose recorded text is not the
// current one: DROP TABLE IF EXISTS, then the CREATE statement. Detection
// reads only what crowdlog wrote, never the server's rendering of a view
// (SHOW CREATE, system.tables.create_table_query), which differs between
// server versions for the same view.

// ViewVersionsTable is the table of the release database that records
// which statement text created each crowdlog view, in the release database
// and in its analyst database. Columns: database String (where the view
// is), view String (its name), sha256 String (64 lowercase hex digits of
// the SHA-256 of the statement as crowdlog ran it, viewStatementHash),
// created_ns UInt64 (Unix time in nanoseconds when crowdlog created it).
// The latest row (largest created_ns) of a (database, view) is the view's
// current text. A raw table: it is not copied into the analyst database.
const ViewVersionsTable = "view_versions"

// viewVersionsDDL creates ViewVersionsTable in database (qualified).
func viewVersionsDDL(database string) string {
	return "CREATE TABLE IF NOT EXISTS " + quote(database) + "." + quote(ViewVersionsTable) +
		" (database String, view String, sha256 String, created_ns UInt64) ENGINE = MergeTree ORDER BY (database, view, created_ns)"
}

// viewStatementHash is the hex SHA-256 of a view's CREATE statement as
// crowdlog runs it (leading and trailing white space removed).
func viewStatementHash(stmt string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(stmt)))
	return hex.EncodeToString(sum[:])
}

var (
	createViewRE = regexp.MustCompile("(?is)^\\s*CREATE\\s+(?:MATERIALIZED\\s+)?VIEW\\s+IF\\s+NOT\\s+EXISTS\\s+((?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)(?:\\.(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*))?)")
	nameRE       = regexp.MustCompile("`[^`]+`|[A-Za-z_][A-Za-z0-9_]*")
)

// viewName returns the (unqualified, unquoted) name of the view that a
// CREATE [MATERIALIZED] VIEW IF NOT EXISTS statement creates, "" for any
// other statement.
func viewName(stmt string) string {
	m := createViewRE.FindStringSubmatch(stmt)
	if m == nil {
		return ""
	}
	parts := nameRE.FindAllString(m[1], -1)
	return strings.Trim(parts[len(parts)-1], "`")
}

// viewSet is a list of crowdlog's views of one database, in creation order
// (a view after every view it reads).
type viewSet struct {
	// release is the release database, which holds ViewVersionsTable.
	release string
	// database holds the views.
	database string
	// stmts are the CREATE [MATERIALIZED] VIEW IF NOT EXISTS statements.
	stmts []string
	// create runs one of stmts (unqualified statements need a session in
	// database).
	create func(ctx context.Context, stmt string) error
}

// applyViews creates the views of vs on conn's server, replacing every
// one whose recorded statement (ViewVersionsTable) is not its statement in
// vs, and records the statements of the views it created. conn runs the
// qualified statements (the record, system.tables, the drops); vs.create
// runs the CREATE statements. A view that reads a replaced view is
// replaced with it, so that no view outlives, or is created before, the
// one it reads: drops run in the reverse of vs.stmts' order, creations in
// order. A view missing from database is created whatever the record
// says. Idempotent: when every view exists with its current statement it
// runs no DDL and writes no row. It returns the names of the views it
// dropped and created again (none on a new database), and logs them at
// Info. Errors name the database, the view and what to do.
func applyViews(ctx context.Context, conn driver.Conn, vs viewSet, logger *slog.Logger) ([]string, error) {
	names := make([]string, len(vs.stmts))
	for i, s := range vs.stmts {
		if names[i] = viewName(s); names[i] == "" {
			return nil, fmt.Errorf("release: %.60q… is not a CREATE VIEW IF NOT EXISTS statement", s)
		}
	}
	if err := conn.Exec(ctx, viewVersionsDDL(vs.release)); err != nil {
		return nil, fmt.Errorf("release: create %s.%s: %w", vs.release, ViewVersionsTable, err)
	}
	exists := map[string]bool{}
	rows, err := conn.Query(ctx, "SELECT name FROM system.tables WHERE database = ?", vs.database)
	if err != nil {
		return nil, fmt.Errorf("release: list the tables of %s: %w", vs.database, err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("release: list the tables of %s: %w", vs.database, err)
		}
		exists[n] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("release: list the tables of %s: %w", vs.database, err)
	}
	recorded := map[string]string{}
	rows, err = conn.Query(ctx, "SELECT view, argMax(sha256, created_ns) FROM "+quote(vs.release)+"."+quote(ViewVersionsTable)+
		" WHERE database = ? GROUP BY view", vs.database)
	if err != nil {
		return nil, fmt.Errorf("release: read %s.%s: %w", vs.release, ViewVersionsTable, err)
	}
	for rows.Next() {
		var v, h string
		if err := rows.Scan(&v, &h); err != nil {
			rows.Close()
			return nil, fmt.Errorf("release: read %s.%s: %w", vs.release, ViewVersionsTable, err)
		}
		recorded[v] = h
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("release: read %s.%s: %w", vs.release, ViewVersionsTable, err)
	}

	// outdated: existing views whose recorded statement is not theirs,
	// then, in order, every existing view that reads an outdated one.
	outdated := make([]bool, len(names))
	for i, n := range names {
		outdated[i] = exists[n] && recorded[n] != viewStatementHash(vs.stmts[i])
	}
	for i := range names {
		for j := 0; j < i && !outdated[i] && exists[names[i]]; j++ {
			if outdated[j] && regexp.MustCompile(`\b`+regexp.QuoteMeta(names[j])+`\b`).MatchString(vs.stmts[i]) { // names are identifiers
				outdated[i] = true
			}
		}
	}
	var replaced []string
	for i := len(names) - 1; i >= 0; i-- {
		if !outdated[i] {
			continue
		}
		replaced = append([]string{names[i]}, replaced...)
		if err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+quote(vs.database)+"."+quote(names[i])); err != nil {
			return nil, fmt.Errorf("release: view %s.%s was created by another crowdlog version and must be replaced; dropping it failed (as a user without DROP, run `crowdlog clickhouse init` as the administrator, which replaces it; if a view of your own reads it, drop that view first): %w",
				vs.database, names[i], err)
		}
	}
	if len(replaced) > 0 {
		logger.Info("release: replacing views created by another crowdlog version", "database", vs.database, "views", replaced)
	}
	var record []int
	for i, s := range vs.stmts {
		if err := vs.create(ctx, s); err != nil {
			return nil, fmt.Errorf("release: create view %s.%s (%.60s…): %w", vs.database, names[i], s, err)
		}
		if recorded[names[i]] != viewStatementHash(s) {
			record = append(record, i)
		}
	}
	if len(record) == 0 {
		return replaced, nil
	}
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+quote(vs.release)+"."+quote(ViewVersionsTable)+" (database, view, sha256, created_ns)")
	if err != nil {
		return nil, fmt.Errorf("release: record the views of %s in %s.%s: %w", vs.database, vs.release, ViewVersionsTable, err)
	}
	now := uint64(time.Now().UnixNano())
	for _, i := range record {
		if err := b.Append(vs.database, names[i], viewStatementHash(vs.stmts[i]), now); err != nil {
			_ = b.Abort()
			return nil, fmt.Errorf("release: record the views of %s in %s.%s: %w", vs.database, vs.release, ViewVersionsTable, err)
		}
	}
	if err := b.Send(); err != nil {
		return nil, fmt.Errorf("release: record the views of %s in %s.%s: %w", vs.database, vs.release, ViewVersionsTable, err)
	}
	return replaced, nil
}
