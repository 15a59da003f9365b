package release

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

// Views is the DDL of the analyst views: CREATE VIEW IF NOT EXISTS
// statements separated by ";", valid on ClickHouse 18.16 and current
// releases, unqualified. Open runs them in the release database after
// Schema (for user default and crowdlog's own readers, e.g.
// Writer.ReadKeywordDaily); OpenAnalystDatabase runs the same text in the
// analyst database, where the unqualified tables are the published copies
// (analystdb.go) and the analyst reads them. The first views
// (reformulation_pairs, reformulation_proportions, click_pairs,
// url_popularity, ltr_features, keyword_counts, keyword_daily) keep their
// columns as they were; the analyst's views (completed_releases, one released_* view per application
// as in AppViews, released_undecrypted) add the epoch's time range
// (epoch_start, epoch_end) and users as NULL where the policy does not
// measure them. What each column means, in particular the reformulation
// proportions of CrowdLogging §3.3, is documented in views.sql,
// docs/applications.md and docs/sql.md.
//
//go:embed views.sql
var Views string

// AppViews names the analyst view of each mining application
// (ingest/apps): app name → view, in the release database and in its
// analyst database. Each reads only completed releases and has the
// columns epoch, epoch_start, epoch_end, policy, k, the application's
// fields, impressions and users (NULL when not measured).
var AppViews = map[string]string{
	"query":         "released_queries",
	"reformulation": "released_reformulations",
	"click":         "released_clicks",
	"url":           "released_urls",
	"ltr":           "released_ltr_features",
	"keyword":       "released_keywords",
}

// UsersMeasured reports whether releases under policy carry a users count
// (exact or noisy). False only for dp-a, whose users column holds 0
// (docs/policies.md); the views show NULL there. views.sql encodes the
// same rule (completed_releases.users_measured).
func UsersMeasured(policy string) bool { return policy != "dp-a" }

// ViewStatements splits Views into single statements (comment lines
// removed), in order.
func ViewStatements() []string { return splitStatements(Views) }

// splitStatements splits DDL text into statements: whole-line "--"
// comments are dropped, statements end at ";", empty ones are skipped.
func splitStatements(ddl string) []string {
	var lines []string
	for _, l := range strings.Split(ddl, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "--") {
			continue
		}
		lines = append(lines, l)
	}
	var out []string
	for _, s := range strings.Split(strings.Join(lines, "\n"), ";") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Server is what crowdlog needs to know of a ClickHouse server, learnt by
// Probe (and by Open) from the server itself rather than from a version
// table.
type Server struct {
	// Version is the server's version() string, e.g. "18.16.1".
	Version string
	// LowCardinality is true when tables may have LowCardinality(String)
	// columns without an experimental setting: the setting
	// allow_experimental_low_cardinality_type is absent or on (it is off on
	// 18.16, where LowCardinality in tables is experimental; on in current
	// releases, where the setting is obsolete).
	LowCardinality bool
	// SQLUsers is true when users and grants are managed with SQL (CREATE
	// USER, GRANT; ClickHouse 20.4 and later, seen as the table
	// system.users). False on 18.16, where users live in users.xml and
	// users.d/ (infra/clickhouse.WriteAnalystUser).
	SQLUsers bool
}

// Probe connects to the native-protocol address addr with the Login of ctx
// (user default without password when none) and describes the server. It
// refuses (ErrUnsupportedServer, naming the version or the setting and
// its value) a server older than MinVersion and a session with a
// ResultSettings value that changes what crowdlog's views return. ctx
// bounds the call (DefaultTimeout when it has no deadline).
func Probe(ctx context.Context, addr string) (Server, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	conn, err := dial(ctx, addr, "default")
	if err != nil {
		return Server{}, err
	}
	defer conn.Close()
	return probe(ctx, conn)
}

// probe describes the server of conn and refuses it (ErrUnsupportedServer)
// when its version or the ResultSettings of conn's session are not
// supported; it changes nothing.
func probe(ctx context.Context, conn driver.Conn) (Server, error) {
	var s Server
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&s.Version); errors.Is(err, sql.ErrNoRows) {
		// only servers with the offset setting (not 18.16) get here: read
		// the version and user from rows the offset does not skip
		_, offset, _ := limitAndOffset(ctx, conn)
		who := "this user"
		if rows, err := conn.Query(ctx, "SELECT version(), currentUser() FROM system.numbers LIMIT "+strconv.Itoa(rowsProbe)); err == nil {
			if rows.Next() {
				_ = rows.Scan(&s.Version, &who)
			}
			rows.Close()
		}
		return s, fmt.Errorf("release: ClickHouse %s: %w: SELECT version() returned no row: the session of %s skips rows (offset = %s, default 0): "+
			"every view loses rows without an error. Set offset = 0 where it comes from (ALTER USER %s MODIFY SETTING offset = 0, or its settings profile) and rerun",
			s.Version, ErrUnsupportedServer, who, offset, who)
	} else if err != nil {
		return s, fmt.Errorf("release: read the server version: %w", err)
	}
	if err := checkVersion(s.Version); err != nil {
		return s, err
	}
	if err := checkSettings(ctx, conn, s.Version, sessionUser(ctx, conn)); err != nil {
		return s, err
	}
	var lcOff, users uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.settings WHERE name = 'allow_experimental_low_cardinality_type' AND value = '0'").Scan(&lcOff); err != nil {
		return s, fmt.Errorf("release: read system.settings of ClickHouse %s: %w", s.Version, err)
	}
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = 'system' AND name = 'users'").Scan(&users); err != nil {
		return s, fmt.Errorf("release: read system.tables of ClickHouse %s: %w", s.Version, err)
	}
	s.LowCardinality, s.SQLUsers = lcOff == 0, users > 0
	return s, nil
}

// lowCardinalityColumn matches the schema.sql lines of the few-valued
// String columns that LowCardinality suits: app, epoch, policy, dataset,
// campaign.
var lowCardinalityColumn = regexp.MustCompile(`(?m)^(\s+(?:app|epoch|policy|dataset|campaign)) String,$`)

// SchemaStatementsFor returns SchemaStatements for server s: with
// s.LowCardinality the app, epoch, policy, dataset and campaign columns are
// LowCardinality(String) (dictionary-encoded; the values and every query
// stay the same), otherwise as in schema.sql. The choice applies to tables
// Open creates; existing tables are never altered.
func SchemaStatementsFor(s Server) []string {
	if !s.LowCardinality {
		return SchemaStatements()
	}
	return splitStatements(lowCardinalityColumn.ReplaceAllString(Schema, "$1 LowCardinality(String),"))
}

// Analyst is a read-only ClickHouse user for analysts: SELECT on one
// database and nothing else (CreateAnalyst; on 18.16
// infra/clickhouse.WriteAnalystUser). Init gives it the analyst database
// (AnalystDatabase), never the release database.
type Analyst struct {
	// Name is the user name, an identifier ([A-Za-z_][A-Za-z0-9_]*).
	Name string
	// Password is the user's password (stored by the server as SHA-256).
	Password string
	// Database is the one database the user may read: the analyst
	// database, e.g. AnalystDatabase(DefaultDatabase) = "crowdlog_analyst"
	// (an identifier of at most 127 bytes).
	Database string
}

// ErrNoSQLUsers is returned (wrapped) by CreateAnalyst on a server without
// SQL user management (ClickHouse before 20.4, e.g. 18.16): write the user
// into users.d instead (`crowdlog clickhouse init --users-d`,
// infra/clickhouse.WriteAnalystUser).
var ErrNoSQLUsers = errors.New("server has no CREATE USER")

// AnalystStatements returns the SQL that creates (or replaces) a and gives
// it SELECT on a.Database only, with readonly = 1 (no INSERT, DDL, SET or
// table function), for servers with SQL users (ClickHouse 20.4 and
// later), in order:
//
//	CREATE USER OR REPLACE `a` IDENTIFIED WITH sha256_password BY '…' DEFAULT ROLE NONE SETTINGS readonly = 1
//	REVOKE ALL ON *.* FROM `a`
//	GRANT SELECT ON `<a.Database>`.* TO `a`
//
// No role, no grant option, nothing global: no FILE, URL, S3, REMOTE or
// other source, no KILL QUERY, no SYSTEM. CreateAnalyst then checks with
// SHOW GRANTS FOR that the user holds exactly that grant. Their syntax is
// checked on the 26.7 engine (formatQuery); no server with SQL users runs
// in the tests (chDB has no writable user storage, Debian's 18.16 no SQL
// users), so docs/operations.md gives them for operators to run by hand.
// a.Database is the analyst database, whose views read copies in the same
// database, which the grant covers: no grant on the release database is
// needed, and no view needs SQL SECURITY DEFINER (ClickHouse 24.2 and
// later) to read what its reader may not. Nothing is granted on system.*:
// where the server's
// access_control_improvements.select_from_system_db_requires_grant is
// true that keeps the analyst out of system.processes and
// system.query_log (system.tables, system.columns and system.databases
// stay readable); where it is false every user reads them, and no REVOKE
// changes that. Errors for a name that is not an identifier or is
// default, a database that is not an identifier, or an empty password.
func AnalystStatements(a Analyst) ([]string, error) {
	if !identRE.MatchString(a.Name) || a.Name == clickhouse.DefaultUser {
		return nil, fmt.Errorf("release: analyst name %q: want a plain identifier ([A-Za-z_][A-Za-z0-9_]*) other than default", a.Name)
	}
	if !dbNameRE.MatchString(a.Database) {
		return nil, fmt.Errorf("release: database name %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)", a.Database)
	}
	if a.Password == "" {
		return nil, errors.New("release: the analyst needs a password (give one, or let `crowdlog clickhouse init` make one)")
	}
	pw := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(a.Password)
	return []string{
		"CREATE USER OR REPLACE `" + a.Name + "` IDENTIFIED WITH sha256_password BY '" + pw + "' DEFAULT ROLE NONE SETTINGS readonly = 1",
		"REVOKE ALL ON *.* FROM `" + a.Name + "`",
		"GRANT SELECT ON `" + a.Database + "`.* TO `" + a.Name + "`",
	}, nil
}

// CreateAnalyst creates the analyst user a on the server at addr (with the
// Login of ctx, the administrator: user default, which needs
// access_management) with AnalystStatements, then reads SHOW GRANTS FOR
// a.Name and refuses a user that holds anything else than SELECT on
// a.Database (ErrExtraGrants, naming the extra grants). It first refuses,
// changing nothing, a server older than MinVersion or with unsupported
// settings (ErrUnsupportedServer) and an analyst defined in the server's
// users.xml or users.d (ErrExtraGrants: such a user holds every global
// privilege). On a server without SQL users (18.16) it changes nothing and
// returns an error wrapping ErrNoSQLUsers. ctx bounds the call
// (DefaultTimeout when it has no deadline).
func CreateAnalyst(ctx context.Context, addr string, a Analyst) error {
	if _, err := AnalystStatements(a); err != nil {
		return err
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	conn, err := dial(ctx, addr, "default")
	if err != nil {
		return err
	}
	defer conn.Close()
	s, err := probe(ctx, conn)
	if err != nil {
		return err
	}
	if !s.SQLUsers {
		return fmt.Errorf("release: create analyst %s on ClickHouse %s at %s: %w; users live in users.xml/users.d there (crowdlog clickhouse init --users-d DIR)",
			a.Name, s.Version, addr, ErrNoSQLUsers)
	}
	if err := checkUserStorage(ctx, conn, s.Version, a.Name, "analyst"); err != nil {
		return err
	}
	return createAnalyst(ctx, conn, addr, a)
}

// createAnalyst runs AnalystStatements(a) on conn (the administrator's, on
// a server with SQL users) and verifies the grants.
func createAnalyst(ctx context.Context, conn driver.Conn, addr string, a Analyst) error {
	stmts, err := AnalystStatements(a)
	if err != nil {
		return err
	}
	for _, stmt := range stmts {
		if err := conn.Exec(ctx, stmt); err != nil {
			what, _, _ := strings.Cut(stmt, " `")
			return fmt.Errorf("release: %s for analyst %s on %s (does the administrator have access_management?): %w", what, a.Name, addr, err)
		}
	}
	return verifyGrants(ctx, conn, a.Name, analystGrants(a.Database))
}

// DefaultAnalystWait bounds how long Init waits for a users.d analyst to
// be able to log in (the server reloads users.d every few seconds).
const DefaultAnalystWait = 30 * time.Second

// InitOptions configure Init (`crowdlog clickhouse init`).
type InitOptions struct {
	// Addr is the native-protocol address "host:port"; Init works there
	// with the Login of its ctx, the administrator (user default with its
	// password).
	Addr string
	// Database receives the tables and views (the release database);
	// DefaultDatabase when empty. Its analyst database
	// AnalystDatabase(Database) receives the published copies and the
	// analyst views.
	Database string
	// Analyst is the read-only user to create; none when Analyst.Name is
	// empty. Analyst.Database is set to AnalystDatabase(Database).
	Analyst Analyst
	// UsersDir is the users.d directory of the server (e.g.
	// infra/clickhouse.UsersDir of a `crowdlog clickhouse --dir`, or
	// /etc/clickhouse-server/users.d), used on servers without SQL users
	// (18.16). Init fails there when it is empty.
	UsersDir string
	// Networks restrict where a users.d analyst may connect from
	// (127.0.0.1 and ::1 when empty). SQL users are created without a HOST
	// clause (any host); restrict them with ALTER USER … HOST if needed.
	Networks []string
	// AnalystWait bounds the wait for the analyst's (and the writer's)
	// first login; DefaultAnalystWait when 0.
	AnalystWait time.Duration
	// Writer is the release stages' user to create (WriterAccount); none
	// when Writer.Name is empty.
	Writer WriterAccount
	// WriterNetworks restrict where a users.d writer may connect from
	// (127.0.0.1 and ::1 when empty).
	WriterNetworks []string
	// AllowPasswordlessDefault lets Init proceed on a server whose user
	// default logs in without a password: only for crowdlog's own
	// loopback server (infra/clickhouse.Start, `crowdlog clickhouse
	// --dir`) in development and tests. Elsewhere Init refuses with
	// ErrPasswordlessDefault.
	AllowPasswordlessDefault bool
}

// ErrPasswordlessDefault is returned by Init when the server's user
// default (the administrator) logs in without a password. Every user of
// such a server, the writer included, reads and changes every database
// through a table function that logs in as default, e.g.
// remote('127.0.0.1:9000', other_db.table) (measured on 18.16,
// TestAttackWriterTableFunctions), so no users.d or GRANT limit holds.
var ErrPasswordlessDefault = errors.New("release: user default logs in without a password")

// CheckDefaultPassword returns ErrPasswordlessDefault (wrapped, saying
// what to do) when user default logs in at addr (native protocol, the TLS
// of ctx's Login) with an empty password, nil when it is refused. Other
// connection errors are returned as they are.
func CheckDefaultPassword(ctx context.Context, addr string) error {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	l := clickhouse.LoginFrom(ctx)
	conn, err := dial(clickhouse.WithLogin(ctx, clickhouse.Login{User: clickhouse.DefaultUser, TLS: l.TLS}), addr, "system")
	if err == nil {
		conn.Close()
		return fmt.Errorf("%w at %s: any user there, the release writer included, can read every database through remote('127.0.0.1', db.table) as default; "+
			"give default a password (users.d: <default><password remove=\"1\"/><password_sha256_hex>…</password_sha256_hex></default>, or ALTER USER default IDENTIFIED BY …) "+
			"and run init with --clickhouse-user default and CROWDLOG_CLICKHOUSE_PASSWORD_FILE", ErrPasswordlessDefault, addr)
	}
	var ex *chgo.Exception
	if errors.As(err, &ex) {
		return nil // refused: default has a password (or may not log in from here)
	}
	return err
}

// InitResult says what Init did.
type InitResult struct {
	// Server is the probed server.
	Server Server
	// AnalystDatabase is the database the analyst reads
	// (AnalystDatabase(Database)), created or completed by Init.
	AnalystDatabase string
	// AnalystFile is the users.d file written for the analyst (servers
	// without SQL users), "" otherwise.
	AnalystFile string
	// WriterFile is the users.d file written for the writer (servers
	// without SQL users), "" otherwise.
	WriterFile string
}

// Init creates Database with the Schema tables (LowCardinality where the
// server supports them without an experimental setting) and the Views, as
// Open does, then its analyst database with the published copies, the
// materialized views that keep them current and the analyst views
// (OpenAnalystDatabase), then, when o.Writer.Name is set, the release
// stages' writer (WriterAccount: WriterStatements on a server with SQL
// users, else a users.d file, infra/clickhouse.WriteWriterUser, that
// allows only the release and analyst databases), then, when
// o.Analyst.Name is set, the read-only analyst on the analyst database
// only: AnalystStatements where the server has SQL users, else a users.d
// file in o.UsersDir (infra/clickhouse.WriteAnalystUser: profile readonly,
// allow_databases = the analyst database). On a server with SQL users it
// checks with SHOW GRANTS FOR that each user holds exactly what crowdlog
// grants (ErrExtraGrants otherwise). It waits, bounded by AnalystWait,
// until the writer can log in and read releases and the analyst can log
// in and read completed_releases (CheckAnalyst) with supported settings.
//
// Before it creates anything Init refuses, as an error saying what to do:
// a server whose user default logs in without a password
// (CheckDefaultPassword, ErrPasswordlessDefault) unless
// o.AllowPasswordlessDefault; a server older than MinVersion or an
// administrator's session with a ResultSettings value
// (ErrUnsupportedServer); an analyst or writer whose name or password the
// statements cannot carry; users to create on a server without SQL users
// and no o.UsersDir (ErrNoSQLUsers); on a server with SQL users an
// administrator that may not read system.users, and an analyst or writer
// already defined in users.xml/users.d (ErrExtraGrants). A failure after
// that (a lost connection, a refused statement) leaves the steps done so
// far; every step is idempotent, so rerunning Init completes the job:
// it keeps the data, adds what an upgrade added to the analyst database,
// backfills what the copies lack and replaces the users and their
// passwords. Init works with the Login of ctx
// (infra/clickhouse.WithLogin), the administrator. ctx bounds the call
// (DefaultTimeout when it has no deadline).
func Init(ctx context.Context, o InitOptions) (InitResult, error) {
	if o.Database == "" {
		o.Database = DefaultDatabase
	}
	if !identRE.MatchString(o.Database) {
		return InitResult{}, fmt.Errorf("release: database name %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes)", o.Database)
	}
	a := o.Analyst
	a.Database = AnalystDatabase(o.Database)
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	if !o.AllowPasswordlessDefault {
		if err := CheckDefaultPassword(ctx, o.Addr); err != nil {
			return InitResult{}, err
		}
	}
	admin, err := dial(ctx, o.Addr, "default")
	if err != nil {
		return InitResult{}, err
	}
	defer admin.Close()
	s, err := probe(ctx, admin)
	if err != nil {
		return InitResult{Server: s}, err
	}
	res := InitResult{Server: s}
	if err := checkInitUsers(o, a, s); err != nil {
		return res, err
	}
	if s.SQLUsers {
		for _, u := range []struct{ name, role string }{{o.Writer.Name, "writer"}, {a.Name, "analyst"}} {
			if u.name == "" {
				continue
			}
			if err := checkUserStorage(ctx, admin, s.Version, u.name, u.role); err != nil {
				return res, err
			}
		}
	} else if (a.Name != "" || o.Writer.Name != "") && o.UsersDir == "" {
		return res, fmt.Errorf("release: ClickHouse %s at %s: %w, its users live in users.xml and users.d: give the server's users.d directory (--users-d, e.g. /etc/clickhouse-server/users.d on its machine, or --dir of `crowdlog clickhouse`)",
			s.Version, o.Addr, ErrNoSQLUsers)
	}
	w, err := Open(ctx, o.Addr, o.Database)
	if err != nil {
		return res, err
	}
	w.Close()
	if err := initStep("release-database"); err != nil {
		return res, err
	}
	if res.AnalystDatabase, err = OpenAnalystDatabase(ctx, o.Addr, o.Database); err != nil {
		return res, err
	}
	if err := initStep("analyst-database"); err != nil {
		return res, err
	}
	if o.Writer.Name != "" {
		if res.WriterFile, err = initWriter(ctx, o, o.Database, res.Server); err != nil {
			return res, err
		}
		if err := initStep("writer"); err != nil {
			return res, err
		}
	}
	if a.Name == "" {
		return res, nil
	}
	if res.Server.SQLUsers {
		if err := createAnalyst(ctx, admin, o.Addr, a); err != nil {
			return res, err
		}
	} else {
		path, err := clickhouse.WriteAnalystUser(o.UsersDir, clickhouse.AnalystUser{Name: a.Name, Password: a.Password, Database: a.Database, Networks: o.Networks})
		if err != nil {
			return res, err
		}
		res.AnalystFile = path
	}
	if err := initStep("analyst"); err != nil {
		return res, err
	}
	wait := o.AnalystWait
	if wait <= 0 {
		wait = DefaultAnalystWait
	}
	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		err := CheckAnalyst(wctx, o.Addr, a)
		if err == nil || errors.Is(err, ErrUnsupportedServer) {
			return res, err
		}
		select {
		case <-wctx.Done():
			return res, fmt.Errorf("release: analyst %s could not read %s.completed_releases within %s (is %s the users.d directory the server reads? see its log): %w",
				a.Name, a.Database, wait, o.UsersDir, err)
		case <-tick.C:
		}
	}
}

// checkInitUsers checks that the users Init is to create on server s can
// be written as statements (SQL users) or users.d files, before anything
// is created.
func checkInitUsers(o InitOptions, a Analyst, s Server) error {
	if a.Name != "" && a.Name == o.Writer.Name {
		return fmt.Errorf("release: the analyst and the writer are both %s: give them different names (the analyst is read-only, the writer may insert)", a.Name)
	}
	if s.SQLUsers {
		if a.Name != "" {
			if _, err := AnalystStatements(a); err != nil {
				return err
			}
		}
		if o.Writer.Name != "" {
			if _, err := WriterStatements(o.Writer, o.Database); err != nil {
				return err
			}
		}
		return nil
	}
	if a.Name != "" {
		if _, err := clickhouse.AnalystUsersXML(clickhouse.AnalystUser{Name: a.Name, Password: a.Password, Database: a.Database, Networks: o.Networks}); err != nil {
			return err
		}
	}
	if o.Writer.Name != "" {
		if _, err := clickhouse.WriterUsersXML(clickhouse.WriterUser{Name: o.Writer.Name, Password: o.Writer.Password,
			Databases: []string{o.Database, AnalystDatabase(o.Database)}, Networks: o.WriterNetworks}); err != nil {
			return err
		}
	}
	return nil
}

// initHook, when set, is called by Init after each step ("release-database",
// "analyst-database", "writer", "analyst") and its error stops Init there:
// tests interrupt Init with it and check that a rerun completes the job.
var initHook func(step string) error

func initStep(step string) error {
	if initHook == nil {
		return nil
	}
	if err := initHook(step); err != nil {
		return fmt.Errorf("release: init interrupted after step %s: %w", step, err)
	}
	return nil
}

// CheckAnalyst logs in at addr as a (password a.Password, database
// a.Database, the analyst database), refuses a session whose settings
// change what the views return (ErrUnsupportedServer, naming the setting:
// the analyst's settings profile has one of ResultSettings at another
// value) and reads completed_releases. nil means the analyst exists and
// may read the views as crowdlog wrote them. ctx bounds the call
// (DefaultTimeout when it has no deadline).
func CheckAnalyst(ctx context.Context, addr string, a Analyst) error {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	conn, err := DialAs(ctx, addr, a.Database, a.Name, a.Password)
	if err != nil {
		return err
	}
	defer conn.Close()
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return fmt.Errorf("release: analyst %s reads version(): %w", a.Name, err)
	}
	if err := checkSettings(ctx, conn, version, a.Name); err != nil {
		return err
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM completed_releases").Scan(&n); err != nil {
		return fmt.Errorf("release: analyst %s reads %s.completed_releases: %w", a.Name, a.Database, err)
	}
	return nil
}

// DialAs opens a native-protocol connection to addr as user with password,
// in database, and pings it: what an analyst's client does. The caller
// closes the connection. ctx bounds the ping.
func DialAs(ctx context.Context, addr, database, user, password string) (driver.Conn, error) {
	conn, err := clickhouse.Open(&chgo.Options{
		Addr:        []string{addr},
		Protocol:    chgo.Native,
		Auth:        chgo.Auth{Database: database, Username: user, Password: password},
		TLS:         clickhouse.LoginFrom(ctx).TLS,
		DialTimeout: 10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("release: open ClickHouse %s as %s: %w", addr, user, err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("release: ClickHouse at %s as %s in %s: %w", addr, user, database, err)
	}
	return conn, nil
}
