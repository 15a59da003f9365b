package attack

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/ingest/apps"
)

// Help is the help of `crowdlog attack`.
const Help = `attack runs the attacks of docs/attacks.md against a deployment's data, as a
thief of the aggregator (its pending state, or the Kafka "reports" topic plus
the aggregator key) would. Output is counts only: found artifacts are never
printed (they are, by definition, below the threshold k).

  crowdlog attack snapshot --state demo-state --out pending.jsonl
  crowdlog attack probe --snapshot pending.jsonl --candidates words.txt --log log.tsv.gz
  crowdlog attack frequency --snapshot pending.jsonl --aux other.tsv.gz --seed demo-state/keys/randomness.keys`

// SnapshotHelp is the help of `crowdlog attack snapshot`.
const SnapshotHelp = `snapshot reads every report of topic "reports" (from a 'crowdlog run --state'
directory's broker data with its keys/aggregator*.key, or from a broker with
--key), opens the aggregator layers and writes one line per (tag, commitment)
group below threshold: app, epoch, policy, k, tag, commitment hash, reports,
distinct shares. Epoch closes are ignored: the topic keeps closed epochs'
reports, so a thief rebuilds them too.`

// SnapshotOptions are the flags of `crowdlog attack snapshot`.
type SnapshotOptions struct {
	State    string   // a `crowdlog run --state` directory
	Kafka    string   // bootstrap brokers, comma-separated (instead of State)
	KeyPaths []string // aggregator key files with Kafka
	Out      string   // the snapshot file written
}

// AddFlags adds the flags of `crowdlog attack snapshot` to f, filling o.
func (o *SnapshotOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.State, "state", "", "a `crowdlog run --state` directory (broker data in kafka/, keys in keys/)")
	f.Var(config.NewList(&o.Kafka), "kafka", "Kafka bootstrap brokers, comma-separated host:port list (instead of --state)")
	f.StringSliceVar(&o.KeyPaths, "key", nil, "aggregator key file with --kafka (repeat for rotated keys)")
	f.StringVar(&o.Out, "out", "pending.jsonl", "snapshot file to write")
}

// Run rebuilds the pending groups (Snapshot, from the first bootstrap
// broker) and writes them to o.Out, with a line on w.
func (o *SnapshotOptions) Run(ctx context.Context, w io.Writer) error {
	groups, err := Snapshot(ctx, o.State, strings.Split(o.Kafka, ",")[0], o.KeyPaths)
	if err != nil {
		return err
	}
	if err := WriteSnapshotFile(o.Out, groups); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d pending groups written to %s\n", len(groups), o.Out)
	return nil
}

// ProbeHelp is the help of `crowdlog attack probe`.
const ProbeHelp = `probe computes, for every candidate artifact, the tag a report of it would carry
and counts the pending groups identified (CrowdLogging §5.4). Without --seed
it uses hash mode (ω = hash of the artifact): this finds every pending
candidate when reports were sealed in hash mode, none when they were sealed
with VOPRF randomness. With --seed (the randomness service's epoch key
directory keys/randomness.keys, or a seed file of the older layout: a
collusion, or a stolen keys directory) it evaluates the OPRF itself; epochs
whose keys were destroyed cannot be probed.
Candidates: lines of --candidates files and the artifacts --app mines from --log.`

// ProbeOptions are the flags of `crowdlog attack probe`.
type ProbeOptions struct {
	Snapshot   string   // snapshot file (SnapshotOptions.Out)
	Candidates []string // candidate lists, one artifact a line
	Log        string   // a log whose mined artifacts are candidates too
	App        string   // the application that mines Log
	Seed       string   // randomness key directory or seed file; "" = hash mode
}

// AddFlags adds the flags of `crowdlog attack probe` to f, filling o.
func (o *ProbeOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Snapshot, "snapshot", "pending.jsonl", "snapshot file (crowdlog attack snapshot)")
	f.StringSliceVar(&o.Candidates, "candidates", nil, "candidate list, one artifact per line (repeatable)")
	f.StringVar(&o.Log, "log", "", "AOL log whose mined artifacts are added to the candidates")
	f.StringVar(&o.App, "app", "query", "mining application for --log")
	f.StringVar(&o.Seed, "seed", "", "randomness epoch key directory (keys/randomness.keys) or older seed file: probe with the real epoch keys (collusion)")
}

// Run probes the snapshot with the candidates and writes the counts to w.
func (o *ProbeOptions) Run(w io.Writer) error {
	groups, err := ReadSnapshotFile(o.Snapshot)
	if err != nil {
		return err
	}
	cands, err := Candidates(o.Candidates, o.Log, o.App)
	if err != nil {
		return err
	}
	omega, mode := Omega(LocalOmegaFunc), "hash mode (no key)"
	if o.Seed != "" {
		if omega, err = SeedOmega(o.Seed); err != nil {
			return err
		}
		mode = "OPRF with the epoch key from " + o.Seed
	}
	res, err := Probe(groups, cands, omega)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "offline probe, %s: %d candidates, found %d of %d pending artifacts\n", mode, res.Candidates, res.Found, res.Pending)
	return nil
}

// FrequencyHelp is the help of `crowdlog attack frequency`.
const FrequencyHelp = `frequency ranks the pending groups by (distinct shares, reports) and the
auxiliary log's artifacts by (users, instances) and guesses that equal ranks
are equal artifacts (Kumar et al., WWW 2007). To score the guesses the
auditor needs ground truth: --seed (the randomness epoch key directory, or a
seed file of the older layout) maps the auxiliary artifacts to their tags. It
also measures the counts-only summary, exact and coarsened into power-of-two
buckets (aggregator CoarseSummary).`

// FrequencyOptions are the flags of `crowdlog attack frequency`.
type FrequencyOptions struct {
	Snapshot string // snapshot file (SnapshotOptions.Out)
	Aux      string // the attacker's auxiliary log
	App      string // the application that mines Aux
	Seed     string // randomness key directory or seed file: ground truth
	Top      int    // also score the Top most frequent pending groups
}

// AddFlags adds the flags of `crowdlog attack frequency` to f, filling o.
func (o *FrequencyOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Snapshot, "snapshot", "pending.jsonl", "snapshot file (crowdlog attack snapshot)")
	f.StringVar(&o.Aux, "aux", "", "auxiliary AOL log (the attacker's knowledge)")
	f.StringVar(&o.App, "app", "query", "mining application")
	f.StringVar(&o.Seed, "seed", "", "randomness epoch key directory (keys/randomness.keys) or older seed file (ground truth for scoring)")
	f.IntVar(&o.Top, "top", 100, "also score the N most frequent pending groups")
}

// Run matches the snapshot's groups against the auxiliary log by rank,
// scores the guesses and the summary's leak with the ground truth, and
// writes the counts to w.
func (o *FrequencyOptions) Run(w io.Writer) error {
	groups, err := ReadSnapshotFile(o.Snapshot)
	if err != nil {
		return err
	}
	a, err := apps.Lookup(o.App)
	if err != nil {
		return err
	}
	counts, err := LogCounts(o.Aux, a)
	if err != nil {
		return err
	}
	omega, err := SeedOmega(o.Seed)
	if err != nil {
		return err
	}
	names := make([]string, len(counts))
	for i, c := range counts {
		names[i] = c.Artifact
	}
	truth, err := Probe(groups, names, omega)
	if err != nil {
		return err
	}
	res := RankMatch(groups, counts, truth.Artifacts, o.Top)
	fmt.Fprintf(w, "rank matching: %d pending groups, %d guesses, %d correct (top %d: %d correct); %d pending artifacts occur in the aux log\n",
		res.Tags, res.Guesses, res.Correct, res.TopN, res.CorrectTop, truth.Found)
	for _, coarse := range []bool{false, true} {
		rows, ident, matched := SummaryLeak(groups, coarse, counts, 1, truth.Artifacts)
		fmt.Fprintf(w, "summary (coarse=%v): %d rows, %d name a single artifact, %d of those matched\n", coarse, rows, ident, matched)
	}
	return nil
}
