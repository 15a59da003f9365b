package report

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/release"
)

// PasswordEnv is the environment variable of --user's password when no
// --password-file is given.
const PasswordEnv = "CROWDLOG_ANALYST_PASSWORD"

// Help is the help of `crowdlog report`.
const Help = `report reads the release tables in ClickHouse and writes one HTML page that
needs nothing else to open (inline CSS and SVG plots, no script, nothing loaded
from elsewhere):

  - every completed release (app, epoch, policy, k) with its totals;
  - the share of impressions released per epoch: released impressions against
    the reports still encrypted when the epoch closed (undecrypted summary);
  - per release (the --max-releases most recent), its --top artifacts by
    impressions and what stayed encrypted (counts only);
  - the privacy ledger: ε and δ spent per (dataset, epoch), against the budget
    given by --budget-epsilon / --budget-delta (the database does not record it);
  - per Private Data Donor campaign (crowdlog pdd, groups or Prio3 mode): the
    daily released counts of its --pdd-top keywords and of every --keyword,
    with the 95% band of the Laplace noise on noisy days, each day's
    confidence (clients decrypted / clients active), and a table of the days
    released and withheld, with the reason (lost, budget, below minimum batch).

Like the analyst views it shows only completed releases (keys with a row in
releases). Everything on the page was released, so public by construction.

It reads the analyst database of --database (crowdlog_analyst for crowdlog,
made by 'crowdlog clickhouse init'), so the read-only analyst can run it:
--user analyst with the password from --password-file or $` + PasswordEnv + `.
As user default (no --user) it reads the release database itself when no
analyst database exists.

Examples:
  crowdlog report --clickhouse 127.0.0.1:9000 --user analyst --password-file pw --out report.html
  crowdlog report --clickhouse 127.0.0.1:9000 --keyword weather --keyword flu --out report.html`

// Flags are the flags of `crowdlog report`: Load's options, the page
// written and where the password comes from.
type Flags struct {
	Options
	Out          string // the HTML file written
	PasswordFile string // --user's password, first line
}

// AddFlags adds the flags of `crowdlog report` to f, filling o.
func (o *Flags) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Addr, "clickhouse", "", "ClickHouse native address host:port (the TCP port, not HTTP) (required)")
	f.StringVar(&o.Database, "database", release.DefaultDatabase, "release database (the report reads its analyst database, <database>"+release.AnalystDatabaseSuffix+", when it exists)")
	f.StringVar(&o.User, "user", "", `ClickHouse user, e.g. the analyst of 'crowdlog clickhouse init' ("" = default, no password)`)
	f.StringVar(&o.PasswordFile, "password-file", "", "file whose first line is --user's password (else $"+PasswordEnv+")")
	f.StringVar(&o.Out, "out", "report.html", "HTML file to write (replaced atomically)")
	f.IntVar(&o.Top, "top", DefaultTop, "artifacts shown per release")
	f.IntVar(&o.PDDTop, "pdd-top", DefaultPDDTop, "keywords followed per PDD campaign, by released count over its days")
	f.StringArrayVar(&o.Keywords, "keyword", nil, "a keyword to follow in every PDD campaign besides its top ones (repeatable)")
	f.IntVar(&o.MaxReleases, "max-releases", DefaultMaxReleases, "releases given a section of their own, most recent first")
	f.Float64Var(&o.Budget.Epsilon, "budget-epsilon", 0, "ε budget per (dataset, epoch) to draw against the ledger (0 = none shown)")
	f.Float64Var(&o.Budget.Delta, "budget-delta", 0, "δ budget per (dataset, epoch) to show against the ledger (0 = none shown)")
}

// Complete sets the password: the first line of PasswordFile, else (with
// a User) getenv's PasswordEnv.
func (o *Flags) Complete(getenv func(string) string) error {
	switch {
	case o.PasswordFile != "":
		data, err := os.ReadFile(o.PasswordFile)
		if err != nil {
			return fmt.Errorf("read --password-file: %w", err)
		}
		o.Password, _, _ = strings.Cut(strings.TrimRight(string(data), "\r\n"), "\n")
	case o.User != "":
		o.Password = getenv(PasswordEnv)
	}
	return nil
}

// Run loads what was released, writes the page to o.Out and a line to w.
func (o *Flags) Run(ctx context.Context, w io.Writer) error {
	d, err := Load(ctx, o.Options)
	if err != nil {
		return err
	}
	if err := WriteFile(o.Out, d); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s: %d releases, %d ledger rows, %d PDD campaigns\n", o.Out, len(d.Releases), len(d.Ledger), len(d.PDD))
	return nil
}
