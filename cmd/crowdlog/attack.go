package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/pipelines/attack"
)

func attackCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "attack",
		Short: "Auditor's tools: attack a stolen state directory or aggregator snapshot (docs/attacks.md)",
		Long: `attack runs the attacks of docs/attacks.md against a deployment's data, as a
thief of the aggregator (its pending state, or the Kafka "reports" topic plus
the aggregator key) would. Output is counts only: found artifacts are never
printed (they are, by definition, below the threshold k).

  crowdlog attack snapshot --state demo-state --out pending.jsonl
  crowdlog attack probe --snapshot pending.jsonl --candidates words.txt --log log.tsv.gz
  crowdlog attack frequency --snapshot pending.jsonl --aux other.tsv.gz --seed demo-state/keys/randomness.keys`,
	}
	c.AddCommand(attackSnapshotCmd(), attackProbeCmd(), attackFrequencyCmd())
	return c
}

func attackSnapshotCmd() *cobra.Command {
	var state, broker, out string
	var keyPaths []string
	c := &cobra.Command{
		Use:   "snapshot (--state DIR | --kafka ADDR --key FILE) --out FILE",
		Short: "Rebuild the aggregator's pending state from the reports topic and write it as JSON lines",
		Long: `snapshot reads every report of topic "reports" (from a 'crowdlog run --state'
directory's broker data with its keys/aggregator*.key, or from a broker with
--key), opens the aggregator layers and writes one line per (tag, commitment)
group below threshold: app, epoch, policy, k, tag, commitment hash, reports,
distinct shares. Epoch closes are ignored: the topic keeps closed epochs'
reports, so a thief rebuilds them too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			groups, err := attack.Snapshot(cmd.Context(), state, strings.Split(broker, ",")[0], keyPaths) // a bootstrap broker
			if err != nil {
				return err
			}
			if err := attack.WriteSnapshotFile(out, groups); err != nil {
				return err
			}
			fmt.Printf("%d pending groups written to %s\n", len(groups), out)
			return nil
		},
	}
	c.Flags().StringVar(&state, "state", "", "a `crowdlog run --state` directory (broker data in kafka/, keys in keys/)")
	c.Flags().Var(newListFlag(&broker), "kafka", "Kafka bootstrap brokers, comma-separated host:port list (instead of --state)")
	c.Flags().StringSliceVar(&keyPaths, "key", nil, "aggregator key file with --kafka (repeat for rotated keys)")
	c.Flags().StringVar(&out, "out", "pending.jsonl", "snapshot file to write")
	return c
}

func attackProbeCmd() *cobra.Command {
	var snap, logPath, app, seed string
	var candFiles []string
	c := &cobra.Command{
		Use:   "probe --snapshot FILE [--candidates FILE]... [--log LOG] [--seed DIR|FILE]",
		Short: "Offline probe: compute tags of candidate artifacts and count pending groups they identify",
		Long: `probe computes, for every candidate artifact, the tag a report of it would carry
and counts the pending groups identified (CrowdLogging §5.4). Without --seed
it uses hash mode (ω = hash of the artifact): this finds every pending
candidate when reports were sealed in hash mode, none when they were sealed
with VOPRF randomness. With --seed (the randomness service's epoch key
directory keys/randomness.keys, or a seed file of the older layout: a
collusion, or a stolen keys directory) it evaluates the OPRF itself; epochs
whose keys were destroyed cannot be probed.
Candidates: lines of --candidates files and the artifacts --app mines from --log.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			groups, err := attack.ReadSnapshotFile(snap)
			if err != nil {
				return err
			}
			cands, err := attack.Candidates(candFiles, logPath, app)
			if err != nil {
				return err
			}
			omega, mode := attack.Omega(attack.LocalOmegaFunc), "hash mode (no key)"
			if seed != "" {
				if omega, err = attack.SeedOmega(seed); err != nil {
					return err
				}
				mode = "OPRF with the epoch key from " + seed
			}
			res, err := attack.Probe(groups, cands, omega)
			if err != nil {
				return err
			}
			fmt.Printf("offline probe, %s: %d candidates, found %d of %d pending artifacts\n", mode, res.Candidates, res.Found, res.Pending)
			return nil
		},
	}
	c.Flags().StringVar(&snap, "snapshot", "pending.jsonl", "snapshot file (crowdlog attack snapshot)")
	c.Flags().StringSliceVar(&candFiles, "candidates", nil, "candidate list, one artifact per line (repeatable)")
	c.Flags().StringVar(&logPath, "log", "", "AOL log whose mined artifacts are added to the candidates")
	c.Flags().StringVar(&app, "app", "query", "mining application for --log")
	c.Flags().StringVar(&seed, "seed", "", "randomness epoch key directory (keys/randomness.keys) or older seed file: probe with the real epoch keys (collusion)")
	return c
}

func attackFrequencyCmd() *cobra.Command {
	var snap, aux, app, seed string
	var top int
	c := &cobra.Command{
		Use:   "frequency --snapshot FILE --aux LOG --seed DIR|FILE",
		Short: "Kumar-style frequency matching of pending tags against an auxiliary log",
		Long: `frequency ranks the pending groups by (distinct shares, reports) and the
auxiliary log's artifacts by (users, instances) and guesses that equal ranks
are equal artifacts (Kumar et al., WWW 2007). To score the guesses the
auditor needs ground truth: --seed (the randomness epoch key directory, or a
seed file of the older layout) maps the auxiliary artifacts to their tags. It
also measures the counts-only summary, exact and coarsened into power-of-two
buckets (aggregator CoarseSummary).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			groups, err := attack.ReadSnapshotFile(snap)
			if err != nil {
				return err
			}
			a, err := apps.Lookup(app)
			if err != nil {
				return err
			}
			counts, err := attack.LogCounts(aux, a)
			if err != nil {
				return err
			}
			omega, err := attack.SeedOmega(seed)
			if err != nil {
				return err
			}
			names := make([]string, len(counts))
			for i, c := range counts {
				names[i] = c.Artifact
			}
			truth, err := attack.Probe(groups, names, omega)
			if err != nil {
				return err
			}
			res := attack.RankMatch(groups, counts, truth.Artifacts, top)
			fmt.Printf("rank matching: %d pending groups, %d guesses, %d correct (top %d: %d correct); %d pending artifacts occur in the aux log\n",
				res.Tags, res.Guesses, res.Correct, res.TopN, res.CorrectTop, truth.Found)
			for _, coarse := range []bool{false, true} {
				rows, ident, matched := attack.SummaryLeak(groups, coarse, counts, 1, truth.Artifacts)
				fmt.Printf("summary (coarse=%v): %d rows, %d name a single artifact, %d of those matched\n", coarse, rows, ident, matched)
			}
			return nil
		},
	}
	c.Flags().StringVar(&snap, "snapshot", "pending.jsonl", "snapshot file (crowdlog attack snapshot)")
	c.Flags().StringVar(&aux, "aux", "", "auxiliary AOL log (the attacker's knowledge)")
	c.Flags().StringVar(&app, "app", "query", "mining application")
	c.Flags().StringVar(&seed, "seed", "", "randomness epoch key directory (keys/randomness.keys) or older seed file (ground truth for scoring)")
	c.Flags().IntVar(&top, "top", 100, "also score the N most frequent pending groups")
	c.MarkFlagRequired("aux")
	c.MarkFlagRequired("seed")
	return c
}
