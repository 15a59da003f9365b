package release

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ErrExtraGrants is returned (wrapped) by CreateAnalyst and Init when,
// on a server with SQL users, the analyst or the writer holds more than
// crowdlog grants it (as SHOW GRANTS FOR shows: a privilege on another
// database or on *.*, a role, a grant option), lacks one of them, or is
// defined in the server's users.xml/users.d, where a user without
// <grants> holds every global privilege (FILE, URL, S3, REMOTE, KILL
// QUERY, SYSTEM …; measured on the 26.7 engine) held back only by its
// readonly profile. The message names the extra grants and what to do.
var ErrExtraGrants = errors.New("user holds grants crowdlog does not give it")

// grantSet is what a user may hold: target ("db.*", "*.*", as SHOW
// GRANTS writes it, without backquotes) → privilege names.
type grantSet map[string][]string

// analystGrants is all the analyst of analyst database adb may hold.
func analystGrants(adb string) grantSet { return grantSet{adb + ".*": {"SELECT"}} }

// writerPrivileges are the writer's privileges on the release database
// and on its analyst database, in ClickHouse's order (SHOW GRANTS).
var writerPrivileges = []string{"SELECT", "INSERT", "ALTER", "CREATE TABLE", "CREATE VIEW"}

// writerGrants is all the writer of release database db may hold.
func writerGrants(db string) grantSet {
	return grantSet{db + ".*": writerPrivileges, AnalystDatabase(db) + ".*": writerPrivileges}
}

// splitTop splits s at ", " outside parentheses (column lists such as
// SELECT(a, b)).
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// checkGrants compares the SHOW GRANTS FOR user lines with want: every
// privilege of want must be granted, nothing else (no other privilege or
// target, no role, no grant option). REVOKE lines (partial revokes) only
// narrow a grant and are ignored; the grant they narrow is not in want.
// It returns nil or an error wrapping ErrExtraGrants that lists what is
// extra and what is missing.
func checkGrants(user string, lines []string, want grantSet) error {
	held := map[string]map[string]bool{}
	var extra []string
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "REVOKE ") {
			continue
		}
		body, ok := strings.CutPrefix(line, "GRANT ")
		if !ok {
			extra = append(extra, line)
			continue
		}
		if strings.HasSuffix(body, " WITH GRANT OPTION") || strings.HasSuffix(body, " WITH ADMIN OPTION") {
			extra = append(extra, line)
			continue
		}
		on := strings.LastIndex(body, " ON ")
		to := strings.LastIndex(body, " TO ")
		if on < 0 || to < on {
			extra = append(extra, line+" (a role)")
			continue
		}
		target := strings.ReplaceAll(body[on+len(" ON "):to], "`", "")
		allowed := map[string]bool{}
		for _, p := range want[target] {
			allowed[p] = true
		}
		var bad []string
		for _, p := range splitTop(body[:on]) {
			if !allowed[p] {
				bad = append(bad, p)
				continue
			}
			if held[target] == nil {
				held[target] = map[string]bool{}
			}
			held[target][p] = true
		}
		if len(bad) > 0 {
			extra = append(extra, strings.Join(bad, ", ")+" ON "+target)
		}
	}
	var missing []string
	targets := make([]string, 0, len(want))
	for t := range want {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		for _, p := range want[t] {
			if !held[t][p] {
				missing = append(missing, p+" ON "+t)
			}
		}
	}
	if len(extra) == 0 && len(missing) == 0 {
		return nil
	}
	var msg []string
	if len(extra) > 0 {
		msg = append(msg, "holds "+strings.Join(extra, "; ")+" beyond what crowdlog grants")
	}
	if len(missing) > 0 {
		msg = append(msg, "lacks "+strings.Join(missing, "; "))
	}
	return fmt.Errorf("release: user %s %s: %w. Revoke the rest (REVOKE ALL ON *.* FROM %s; REVOKE role FROM %s) or drop the user (DROP USER %s) and rerun `crowdlog clickhouse init`",
		user, strings.Join(msg, ", and "), ErrExtraGrants, user, user, user)
}

// showGrants returns the lines of SHOW GRANTS FOR user (as the Login of
// conn, which needs SHOW USERS: the administrator).
func showGrants(ctx context.Context, conn driver.Conn, user string) ([]string, error) {
	rows, err := conn.Query(ctx, "SHOW GRANTS FOR `"+user+"`")
	if err != nil {
		return nil, fmt.Errorf("release: SHOW GRANTS FOR %s (does the administrator have SHOW USERS, part of access_management?): %w", user, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("release: SHOW GRANTS FOR %s: %w", user, err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// verifyGrants refuses user unless SHOW GRANTS FOR user shows exactly
// want (checkGrants).
func verifyGrants(ctx context.Context, conn driver.Conn, user string, want grantSet) error {
	lines, err := showGrants(ctx, conn, user)
	if err != nil {
		return err
	}
	return checkGrants(user, lines, want)
}

// sqlUserStorage returns the access storage holding user ("" when there is
// none): local_directory (or replicated) for users made with CREATE
// USER, users_xml for users.xml and users.d. Reading system.users needs
// SHOW USERS, which the administrator of an init has; an error here
// means it has not.
func sqlUserStorage(ctx context.Context, conn driver.Conn, user string) (string, error) {
	rows, err := conn.Query(ctx, "SELECT storage FROM system.users WHERE name = '"+user+"'")
	if err != nil {
		return "", fmt.Errorf("release: read system.users for %s (the administrator needs access_management: SHOW USERS, CREATE USER, GRANT): %w", user, err)
	}
	defer rows.Close()
	storage := ""
	for rows.Next() {
		if err := rows.Scan(&storage); err != nil {
			return "", fmt.Errorf("release: read system.users for %s: %w", user, err)
		}
	}
	return storage, rows.Err()
}

// checkUserStorage refuses a user that exists in the server's users.xml
// or users.d (storage users_xml): CREATE USER cannot replace it, and such
// a user without <grants> holds every global privilege. user must be an
// identifier.
func checkUserStorage(ctx context.Context, conn driver.Conn, version, user, role string) error {
	storage, err := sqlUserStorage(ctx, conn, user)
	if err != nil {
		return err
	}
	if storage == "users_xml" || storage == "users.xml" {
		return fmt.Errorf("release: ClickHouse %s: the %s %s is defined in the server's users.xml or users.d (%s), where a user without <grants> holds every global privilege (FILE, URL, S3, REMOTE, KILL QUERY, SYSTEM …) and CREATE USER cannot replace it: %w. "+
			"Remove that user from users.d (a file crowdlog-%s.xml written for ClickHouse 18.16) and rerun `crowdlog clickhouse init`, which creates it with CREATE USER and GRANT",
			version, role, user, storage, ErrExtraGrants, role)
	}
	return nil
}
