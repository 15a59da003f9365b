package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/release"
)

func clickhouseCmd() *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:   "clickhouse --dir DIR",
		Short: "Start a local ClickHouse server from a directory (for demos and one-machine use)",
		Long: `clickhouse starts Debian's clickhouse-server with its own config in DIR
(127.0.0.1 only, free ports, data kept in DIR across restarts), writes the
addresses to DIR/addr.env (CH_TCP=host:port, CH_TCP_PORT, CH_HTTP) and runs
until interrupted. Needs: apt-get install -y clickhouse-server clickhouse-client

'crowdlog clickhouse init' creates the schema, the analyst database (published
copies and views) and a read-only analyst user on it (or on any server).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(abs, 0o755); err != nil {
				return err
			}
			s, err := clickhouse.Start(cmd.Context(), abs)
			if err != nil {
				return err
			}
			defer s.Stop()
			env, err := s.WriteAddrEnv(abs)
			if err != nil {
				return err
			}
			fmt.Print(env)
			select {
			case <-cmd.Context().Done():
			case <-s.Done():
				return fmt.Errorf("clickhouse-server exited; see %s", s.LogPath)
			}
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "clickhouse-data", "server directory (config, data, logs)")
	c.AddCommand(clickhouseInitCmd())
	return c
}

func clickhouseInitCmd() *cobra.Command {
	var (
		o           release.InitOptions
		dir, pwFile string
		passwordEnv = "CROWDLOG_ANALYST_PASSWORD"
	)
	c := &cobra.Command{
		Use:   "init (--clickhouse HOST:PORT | --dir DIR) [--database crowdlog] [--analyst NAME] [--writer NAME] [--users-d DIR]",
		Short: "Create the release schema, the analyst database and a read-only analyst user",
		Long: `init creates --database with the release tables (LowCardinality columns
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

The password is the first line of --password-file, else $` + passwordEnv + `,
else a random one, printed once. Rerunning init keeps the data, completes the
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
current servers). Its password is --writer-password, best given as
CROWDLOG_WRITER_PASSWORD_FILE. init itself logs in with --clickhouse-user
(default: the administrator, user default) and refuses a server whose user
default logs in without a password: there any user, the writer included,
reads every database through remote('127.0.0.1', db.table) as default. Give
default a password first (--insecure-passwordless-default, implied by
--dir, is for crowdlog's own loopback development server only).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			if dir != "" {
				abs, err := filepath.Abs(dir)
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
				// crowdlog's own loopback server: its default has no password.
				o.AllowPasswordlessDefault = true
			}
			if o.Addr == "" {
				return errors.New("give --clickhouse HOST:PORT (the native TCP port) or --dir of a running `crowdlog clickhouse`")
			}
			generated := false
			if o.Analyst.Name != "" {
				switch {
				case pwFile != "":
					data, err := os.ReadFile(pwFile)
					if err != nil {
						return fmt.Errorf("read --password-file: %w", err)
					}
					o.Analyst.Password, _, _ = strings.Cut(strings.TrimRight(string(data), "\r\n"), "\n")
				case os.Getenv(passwordEnv) != "":
					o.Analyst.Password = os.Getenv(passwordEnv)
				default:
					o.Analyst.Password, generated = rand.Text(), true // 128 random bits
				}
			}
			if o.Writer.Name != "" && o.Writer.Password == "" {
				return usageError(errors.New("--writer needs --writer-password (give it as CROWDLOG_WRITER_PASSWORD_FILE=PATH)"))
			}
			res, err := release.Init(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Printf("ClickHouse %s at %s: database %s, tables and views ready (LowCardinality: %v); analyst database %s ready\n",
				res.Server.Version, o.Addr, o.Database, res.Server.LowCardinality, res.AnalystDatabase)
			switch {
			case o.Analyst.Name == "":
			case res.AnalystFile != "":
				fmt.Printf("analyst %s (read-only, database %s) in %s\n", o.Analyst.Name, res.AnalystDatabase, res.AnalystFile)
			default:
				fmt.Printf("analyst %s (read-only, database %s) created with CREATE USER and GRANT SELECT\n", o.Analyst.Name, res.AnalystDatabase)
			}
			switch {
			case o.Writer.Name == "":
			case res.WriterFile != "":
				fmt.Printf("writer %s (databases %s and %s only) in %s\n", o.Writer.Name, o.Database, res.AnalystDatabase, res.WriterFile)
			default:
				fmt.Printf("writer %s created with CREATE USER and GRANT on %s and %s\n", o.Writer.Name, o.Database, res.AnalystDatabase)
			}
			if generated {
				fmt.Printf("analyst password (shown once): %s\n", o.Analyst.Password)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Addr, "clickhouse", "", "ClickHouse native-protocol address HOST:PORT (default: CH_TCP of --dir's addr.env; --addr: the former spelling)")
	respell(c, map[string]string{"addr": "clickhouse"})
	f.StringVar(&dir, "dir", "", "directory of a running `crowdlog clickhouse --dir` server (address and users.d)")
	f.StringVar(&o.Database, "database", release.DefaultDatabase, "release database (tables); the analyst reads <database>"+release.AnalystDatabaseSuffix)
	f.StringVar(&o.Analyst.Name, "analyst", "analyst", `read-only user to create ("" = none)`)
	f.StringVar(&pwFile, "password-file", "", "file whose first line is the analyst's password (else $"+passwordEnv+", else a random one)")
	f.StringVar(&o.UsersDir, "users-d", "", "users.d directory of a server without CREATE USER (18.16); default DIR/users.d with --dir")
	f.StringSliceVar(&o.Networks, "analyst-network", nil, "addresses or CIDR masks the users.d analyst may connect from (default 127.0.0.1, ::1)")
	f.StringVar(&o.Writer.Name, "writer", "", `user the release stages write as, limited to the release and analyst databases ("" = none)`)
	f.StringVar(&o.Writer.Password, "writer-password", "", "password of --writer; give it as CROWDLOG_WRITER_PASSWORD_FILE=PATH (or the environment), not on the command line")
	f.StringSliceVar(&o.WriterNetworks, "writer-network", nil, "addresses or CIDR masks the users.d writer may connect from (default 127.0.0.1, ::1)")
	f.DurationVar(&o.AnalystWait, "wait", release.DefaultAnalystWait, "how long to wait for the analyst's first login")
	f.BoolVar(&o.AllowPasswordlessDefault, "insecure-passwordless-default", false, "proceed although user default logs in without a password (a development or test server only: every user there can read every database through remote() as default); implied by --dir")
	return c
}
