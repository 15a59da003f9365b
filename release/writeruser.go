package release

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// WriterAccount is the ClickHouse user the release stages write as
// (`crowdlog release --clickhouse-user`), made by Init: not the
// administrator (user default), and limited to the release database and
// its analyst database.
type WriterAccount struct {
	// Name is the user name, an identifier other than default.
	Name string
	// Password is the user's password (stored by the server as SHA-256).
	Password string
}

// WriterStatements returns the SQL that creates w on a server with SQL
// users for the release database db, in order:
//
//	CREATE USER OR REPLACE `w` IDENTIFIED WITH sha256_password BY '…' DEFAULT ROLE NONE
//	REVOKE ALL ON *.* FROM `w`
//	GRANT SELECT, INSERT, CREATE TABLE, CREATE VIEW, ALTER ON `db`.* TO `w`
//	GRANT SELECT, INSERT, CREATE TABLE, CREATE VIEW, ALTER ON `db_analyst`.* TO `w`
//
// SELECT, INSERT, CREATE TABLE, CREATE VIEW and ALTER (the idempotent
// schema of Open, the ALTER DELETE of an interrupted release's redo) on db
// and on AnalystDatabase(db), where its inserts go through the
// materialized views. No DROP, no other database, no role, nothing global
// (no FILE, URL, S3, REMOTE or other source, no KILL QUERY, no SYSTEM):
// Init checks with SHOW GRANTS FOR that the user holds exactly these.
// Errors for a name that is not an identifier, user default, an empty
// password or a password with a quote or backslash.
func WriterStatements(w WriterAccount, db string) ([]string, error) {
	if !identRE.MatchString(w.Name) || w.Name == clickhouse.DefaultUser {
		return nil, fmt.Errorf("release: writer name %q: want a plain identifier other than default", w.Name)
	}
	if w.Password == "" || strings.ContainsAny(w.Password, `'\`) {
		return nil, fmt.Errorf("release: writer %s: the password must be non-empty, without quotes or backslashes", w.Name)
	}
	if !identRE.MatchString(db) {
		return nil, fmt.Errorf("release: database name %q is not a plain identifier", db)
	}
	out := []string{
		"CREATE USER OR REPLACE `" + w.Name + "` IDENTIFIED WITH sha256_password BY '" + w.Password + "' DEFAULT ROLE NONE",
		"REVOKE ALL ON *.* FROM `" + w.Name + "`",
	}
	for _, d := range []string{db, AnalystDatabase(db)} {
		out = append(out, "GRANT SELECT, INSERT, CREATE TABLE, CREATE VIEW, ALTER ON `"+d+"`.* TO `"+w.Name+"`")
	}
	return out, nil
}

// initWriter creates o.Writer for database db (servers with SQL users:
// WriterStatements as the Login of ctx, then SHOW GRANTS FOR must show
// exactly writerGrants; else a users.d file in o.UsersDir,
// infra/clickhouse.WriteWriterUser) and waits, at most o.AnalystWait,
// until it can log in to db and read releases. It returns the users.d
// file's path, "" for SQL users.
func initWriter(ctx context.Context, o InitOptions, db string, s Server) (string, error) {
	w := o.Writer
	path := ""
	if s.SQLUsers {
		stmts, err := WriterStatements(w, db)
		if err != nil {
			return "", err
		}
		conn, err := dial(ctx, o.Addr, "default")
		if err != nil {
			return "", err
		}
		defer conn.Close()
		for _, stmt := range stmts {
			if err := conn.Exec(ctx, stmt); err != nil {
				return "", fmt.Errorf("release: create writer %s on %s (does the administrator have access_management?): %w", w.Name, o.Addr, err)
			}
		}
		if err := verifyGrants(ctx, conn, w.Name, writerGrants(db)); err != nil {
			return "", err
		}
	} else {
		if o.UsersDir == "" {
			return "", fmt.Errorf("release: ClickHouse %s at %s: %w, its users live in users.xml and users.d: give the server's users.d directory (--users-d)",
				s.Version, o.Addr, ErrNoSQLUsers)
		}
		var err error
		path, err = clickhouse.WriteWriterUser(o.UsersDir, clickhouse.WriterUser{Name: w.Name, Password: w.Password,
			Databases: []string{db, AnalystDatabase(db)}, Networks: o.WriterNetworks})
		if err != nil {
			return "", err
		}
	}
	wait := o.AnalystWait
	if wait <= 0 {
		wait = DefaultAnalystWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		err := checkWriter(wctx, o.Addr, db, w)
		if err == nil || errors.Is(err, ErrUnsupportedServer) {
			return path, err
		}
		select {
		case <-wctx.Done():
			return path, fmt.Errorf("release: writer %s could not read %s.releases within %s (is %s the users.d directory the server reads? see its log): %w",
				w.Name, db, wait, o.UsersDir, err)
		case <-tick.C:
		}
	}
}

// checkWriter logs in as w in db, refuses a session with unsupported
// settings (ErrUnsupportedServer: the writer's profile) and reads
// releases.
func checkWriter(ctx context.Context, addr, db string, w WriterAccount) error {
	conn, err := DialAs(ctx, addr, db, w.Name, w.Password)
	if err != nil {
		return err
	}
	defer conn.Close()
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return fmt.Errorf("release: writer %s reads version(): %w", w.Name, err)
	}
	if err := checkSettings(ctx, conn, version, w.Name); err != nil {
		return err
	}
	var n uint64
	return conn.QueryRow(ctx, "SELECT count() FROM releases").Scan(&n)
}
