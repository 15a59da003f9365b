package main

import (
	"fmt"
	"math"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/pipelines/simulate"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
)

func simulateCmd() *cobra.Command {
	var o simulate.Options
	var out, format string
	c := &cobra.Command{
		Use:   "simulate --input LOG [--app query] [--out DIR]",
		Short: "CrowdLogging §4: what each policy would release as k grows (CSV and plots)",
		Long: `simulate reads an AOL log and, without any cryptography or services, computes
for every policy (ft-a, ft-u, dp-a, dp-u, zealous) the fraction of impressions
and of distinct artifacts that would be released at thresholds k = 1..--max-k
(CrowdLogging §4, Figure 3). DP policies use the paper's ε = ln 10 and
δ = 1/(U+1) by default and, for each k, the largest d (m for ZEALOUS) whose
threshold is at most k; each user keeps its d most recent artifacts, as the
clients do. Writes DIR/APP.csv and DIR/APP-impressions.svg,
DIR/APP-artifacts.svg (see docs/policies.md).

It also computes, with the noise and in closed form, the expected number of
artifacts (and share of impressions) that dp-a, dp-u (d = --dp-params),
zealous (m = --dp-params), dp-su (window d = --dp-params) and dp-gsu
(m = --gsu-params) release at
(--epsilon, --delta), beside Google's
PreAggSelectPartition on the users' m most recent distinct artifacts at the
same (ε, δ): DIR/APP-dp.csv and DIR/APP-dp.svg, and a table on stdout.

Examples:
  crowdlog simulate --input testdata/aol-top1000.tsv.gz --app query --out sim
  crowdlog simulate --input testdata/aol-top1000.tsv.gz --app query --out sim --shamir-k 1 --dp-params 1,2,3,5,10,20,100`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			r, err := simulate.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			csvPath, plots, err := simulate.WriteFiles(out, r.App+".csv", format, r)
			if err != nil {
				return err
			}
			dpCSV, dpPlots, err := simulate.WriteFiles(out, r.App+"-dp.csv", format, r.DP)
			if err != nil {
				return err
			}
			if err := r.WriteSummary(os.Stdout); err != nil {
				return err
			}
			fmt.Println()
			if err := r.DP.WriteSummary(os.Stdout); err != nil {
				return err
			}
			fmt.Println("wrote", csvPath, plots, dpCSV, dpPlots)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Input, "input", "", "AOL TSV log (plain or .gz) (required)")
	f.StringVar(&o.App, "app", "query", "mining application: "+fmt.Sprint(apps.Apps()))
	appFlags(f, &o.AppOptions)
	f.IntVar(&o.MaxK, "max-k", 160, "largest threshold k")
	f.Float64Var(&o.Epsilon, "epsilon", math.Ln10, "ε of the DP policies (paper: ln 10)")
	f.Float64Var(&o.Delta, "delta", 0, "δ of the DP policies; 0 = 1/(U+1) (paper)")
	f.IntVar(&o.MaxUsers, "max-users", 0, "only the first N users of the log (0 = all)")
	f.IntSliceVar(&o.DP.Params, "dp-params", simulate.DefaultDPParams, "d (dp-a, dp-u; dp-su: window) and m (zealous, google-preagg) of the expected-release comparison")
	f.IntSliceVar(&o.DP.GSUParams, "gsu-params", simulate.DefaultGSUParams, "m of the dp-gsu rows (each client's m most frequent distinct artifacts)")
	f.Float64Var(&o.DP.CountShare, "count-share", policy.DefaultCountShare, "dp-a, dp-u: share of ε spent on the noisy released counts")
	f.Float64Var(&o.DP.Slack, "slack", policy.DefaultSlack, "dp-a, dp-u: c in shamir-k = floor(k0 − c·b)")
	f.IntVar(&o.DP.ShamirK, "shamir-k", 0, "dp-a, dp-u: Shamir threshold; zealous: τ; dp-su, dp-gsu: 0 = 2; 0 = derived per d (docs/policies.md)")
	f.StringVar(&out, "out", "simulate", "output directory for the CSV and plots")
	f.StringVar(&format, "format", "svg", "plot format: svg or png")
	c.MarkFlagRequired("input")
	c.AddCommand(zipfLogCmd())
	c.AddCommand(simulatePDDCmd())
	return c
}

// simulatePDDCmd is `crowdlog simulate pdd`: the Private Data Donor §4
// simulation with crowdlog's dropout recovery (pipelines/simulate.RunPDD,
// docs/pdd-simulation.md).
func simulatePDDCmd() *cobra.Command {
	o := simulate.PDDOptions{Grid: simulate.DefaultPDDGrid()}
	var out, format, list string
	c := &cobra.Command{
		Use:   "pdd [--users 100000] [--days 100] [--out DIR]",
		Short: "PDD §4: data lost by group-blinded daily aggregation, per group size and delay, with and without recovery",
		Long: `pdd simulates Private Data Donor's daily aggregation (Primault et al., WWW
2019, §4) without cryptography: U users over D days, active days from
Beta(2.2170, 0.4634), searches per active day from Normal(1.3020, 0.7603),
search content drawn from the query instances of --input, counted over the
monitored keywords. For every group size, delay and mode (pdd, pdd+heuristic,
recovery, recovery+heuristic) it reports the mean relative error (PDD eq. 4)
and the confidence (§4.5). One population serves every configuration.
Writes DIR/pdd.csv and DIR/pdd-*.svg (see docs/pdd-simulation.md).

Example:
  crowdlog simulate pdd --input testdata/aol-top1000.tsv.gz --out sim`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			kw, err := keywords.Load(list)
			if err != nil {
				return err
			}
			o.Keywords = kw
			r, err := simulate.RunPDD(cmd.Context(), o)
			if err != nil {
				return err
			}
			csvPath, plots, err := simulate.WriteFiles(out, "pdd.csv", format, r)
			if err != nil {
				return err
			}
			if err := r.WriteTable(os.Stdout); err != nil {
				return err
			}
			fmt.Printf("\nsearch content: %d query instances (%d distinct) of %s; took %s (load %s, draw %s, evaluate %s)\n",
				r.Instances, r.Queries, o.Input, (r.LoadTime + r.GenerateTime + r.EvaluateTime).Round(time.Millisecond),
				r.LoadTime.Round(time.Millisecond), r.GenerateTime.Round(time.Millisecond), r.EvaluateTime.Round(time.Millisecond))
			fmt.Println("wrote", csvPath, plots)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Input, "input", "testdata/aol-top1000.tsv.gz", "AOL TSV log (plain or .gz) whose query instances are the search content")
	f.StringVar(&list, "keywords", keywords.DefaultName, "monitored keyword list: a file, one keyword a line, or the embedded "+keywords.DefaultName)
	f.IntVar(&o.Users, "users", 100000, "simulated users U (paper: 100,000)")
	f.IntVar(&o.Days, "days", 100, "simulated days D (paper: 100)")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of every random draw (same seed, same numbers)")
	f.IntSliceVar(&o.Grid.GroupSizes, "group-sizes", o.Grid.GroupSizes, "group sizes gs")
	f.IntSliceVar(&o.Grid.Delays, "delays", o.Grid.Delays, "delays δ in days")
	f.IntVar(&o.Grid.RecoveryDays, "recovery-days", o.Grid.RecoveryDays, "recovery window R in days after the delay (recovery modes)")
	f.StringVar(&out, "out", "simulate", "output directory for pdd.csv and the plots")
	f.StringVar(&format, "format", "svg", "plot format: svg or png")
	return c
}

// policyFlags registers the DP policy parameters (release/policy.Params,
// docs/policies.md) on f; run, ingest and release must agree on them.
// Every flag's default is 0 = policy.New's default, the default of the
// pipeline file's field too (TestPolicyDefaultsFlagsMatchFile); ε and U
// have none.
func policyFlags(f *pflag.FlagSet, p *policy.Params) {
	f.Float64Var(&p.Epsilon, "epsilon", 0, "DP policies: privacy quota ε of one release, required (the paper uses ln 10 = 2.302585092994046); the pipeline file's policy.epsilon")
	f.Float64Var(&p.Delta, "delta", 0, "DP policies: δ, below 1/U (zealous: below 1); 0 = 1/(U+1)")
	f.IntVar(&p.D, "d", 0, "dp-a, dp-u: artifacts per user per epoch (the most recent d); zealous, dp-gsu: m; dp-su: the window of most recent distinct artifacts a client picks its most frequent one from; 0 = the policy's default as in a pipeline file (dp-gsu 20, the others 1)")
	f.IntVar(&p.Users, "users", 0, "DP policies: number of users U an epoch is planned for, required: public configuration, never counted from the input (the pipeline file's policy.users)")
	f.Float64Var(&p.CountShare, "count-share", 0, fmt.Sprintf("dp-a, dp-u: share of ε spent on the noisy released counts; 0 = %v", policy.DefaultCountShare))
	f.IntVar(&p.ShamirK, "shamir-k", 0, "dp-a, dp-u: Shamir threshold; zealous: τ; dp-su, dp-gsu: 0 = 2, 1 = the aggregator decrypts every report; 0 = derived (docs/policies.md)")
	f.Float64Var(&p.Slack, "slack", 0, fmt.Sprintf("dp-a, dp-u: c in shamir-k = floor(k0 − c·b); 0 = %v", policy.DefaultSlack))
	f.Float64Var(&p.Lambda, "lambda", 0, "zealous: noise scale λ ≥ 2m/ε; 0 = 2m/ε")
}

// budgetFlags registers the privacy budget of DP releases.
func budgetFlags(f *pflag.FlagSet, dataset *string, b *release.Budget) {
	f.StringVar(dataset, "dataset", "default", "privacy budget name: DP releases spend from (dataset, epoch)")
	f.Float64Var(&b.Epsilon, "budget-epsilon", 0, "ε budget per (dataset, epoch); a release over it is refused (0 = no limit)")
	f.Float64Var(&b.Delta, "budget-delta", 0, "δ budget per (dataset, epoch) (0 = no limit)")
}

func zipfLogCmd() *cobra.Command {
	var o simulate.ZipfLogOptions
	var out string
	c := &cobra.Command{
		Use:   "zipf-log --out FILE [--users N] [--seed S]",
		Short: "write a synthetic Zipf search log (AOL TSV, gzipped) made from public words only",
		Long: `zipf-log writes the second log of docs/policies.md's DP comparison: --users
users whose queries are one or two words of the embedded google-10000-english
list drawn from a Zipf law (--exponent), re-issuing their own earlier queries
with probability --repeat, with heavy-tailed activity (median 20 queries).
The same flags write the same bytes.

Example:
  crowdlog simulate zipf-log --out zipf.tsv.gz
  crowdlog simulate --input zipf.tsv.gz --app query --out sim-zipf`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := os.Create(out)
			if err != nil {
				return fmt.Errorf("zipf-log: %w", err)
			}
			if err := simulate.WriteZipfLog(f, o); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("zipf-log: %w", err)
			}
			fmt.Println("wrote", out)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&out, "out", "", "output file (gzipped AOL TSV)")
	f.IntVar(&o.Users, "users", 2000, "number of users")
	f.Uint64Var(&o.Seed, "seed", 1, "random seed")
	f.Float64Var(&o.Exponent, "exponent", 1.1, "Zipf exponent s > 1 over the word ranks")
	f.Float64Var(&o.Repeat, "repeat", 0.4, "probability that a query repeats one of the user's earlier queries")
	c.MarkFlagRequired("out")
	return c
}
