// Package clickhouseinit is the ClickHouse admin steps: a local server
// from a directory (`crowdlog clickhouse`) and the release schema, the
// analyst database and the users (`crowdlog clickhouse init`,
// release.Init).
package clickhouseinit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/release"
)

// ServerHelp is the help of `crowdlog clickhouse`.
const ServerHelp = `clickhouse starts Debian's clickhouse-server with its own config in DIR
(127.0.0.1 only, free ports, data kept in DIR across restarts), writes the
addresses to DIR/addr.env (CH_TCP=host:port, CH_TCP_PORT, CH_HTTP) and runs
until interrupted. Needs: apt-get install -y clickhouse-server clickhouse-client

'crowdlog clickhouse init' creates the schema, the analyst database (published
copies and views) and a read-only analyst user on it (or on any server).`

// ServerOptions are the flags of `crowdlog clickhouse`.
type ServerOptions struct {
	Dir string // server directory (config, data, logs)
}

// AddFlags adds --dir to f.
func (o *ServerOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Dir, "dir", "clickhouse-data", "server directory (config, data, logs)")
}

// Run starts the server in o.Dir, writes its addresses to w and to
// DIR/addr.env, and serves until ctx ends or the server exits.
func (o *ServerOptions) Run(ctx context.Context, w io.Writer) error {
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	s, err := clickhouse.Start(ctx, abs)
	if err != nil {
		return err
	}
	defer s.Stop()
	env, err := s.WriteAddrEnv(abs)
	if err != nil {
		return err
	}
	fmt.Fprint(w, env)
	select {
	case <-ctx.Done():
	case <-s.Done():
		return fmt.Errorf("clickhouse-server exited; see %s", s.LogPath)
	}
	return nil
}

// PasswordEnv is the environment variable of the analyst's password when
// no --password-file is given.
const PasswordEnv = "CROWDLOG_ANALYST_PASSWORD"

// InitHelp is the help of `crowdlog clickhouse init`.
const InitHelp = `init creates --database with the release tables (LowCardinality columns
where the server supports them without an experimental setting), then its
analyst database <database>` + release.AnalystDatabaseSuffix + ` (crowdlog_analyst): copies of what
was released (completed releases only, the ledger, PDD days), the
materialized views that keep them current as the release stage writes, and
the analyst views (docs/sql.md). Then a read-only user --analyst (none with
--analyst ""): SELECT on the analyst database only, readonly = 1 (no INSERT,
DDL, SET or table function). The analyst cannot read the release database's
raw tables (interrupted releases, stored noise draws).

The server is --clickhouse (native protocol, the TCP port; init works as user
default), or the local server of 'crowdlog clickhouse --dir DIR' (its
DIR/addr.env). On ClickHouse 20.4 and later the analyst is made with
CREATE USER … DEFAULT ROLE NONE SETTINGS readonly = 1, REVOKE ALL ON *.* and
GRANT SELECT ON <analyst db>.*; init then reads SHOW GRANTS FOR each user it
made and refuses one that holds anything more (a global or source grant such
as FILE, URL, S3, REMOTE, a role, a grant option), and refuses a user of the
same name in the server's users.xml/users.d (delete crowdlog-analyst.xml and
crowdlog-writer.xml there after upgrading from 18.16). On older
servers (Debian's 18.16) users live in users.xml/users.d: init writes
users.d/crowdlog-analyst.xml into --users-d (DIR/users.d with --dir; on a
packaged server /etc/clickhouse-server/users.d, run on its machine), and
the server loads it within seconds. init then logs in as the analyst and
reads the views, or fails.

Before it creates anything init refuses a server older than ` + release.MinVersion + ` and a session
whose settings change what the views return (join_use_nulls, limit, offset,
overflow modes other than throw: docs/operations.md, "Supported servers"),
naming the version or the setting; after a later failure, rerun it: every
step is idempotent and the rerun completes the job.

The password is the first line of --password-file, else $` + PasswordEnv + `.
A --password-file that does not exist yet is created with a random password
(mode 0600): init never prints a password. Rerunning init keeps the data, completes the
analyst database (new views after an upgrade, anything not yet copied),
replaces every view and materialized view that another crowdlog version
created (logged at Info; run init after upgrading crowdlog or ClickHouse)
and replaces the analyst's password. Run it before the release stage starts, or
again after it: rows released in between are copied then.

With --writer NAME it also creates the user the release stages write as
(--clickhouse-user NAME on 'crowdlog release'): not the administrator, and
allowed only the release database and its analyst database (users.d
crowdlog-writer.xml with allow_databases on 18.16; CREATE USER and GRANT
SELECT, INSERT, CREATE TABLE, CREATE VIEW, ALTER on both, no DROP, on
current servers). Its password is --writer-password, given as
CROWDLOG_WRITER_PASSWORD_FILE=PATH (or CROWDLOG_WRITER_PASSWORD), never on
the command line (refused there). init itself logs in with --clickhouse-user
(default: the administrator, user default) and refuses a server whose user
default logs in without a password: there any user, the writer included,
reads every database through remote('127.0.0.1', db.table) as default. Give
default a password first (--insecure-passwordless-default, implied by
--dir, is for crowdlog's own loopback development server only).`

// InitOptions are the flags of `crowdlog clickhouse init`: release.Init's
// options, and where the server's address and the analyst's password
// come from. Complete resolves them; Run creates everything.
type InitOptions struct {
	release.InitOptions
	Dir          string // a running `crowdlog clickhouse --dir` server
	PasswordFile string // the analyst's password, first line
	// generated: the analyst's password was drawn here and written to
	// PasswordFile (never printed).
	generated bool
}

// AddFlags adds the flags of `crowdlog clickhouse init` to f, filling o.
func (o *InitOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Addr, "clickhouse", "", "ClickHouse native-protocol address HOST:PORT (default: CH_TCP of --dir's addr.env; --addr: the former spelling)")
	f.StringVar(&o.Dir, "dir", "", "directory of a running `crowdlog clickhouse --dir` server (address and users.d)")
	f.StringVar(&o.Database, "database", release.DefaultDatabase, "release database (tables); the analyst reads <database>"+release.AnalystDatabaseSuffix)
	f.StringVar(&o.Analyst.Name, "analyst", "analyst", `read-only user to create ("" = none)`)
	f.StringVar(&o.PasswordFile, "password-file", "", "file whose first line is the analyst's password (else $"+PasswordEnv+"); a missing file is created with a random one, mode 0600")
	f.StringVar(&o.UsersDir, "users-d", "", "users.d directory of a server without CREATE USER (18.16); default DIR/users.d with --dir")
	f.StringSliceVar(&o.Networks, "analyst-network", nil, "addresses or CIDR masks the users.d analyst may connect from (default 127.0.0.1, ::1)")
	f.StringVar(&o.Writer.Name, "writer", "", `user the release stages write as, limited to the release and analyst databases ("" = none)`)
	f.StringVar(&o.Writer.Password, "writer-password", "", "password of --writer")
	config.MarkSecret(f, "writer-password")
	f.StringSliceVar(&o.WriterNetworks, "writer-network", nil, "addresses or CIDR masks the users.d writer may connect from (default 127.0.0.1, ::1)")
	f.DurationVar(&o.AnalystWait, "wait", release.DefaultAnalystWait, "how long to wait for the analyst's first login")
	f.BoolVar(&o.AllowPasswordlessDefault, "insecure-passwordless-default", false, "proceed although user default logs in without a password (a development or test server only: every user there can read every database through remote() as default); implied by --dir")
}

// Complete takes the server from Dir (its address and users.d, unless
// given) and the analyst's password from PasswordFile (created with a
// random one when missing), else getenv's PasswordEnv (neither: a
// config.UsageError); then checks that a server is named and
// that a writer has a password (config.UsageError).
func (o *InitOptions) Complete(getenv func(string) string) error {
	if err := o.fromDir(); err != nil {
		return err
	}
	if o.Addr == "" {
		return errors.New("give --clickhouse HOST:PORT (the native TCP port) or --dir of a running `crowdlog clickhouse`")
	}
	if err := o.analystPassword(getenv); err != nil {
		return err
	}
	if o.Writer.Name != "" && o.Writer.Password == "" {
		return config.UsageError{Err: errors.New("--writer needs --writer-password (give it as CROWDLOG_WRITER_PASSWORD_FILE=PATH)")}
	}
	return nil
}

// fromDir fills the address and users.d of crowdlog's own loopback
// server in Dir (whose user default has no password).
func (o *InitOptions) fromDir() error {
	if o.Dir == "" {
		return nil
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	if o.Addr == "" {
		if o.Addr, err = clickhouse.ReadAddrEnv(abs); err != nil {
			return err
		}
	}
	if o.UsersDir == "" {
		o.UsersDir = clickhouse.UsersDir(abs)
	}
	o.AllowPasswordlessDefault = true
	return nil
}

// analystPassword sets the analyst's password (none without an analyst).
func (o *InitOptions) analystPassword(getenv func(string) string) error {
	switch {
	case o.Analyst.Name == "":
	case o.PasswordFile != "":
		data, err := os.ReadFile(o.PasswordFile)
		if errors.Is(err, fs.ErrNotExist) {
			return o.newPasswordFile()
		}
		if err != nil {
			return fmt.Errorf("read --password-file: %w", err)
		}
		o.Analyst.Password, _, _ = strings.Cut(strings.TrimRight(string(data), "\r\n"), "\n")
	case getenv(PasswordEnv) != "":
		o.Analyst.Password = getenv(PasswordEnv)
	default:
		return config.UsageError{Err: fmt.Errorf("give the analyst's password: --password-file FILE (created with a random password, mode 0600, when it does not exist) or $%s; init never prints a password", PasswordEnv)}
	}
	return nil
}

// newPasswordFile draws the analyst's password (128 random bits) and
// creates PasswordFile with it (mode 0600; never over an existing file).
func (o *InitOptions) newPasswordFile() error {
	pw := rand.Text()
	f, err := os.OpenFile(o.PasswordFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create --password-file: %w", err)
	}
	if _, err := f.WriteString(pw + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("write --password-file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write --password-file: %w", err)
	}
	o.Analyst.Password, o.generated = pw, true
	return nil
}

// Run creates the schema, the analyst database and the users
// (release.Init) and writes what it made to w.
func (o *InitOptions) Run(ctx context.Context, w io.Writer) error {
	res, err := release.Init(ctx, o.InitOptions)
	if err != nil {
		return err
	}
	o.print(w, res)
	return nil
}

// print writes what Init made, and where a generated password is (never
// the password).
func (o *InitOptions) print(w io.Writer, res release.InitResult) {
	fmt.Fprintf(w, "ClickHouse %s at %s: database %s, tables and views ready (LowCardinality: %v); analyst database %s ready\n",
		res.Server.Version, o.Addr, o.Database, res.Server.LowCardinality, res.AnalystDatabase)
	switch {
	case o.Analyst.Name == "":
	case res.AnalystFile != "":
		fmt.Fprintf(w, "analyst %s (read-only, database %s) in %s\n", o.Analyst.Name, res.AnalystDatabase, res.AnalystFile)
	default:
		fmt.Fprintf(w, "analyst %s (read-only, database %s) created with CREATE USER and GRANT SELECT\n", o.Analyst.Name, res.AnalystDatabase)
	}
	switch {
	case o.Writer.Name == "":
	case res.WriterFile != "":
		fmt.Fprintf(w, "writer %s (databases %s and %s only) in %s\n", o.Writer.Name, o.Database, res.AnalystDatabase, res.WriterFile)
	default:
		fmt.Fprintf(w, "writer %s created with CREATE USER and GRANT on %s and %s\n", o.Writer.Name, o.Database, res.AnalystDatabase)
	}
	if o.generated {
		fmt.Fprintf(w, "analyst password: a random one, in %s (mode 0600)\n", o.PasswordFile)
	}
}
