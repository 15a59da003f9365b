package release

import "github.com/spf13/pflag"

// SummaryHelp is the help of --summary (SummaryMode) on the commands that
// release.
const SummaryHelp = "undecrypted summary published next to each release: coarse (report counts in power-of-two buckets), exact or none; DP releases withhold theirs in every mode"

// AddFlags adds the privacy budget of DP releases to f: --dataset (the
// budget's name, into *dataset) and --budget-epsilon, --budget-delta.
func (b *Budget) AddFlags(f *pflag.FlagSet, dataset *string) {
	f.StringVar(dataset, "dataset", "default", "privacy budget name: DP releases spend from (dataset, epoch)")
	f.Float64Var(&b.Epsilon, "budget-epsilon", 0, "ε budget per (dataset, epoch); a release over it is refused (0 = no limit)")
	f.Float64Var(&b.Delta, "budget-delta", 0, "δ budget per (dataset, epoch) (0 = no limit)")
}
