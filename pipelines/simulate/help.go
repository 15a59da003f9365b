package simulate

// Help is the help of `crowdlog simulate`.
const Help = `simulate reads an AOL log and, without any cryptography or services, computes
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
  crowdlog simulate --input testdata/aol-top1000.tsv.gz --app query --out sim --shamir-k 1 --dp-params 1,2,3,5,10,20,100`

// PDDHelp is the help of `crowdlog simulate pdd`.
const PDDHelp = `pdd simulates Private Data Donor's daily aggregation (Primault et al., WWW
2019, §4) without cryptography: U users over D days, active days from
Beta(2.2170, 0.4634), searches per active day from Normal(1.3020, 0.7603),
search content drawn from the query instances of --input, counted over the
monitored keywords. For every group size, delay and mode (pdd, pdd+heuristic,
recovery, recovery+heuristic) it reports the mean relative error (PDD eq. 4)
and the confidence (§4.5). One population serves every configuration.
On the same population it scores Prio3 mode (no groups: a client's report
counts iff it is active within grace = δ+1 days after the day; counts
clipped to 2^b − 1 per --prio3-bits, or presence with at most w keywords
per --prio3-max-weights): delay, confidence (1), coverage, MRE against the
raw counts and bytes per client and day beside the groups modes'.
Writes DIR/pdd.csv, DIR/pdd-modes.csv and DIR/pdd-*.svg (see
docs/pdd-simulation.md).

Example:
  crowdlog simulate pdd --input testdata/aol-top1000.tsv.gz --out sim`

// ZipfLogHelp is the help of `crowdlog simulate zipf-log`.
const ZipfLogHelp = `zipf-log writes the second log of docs/policies.md's DP comparison: --users
users whose queries are one or two words of the embedded google-10000-english
list drawn from a Zipf law (--exponent), re-issuing their own earlier queries
with probability --repeat, with heavy-tailed activity (median 20 queries).
The same flags write the same bytes.

Example:
  crowdlog simulate zipf-log --out zipf.tsv.gz
  crowdlog simulate --input zipf.tsv.gz --app query --out sim-zipf`
