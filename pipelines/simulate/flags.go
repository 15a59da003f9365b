package simulate

import (
	"fmt"
	"math"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/release/policy"
)

// AddFlags adds the flags of `crowdlog simulate` to f, filling o.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Input, "input", "", "AOL TSV log (plain or .gz) (required)")
	f.StringVar(&o.App, "app", "query", "mining application: "+fmt.Sprint(apps.Apps()))
	o.AppOptions.AddFlags(f)
	f.IntVar(&o.MaxK, "max-k", 160, "largest threshold k")
	f.Float64Var(&o.Epsilon, "epsilon", math.Ln10, "ε of the DP policies (paper: ln 10)")
	f.Float64Var(&o.Delta, "delta", 0, "δ of the DP policies; 0 = 1/(U+1) (paper)")
	f.IntVar(&o.MaxUsers, "max-users", 0, "only the first N users of the log (0 = all)")
	f.IntSliceVar(&o.DP.Params, "dp-params", DefaultDPParams, "d (dp-a, dp-u; dp-su: window) and m (zealous, google-preagg) of the expected-release comparison")
	f.IntSliceVar(&o.DP.GSUParams, "gsu-params", DefaultGSUParams, "m of the dp-gsu rows (each client's m most frequent distinct artifacts)")
	f.Float64Var(&o.DP.CountShare, "count-share", policy.DefaultCountShare, "dp-a, dp-u: share of ε spent on the noisy released counts")
	f.Float64Var(&o.DP.Slack, "slack", policy.DefaultSlack, "dp-a, dp-u: c in shamir-k = floor(k0 − c·b)")
	f.IntVar(&o.DP.ShamirK, "shamir-k", 0, "dp-a, dp-u: Shamir threshold; zealous: τ; dp-su, dp-gsu: 0 = 2; 0 = derived per d (docs/policies.md)")
}

// DefaultPDDOptions are the options of `crowdlog simulate pdd` without
// flags (the paper's U and D, DefaultPDDGrid).
func DefaultPDDOptions() PDDOptions {
	return PDDOptions{Input: "testdata/aol-top1000.tsv.gz", Users: 100000, Days: 100, Seed: 1, Grid: DefaultPDDGrid(),
		Prio3Bits: []int{p3.DefaultBits, 1}, Prio3MaxWeights: []int{10}}
}

// AddFlags adds the flags of `crowdlog simulate pdd` to f, filling o and
// *list (the keyword list file, or the name of the embedded list, that
// keywords.Load reads into o.Keywords); the values in o are the defaults
// shown.
func (o *PDDOptions) AddFlags(f *pflag.FlagSet, list *string) {
	f.StringVar(&o.Input, "input", o.Input, "AOL TSV log (plain or .gz) whose query instances are the search content")
	f.StringVar(list, "keywords", keywords.DefaultName, "monitored keyword list: a file, one keyword a line, or the embedded "+keywords.DefaultName)
	f.IntVar(&o.Users, "users", o.Users, "simulated users U (paper: 100,000)")
	f.IntVar(&o.Days, "days", o.Days, "simulated days D (paper: 100)")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "seed of every random draw (same seed, same numbers)")
	f.IntSliceVar(&o.Grid.GroupSizes, "group-sizes", o.Grid.GroupSizes, "group sizes gs")
	f.IntSliceVar(&o.Grid.Delays, "delays", o.Grid.Delays, "delays δ in days")
	f.IntVar(&o.Grid.RecoveryDays, "recovery-days", o.Grid.RecoveryDays, "recovery window R in days after the delay (recovery modes)")
	f.IntSliceVar(&o.Prio3Bits, "prio3-bits", o.Prio3Bits, "Prio3 rows: SumVec bit widths b (counts clipped to 2^b − 1; 0: none)")
	f.IntSliceVar(&o.Prio3MaxWeights, "prio3-max-weights", o.Prio3MaxWeights, "Prio3 rows: presence max weights w (at most w keywords per client and day; 0: none)")
}

// AddFlags adds the flags of `crowdlog simulate zipf-log` (but --out) to
// f, filling o.
func (o *ZipfLogOptions) AddFlags(f *pflag.FlagSet) {
	f.IntVar(&o.Users, "users", 2000, "number of users")
	f.Uint64Var(&o.Seed, "seed", 1, "random seed")
	f.Float64Var(&o.Exponent, "exponent", 1.1, "Zipf exponent s > 1 over the word ranks")
	f.Float64Var(&o.Repeat, "repeat", 0.4, "probability that a query repeats one of the user's earlier queries")
}

// Files is where a simulation writes its CSV and plots (WriteFiles).
type Files struct {
	Dir    string // --out
	Format string // --format: svg or png
}

// AddFlags adds --out (described by dirHelp) and --format to f.
func (o *Files) AddFlags(f *pflag.FlagSet, dirHelp string) {
	f.StringVar(&o.Dir, "out", "simulate", dirHelp)
	f.StringVar(&o.Format, "format", "svg", "plot format: svg or png")
}
