package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/report"
)

func reportCmd() *cobra.Command {
	var o report.Options
	var out string
	c := &cobra.Command{
		Use:   "report --clickhouse HOST:PORT [--database crowdlog] [--out report.html]",
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

Example:
  crowdlog report --clickhouse 127.0.0.1:9000 --out report.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
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
	f.StringVar(&o.Database, "database", release.DefaultDatabase, "ClickHouse database holding the release tables")
	f.StringVar(&out, "out", "report.html", "HTML file to write (replaced atomically)")
	f.IntVar(&o.Top, "top", report.DefaultTop, "artifacts shown per release")
	f.IntVar(&o.MaxReleases, "max-releases", report.DefaultMaxReleases, "releases given a section of their own, most recent first")
	f.Float64Var(&o.Budget.Epsilon, "budget-epsilon", 0, "ε budget per (dataset, epoch) to draw against the ledger (0 = none shown)")
	f.Float64Var(&o.Budget.Delta, "budget-delta", 0, "δ budget per (dataset, epoch) to show against the ledger (0 = none shown)")
	_ = c.MarkFlagRequired("clickhouse")
	return c
}
