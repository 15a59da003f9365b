package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/report"
)

func reportCmd() *cobra.Command {
	var o report.Options
	var out, pwFile string
	const passwordEnv = "CROWDLOG_ANALYST_PASSWORD"
	c := &cobra.Command{
		Use:   "report --clickhouse HOST:PORT [--database crowdlog] [--user analyst --password-file FILE] [--out report.html]",
		Short: "Write one self-contained HTML page with plots of what was released",
		Long: `report reads the release tables in ClickHouse and writes one HTML page that
needs nothing else to open (inline CSS and SVG plots, no script, nothing loaded
from elsewhere):

  - every completed release (app, epoch, policy, k) with its totals;
  - the share of impressions released per epoch: released impressions against
    the reports still encrypted when the epoch closed (undecrypted summary);
  - per release (the --max-releases most recent), its --top artifacts by
    impressions and what stayed encrypted (counts only);
  - the privacy ledger: ε and δ spent per (dataset, epoch), against the budget
    given by --budget-epsilon / --budget-delta (the database does not record it).

Like the analyst views it shows only completed releases (keys with a row in
releases). Everything on the page was released, so public by construction.

It reads the analyst database of --database (crowdlog_analyst for crowdlog,
made by 'crowdlog clickhouse init'), so the read-only analyst can run it:
--user analyst with the password from --password-file or $` + passwordEnv + `.
As user default (no --user) it reads the release database itself when no
analyst database exists.

Example:
  crowdlog report --clickhouse 127.0.0.1:9000 --user analyst --password-file pw --out report.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			switch {
			case pwFile != "":
				data, err := os.ReadFile(pwFile)
				if err != nil {
					return fmt.Errorf("read --password-file: %w", err)
				}
				o.Password, _, _ = strings.Cut(strings.TrimRight(string(data), "\r\n"), "\n")
			case o.User != "":
				o.Password = os.Getenv(passwordEnv)
			}
			d, err := report.Load(cmd.Context(), o)
			if err != nil {
				return err
			}
			if err := report.WriteFile(out, d); err != nil {
				return err
			}
			fmt.Printf("wrote %s: %d releases, %d ledger rows\n", out, len(d.Releases), len(d.Ledger))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Addr, "clickhouse", "", "ClickHouse native address host:port (the TCP port, not HTTP) (required)")
	f.StringVar(&o.Database, "database", release.DefaultDatabase, "release database (the report reads its analyst database, <database>"+release.AnalystDatabaseSuffix+", when it exists)")
	f.StringVar(&o.User, "user", "", `ClickHouse user, e.g. the analyst of 'crowdlog clickhouse init' ("" = default, no password)`)
	f.StringVar(&pwFile, "password-file", "", "file whose first line is --user's password (else $"+passwordEnv+")")
	f.StringVar(&out, "out", "report.html", "HTML file to write (replaced atomically)")
	f.IntVar(&o.Top, "top", report.DefaultTop, "artifacts shown per release")
	f.IntVar(&o.MaxReleases, "max-releases", report.DefaultMaxReleases, "releases given a section of their own, most recent first")
	f.Float64Var(&o.Budget.Epsilon, "budget-epsilon", 0, "ε budget per (dataset, epoch) to draw against the ledger (0 = none shown)")
	f.Float64Var(&o.Budget.Delta, "budget-delta", 0, "δ budget per (dataset, epoch) to show against the ledger (0 = none shown)")
	_ = c.MarkFlagRequired("clickhouse")
	return c
}
