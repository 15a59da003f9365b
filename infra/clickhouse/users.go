package clickhouse

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
)

// AnalystFile is the name of the file WriteAnalystUser writes in a users.d
// directory.
const AnalystFile = "crowdlog-analyst.xml"

// ReadonlyProfile is the settings profile of the analyst user in users.d:
// readonly = 1 (SELECT only: no INSERT, no DDL, no SET or SETTINGS clause,
// and on 18.16 no table function — merge(), remote(), cluster(),
// numbers() — which readonly = 2 would allow).
const ReadonlyProfile = "readonly"

// AnalystUser is a read-only user of a ClickHouse server whose users live
// in users.xml and users.d/ (ClickHouse 18.16 has no CREATE USER).
//
// What such a file can restrict on 18.16, measured (docs/threat-model.md,
// release.TestAttackAnalystRawTables): allow_databases refuses every other
// database ("Access denied to database"), also to views, Merge and
// Distributed tables that read it on the user's behalf (a view runs with
// its reader's rights), and hides it from system.tables, system.columns,
// system.databases, system.parts and system.mutations; readonly = 1
// refuses writes, DDL, SET, SETTINGS and table functions, and KILL QUERY
// of other users' queries. It cannot restrict single tables (per-table row
// filters under <databases> are ignored by 18.16), nor system.processes
// and system.query_log, which show every user's query text.
type AnalystUser struct {
	// Name is the user name, an identifier ([A-Za-z_][A-Za-z0-9_]*).
	Name string
	// Password is the user's password; only its SHA-256 is written.
	Password string
	// Database is the only database the user may use (allow_databases):
	// crowdlog's analyst database (release.AnalystDatabase), never the
	// release database with its raw tables.
	Database string
	// Networks are the addresses the user may connect from (<ip> entries:
	// addresses or CIDR masks); 127.0.0.1 and ::1 when empty.
	Networks []string
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// dbNameRE accepts database names of up to 127 bytes (a release database
// name of up to 63 plus the analyst database's suffix).
var dbNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,126}$`)

// UsersDir returns the users.d directory a server started by Start in dir
// reads (config files merged into dir/users.xml, reloaded by the running
// server within a few seconds).
func UsersDir(dir string) string { return filepath.Join(dir, "users.d") }

// AnalystUsersXML renders u as a users.d file: a profile ReadonlyProfile
// with readonly = 1 and the user with password_sha256_hex, that profile,
// the default quota, its networks and allow_databases = u.Database. Valid
// for 18.16 and current releases (root element <yandex>). Errors for a
// name or database that is not an identifier, an empty password or a
// network with characters outside [0-9A-Fa-f.:/].
func AnalystUsersXML(u AnalystUser) (string, error) {
	if !identRE.MatchString(u.Name) {
		return "", fmt.Errorf("clickhouse: analyst name %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)", u.Name)
	}
	if u.Name == "default" {
		return "", errors.New("clickhouse: the analyst may not be user default (the administrator): give it its own name")
	}
	if !dbNameRE.MatchString(u.Database) {
		return "", fmt.Errorf("clickhouse: database %q is not a plain identifier", u.Database)
	}
	if u.Password == "" {
		return "", errors.New("clickhouse: the analyst needs a password")
	}
	return userFileXML("a read-only analyst user", ReadonlyProfile, 1, u.Name, u.Password, u.Networks, []string{u.Database})
}

// WriteAnalystUser writes AnalystUsersXML(u) to usersDir/AnalystFile
// (usersDir created if needed; the file replaced atomically, mode 0644: it holds the SHA-256 of the password, not the password) and
// returns its path. A server reading usersDir (UsersDir of a Start
// directory, or /etc/clickhouse-server/users.d) picks the user up on its
// next users-config reload, within seconds, without a restart.
func WriteAnalystUser(usersDir string, u AnalystUser) (string, error) {
	text, err := AnalystUsersXML(u)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(usersDir, 0o755); err != nil {
		return "", fmt.Errorf("clickhouse: create %s (is it writable?): %w", usersDir, err)
	}
	path := filepath.Join(usersDir, AnalystFile)
	if err := atomicfile.WriteFile(path, []byte(text), 0o644); err != nil {
		return "", fmt.Errorf("clickhouse: install %s: %w", path, err)
	}
	return path, nil
}

// WriterFile is the name of the file WriteWriterUser writes in a users.d
// directory.
const WriterFile = "crowdlog-writer.xml"

// WriterProfile is the settings profile of the writer user in users.d:
// readonly = 0 (INSERT and the DDL of its own databases). On 18.16 such a
// user may also call table functions (remote, url, file, merge, numbers,
// mysql, jdbc, odbc), and no setting short of readonly = 1, which refuses
// INSERT, stops it: measured, allow_ddl = 0 and readonly = 2 leave them
// open (and allow_ddl = 0 refuses the writer's ALTER … DELETE). merge()
// and remote(…, db.table) are held to allow_databases; remote() logs in
// as user default, so the server's default must have a password
// (release.CheckDefaultPassword, docs/operations.md).
const WriterProfile = "crowdlog_writer"

// WriterUser is the ClickHouse user of the release stages on a server
// whose users live in users.xml and users.d/ (18.16): it may use only its
// Databases (allow_databases: the release database and its analyst
// database, where the materialized views insert on its behalf), so it
// cannot read or change any other database, and it is not the
// administrator (user default). 18.16 has no grants below a database, so
// within its databases it may also drop; a server with SQL users gets
// grants without DROP instead (release.CreateWriter).
type WriterUser struct {
	// Name is the user name, an identifier other than default.
	Name string
	// Password is the user's password; only its SHA-256 is written.
	Password string
	// Databases are the only databases the user may use (identifiers).
	Databases []string
	// Networks are the addresses the user may connect from (<ip>
	// entries); 127.0.0.1 and ::1 when empty.
	Networks []string
}

// WriterUsersXML renders u as a users.d file: a profile WriterProfile with
// readonly = 0 and the user with password_sha256_hex, that profile, the
// default quota, its networks and allow_databases = u.Databases. Errors as
// AnalystUsersXML's, and for a user without databases.
func WriterUsersXML(u WriterUser) (string, error) {
	if !identRE.MatchString(u.Name) {
		return "", fmt.Errorf("clickhouse: writer name %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)", u.Name)
	}
	if u.Name == DefaultUser {
		return "", errors.New("clickhouse: the writer may not be user default (the administrator): give it its own name")
	}
	if u.Password == "" {
		return "", errors.New("clickhouse: the writer needs a password")
	}
	if len(u.Databases) == 0 {
		return "", errors.New("clickhouse: the writer needs its databases (the release database and its analyst database)")
	}
	for _, d := range u.Databases {
		if !dbNameRE.MatchString(d) {
			return "", fmt.Errorf("clickhouse: database %q is not a plain identifier", d)
		}
	}
	return userFileXML("the release stages' writer user", WriterProfile, 0, u.Name, u.Password, u.Networks, u.Databases)
}

// userFileXML renders one users.d file: a settings profile with readonly
// set, and the user name with password_sha256_hex of password, that
// profile, the default quota, networks (networksXML) and
// allow_databases; the root element is <yandex> (18.16 and current
// releases). The caller has checked the names.
func userFileXML(what, profile string, readonly int, name, password string, networks, databases []string) (string, error) {
	ips, err := networksXML(networks)
	if err != nil {
		return "", err
	}
	var dbs strings.Builder
	for _, d := range databases {
		fmt.Fprintf(&dbs, "                <database>%s</database>\n", d)
	}
	sum := sha256.Sum256([]byte(password))
	return fmt.Sprintf(`<?xml version="1.0"?>
<!-- Written by crowdlog clickhouse init: %[6]s. -->
<yandex>
    <profiles>
        <%[1]s>
            <readonly>%[7]d</readonly>
        </%[1]s>
    </profiles>
    <users>
        <%[2]s>
            <password_sha256_hex>%[3]s</password_sha256_hex>
            <networks>
%[4]s            </networks>
            <profile>%[1]s</profile>
            <quota>default</quota>
            <allow_databases>
%[5]s            </allow_databases>
        </%[2]s>
    </users>
</yandex>
`, profile, name, hex.EncodeToString(sum[:]), ips, dbs.String(), what, readonly), nil
}

// networksXML renders networks (127.0.0.1 and ::1 when empty) as <ip>
// lines; an entry with characters outside [0-9A-Fa-f.:/] is an error.
func networksXML(nets []string) (string, error) {
	if len(nets) == 0 {
		nets = []string{"127.0.0.1", "::1"}
	}
	var ips strings.Builder
	for _, n := range nets {
		if n == "" || strings.Trim(n, "0123456789abcdefABCDEF.:/") != "" {
			return "", fmt.Errorf("clickhouse: network %q is not an IP address or CIDR mask", n)
		}
		fmt.Fprintf(&ips, "                <ip>%s</ip>\n", n)
	}
	return ips.String(), nil
}

// WriteWriterUser writes WriterUsersXML(u) to usersDir/WriterFile as
// WriteAnalystUser does (atomically, mode 0644) and returns its path.
func WriteWriterUser(usersDir string, u WriterUser) (string, error) {
	text, err := WriterUsersXML(u)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(usersDir, 0o755); err != nil {
		return "", fmt.Errorf("clickhouse: create %s (is it writable?): %w", usersDir, err)
	}
	path := filepath.Join(usersDir, WriterFile)
	if err := atomicfile.WriteFile(path, []byte(text), 0o644); err != nil {
		return "", fmt.Errorf("clickhouse: install %s: %w", path, err)
	}
	return path, nil
}
