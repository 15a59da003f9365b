package release

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// MinVersion is the oldest ClickHouse crowdlog runs on, "MAJOR.MINOR":
// 18.16, Debian's clickhouse-server, which the tests run as a server. The
// newest tested is the 26.7 engine (chDB, in-process: schema, views,
// analyst database and the docs/sql.md recipes). Servers in between and
// newer ones are accepted; older ones (and the 1.1.54xxx numbering before
// 18.x) are refused with ErrUnsupportedServer.
const MinVersion = "18.16"

// ErrUnsupportedServer is returned (wrapped) by Probe, Open, CreateAnalyst,
// CheckAnalyst and Init when the server is older than MinVersion or a
// session there has a setting from ResultSettings at a value that changes
// what crowdlog's statements and views return. The message names the
// version or the setting, its value, and what to do. Nothing has been
// created when Open or Init return it for the administrator's or the
// writer's session.
var ErrUnsupportedServer = errors.New("unsupported ClickHouse server")

// ResultSetting is a ClickHouse setting whose non-default value, in the
// session that reads crowdlog's views (views are re-analysed under their
// reader's settings) or runs its INSERT … SELECT statements, changes the
// rows returned without an error, or makes a view fail.
type ResultSetting struct {
	// Name is the setting's name in system.settings.
	Name string
	// Accept are the values that keep results as on a server with default
	// settings, as system.settings shows them (the first is the default).
	Accept []string
	// Effect says what goes wrong otherwise, as measured on the 26.7
	// engine with crowdlog's views.
	Effect string
}

// ResultSettings are the settings a session of crowdlog's writer, its
// administrator or its analyst must leave at their defaults. Measured on
// the 26.7 engine by running every view over a few hundred rows, then
// over 100,000 released items, with each candidate setting in the
// session and comparing with the default-settings output: these changed a
// view's rows or made it fail. Candidates that changed nothing (crowdlog's
// joins all state their strictness and alias their subqueries):
// any_join_distinct_right_table_keys, join_default_strictness,
// transform_null_in, cast_keep_nullable, union_default_mode,
// prefer_column_name_to_alias, enable_analyzer = 0, final,
// count_distinct_implementation, group_by_use_nulls,
// data_type_default_nullable, joined_subquery_requires_alias,
// join_algorithm, join_any_take_last_row, and read_overflow_mode,
// join_overflow_mode, distinct_overflow_mode and transfer_overflow_mode
// with their limits at 100–1,000 rows; session_timezone changes only how
// released_at is shown. A setting absent from system.settings (18.16 lacks
// limit, offset and aggregate_functions_null_for_empty) is at its default.
var ResultSettings = []ResultSetting{
	{"join_use_nulls", []string{"0", "false"},
		"LEFT JOIN fills unmatched columns with NULL: view reformulation_proportions fails (Code 80, a Nullable column where the view has none)"},
	{"aggregate_functions_null_for_empty", []string{"0", "false"},
		"sum() becomes Nullable: view reformulation_proportions fails (Code 80)"},
	{"limit", []string{"0"},
		"every SELECT, the views' subqueries included, stops after that many rows: views lose completed releases without an error"},
	{"offset", []string{"0"},
		"every SELECT, the views' subqueries included, skips that many rows: every view loses rows without an error"},
	{"result_overflow_mode", []string{"throw"},
		"with max_result_rows a query returns a truncated result instead of an error (released_queries lost rows)"},
	{"set_overflow_mode", []string{"throw"},
		"with max_rows_in_set the IN (completed releases) subquery is cut short: views drop completed releases without an error"},
	{"group_by_overflow_mode", []string{"throw"},
		"with max_rows_to_group_by GROUP BY stops adding keys: reformulation_proportions lost rows without an error"},
	{"sort_overflow_mode", []string{"throw"},
		"with max_rows_to_sort a sorted read returns a truncated result (released_queries lost rows)"},
	{"timeout_overflow_mode", []string{"throw"},
		"with max_execution_time a slow query returns the rows it had so far instead of an error"},
}

// parseVersion returns the major and minor number of a version() string
// such as "18.16.1" or "26.7.2.1".
func parseVersion(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// checkVersion refuses a version() older than MinVersion or one it cannot
// read.
func checkVersion(v string) error {
	major, minor, ok := parseVersion(v)
	if !ok {
		return fmt.Errorf("release: ClickHouse version %q is not MAJOR.MINOR…: %w (crowdlog runs on ClickHouse %s and newer)", v, ErrUnsupportedServer, MinVersion)
	}
	minMajor, minMinor, _ := parseVersion(MinVersion + ".0")
	if major < minMajor || major == minMajor && minor < minMinor {
		return fmt.Errorf("release: ClickHouse %s: %w: older than %s, the oldest crowdlog runs on (tested: the 18.16 server and the 26.7 engine); upgrade the server",
			v, ErrUnsupportedServer, MinVersion)
	}
	return nil
}

// sessionUser names the user of conn's session for messages:
// currentUser() (19.x and later), else (18.16) the user column of the
// query's own row in system.processes, else "this user".
func sessionUser(ctx context.Context, conn driver.Conn) string {
	var who string
	if err := conn.QueryRow(ctx, "SELECT currentUser()").Scan(&who); err == nil && who != "" {
		return who
	}
	marker := fmt.Sprintf("crowdlog probe %d", rand.Uint64())
	if err := conn.QueryRow(ctx, "SELECT user FROM system.processes WHERE query LIKE '%"+marker+"%' LIMIT 1").Scan(&who); err == nil && who != "" {
		return who
	}
	return "this user"
}

// settingsQuery reads the ResultSettings of the session from
// system.settings as one row of "name=value=changed" lines, so that a
// session's limit cannot cut it short (a literal list: 18.16 has no query
// parameters).
func settingsQuery() string {
	names := make([]string, len(ResultSettings))
	for i, s := range ResultSettings {
		names[i] = "'" + s.Name + "'"
	}
	return "SELECT arrayStringConcat(groupArray(concat(name, '=', value, '=', toString(changed))), '\\n') FROM system.settings WHERE name IN (" +
		strings.Join(names, ", ") + ")"
}

// hiddenValue are the settings whose value system.settings shows as 0
// once the engine applied it to the query that reads it (measured on
// 26.7: after SET limit = 3 it shows value 0, changed 1); countRows
// measures them instead.
var hiddenValue = map[string]bool{"limit": true, "offset": true}

// parseSettings reads settingsQuery's row: name → value, and the names
// changed in the session.
func parseSettings(text string) (values map[string]string, changed map[string]bool) {
	values, changed = map[string]string{}, map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		f := strings.Split(l, "=")
		if len(f) < 2 {
			continue
		}
		values[f[0]] = f[1]
		changed[f[0]] = len(f) > 2 && f[2] == "1"
	}
	return values, changed
}

// rowsProbe is the number of rows rowsProbeQuery returns with default
// settings.
const rowsProbe = 1001

// rowsProbeQuery returns the numbers 0 … rowsProbe-1 (system.numbers: a
// readonly = 1 user may read it, not numbers()).
var rowsProbeQuery = fmt.Sprintf("SELECT number FROM system.numbers LIMIT %d", rowsProbe)

// limitAndOffset measures the session's limit and offset settings from
// the rows of rowsProbeQuery: "0" each when all come back, else what was
// cut ("> 1000" when no row comes back).
func limitAndOffset(ctx context.Context, conn driver.Conn) (limit, offset string, err error) {
	rows, err := conn.Query(ctx, rowsProbeQuery)
	if err != nil {
		return "", "", err
	}
	defer rows.Close()
	n, first := 0, uint64(0)
	for rows.Next() {
		var x uint64
		if err := rows.Scan(&x); err != nil {
			return "", "", err
		}
		if n == 0 {
			first = x
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return "", "", err
	}
	if n == 0 {
		return "?", fmt.Sprintf("> %d", rowsProbe-1), nil
	}
	limit, offset = "0", strconv.FormatUint(first, 10)
	if n < rowsProbe-int(first) {
		limit = strconv.Itoa(n)
	}
	return limit, offset, nil
}

// badSettings returns one line per setting of values (name → value, as
// system.settings shows them) that ResultSettings refuses: "name = value
// (default D): effect". Names absent from values are at their default.
func badSettings(values map[string]string) (bad, fix []string) {
	for _, s := range ResultSettings {
		v, ok := values[s.Name]
		if !ok {
			continue
		}
		accepted := false
		for _, a := range s.Accept {
			accepted = accepted || v == a
		}
		if !accepted {
			bad = append(bad, fmt.Sprintf("%s = %s (default %s): %s", s.Name, v, s.Accept[0], s.Effect))
			fix = append(fix, s.Name+" = "+quoteSetting(s.Accept[0]))
		}
	}
	return bad, fix
}

// quoteSetting writes a setting's value as in a SETTINGS clause: numbers
// as they are, words quoted.
func quoteSetting(v string) string {
	if _, err := strconv.ParseUint(v, 10, 64); err == nil {
		return v
	}
	return "'" + v + "'"
}

// checkSettings reads the ResultSettings of conn's session (the settings
// profile of its user, plus any the client sends) and refuses values that
// change results: ErrUnsupportedServer naming each setting, its value and
// the fix. who names the session's user in the message.
func checkSettings(ctx context.Context, conn driver.Conn, version, who string) error {
	var text string
	if err := conn.QueryRow(ctx, settingsQuery()).Scan(&text); err != nil {
		return fmt.Errorf("release: read system.settings of ClickHouse %s as %s: %w", version, who, err)
	}
	values, changed := parseSettings(text)
	for name := range hiddenValue {
		if changed[name] && values[name] == "0" {
			limit, offset, err := limitAndOffset(ctx, conn)
			if err != nil { // e.g. a user that may not read system.numbers
				limit, offset = "0", "0"
				if changed["limit"] {
					limit = "(changed, value not shown)"
				}
				if changed["offset"] {
					offset = "(changed, value not shown)"
				}
			}
			values["limit"], values["offset"] = limit, offset
			break
		}
	}
	bad, fix := badSettings(values)
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("release: ClickHouse %s: %w: the session of %s has %s. Set it back to the default where it comes from "+
		"(users.xml/users.d: remove it from the <profiles> entry the user names; SQL users: ALTER USER %s MODIFY SETTING %s, "+
		"or ALTER SETTINGS PROFILE … MODIFY SETTING the same, not a bare SETTINGS clause, which drops the user's other settings, readonly = 1 included), "+
		"and have no client send it; then rerun",
		version, ErrUnsupportedServer, who, strings.Join(bad, "; "), who, strings.Join(fix, ", "))
}
