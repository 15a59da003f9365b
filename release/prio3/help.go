package prio3

// Help is the part of `crowdlog release-pdd`'s help about --mode prio3.
const Help = `With --mode prio3 it is the collector of PDD's Prio3 mode instead: it reads
Kafka topic "prio3-shares", where the leader aggregator writes both aggregate
shares (its own and the helper's, each sealed to --collector-key) of every
collected batch (--campaign, day), adds each matching pair and writes the
day's per-keyword sums of --keywords (the campaign's list, --blacklist words
left out) to the same tables and view, with confidence 1: every prepared
report is counted. --kind, --bits, --max-weight and --min-batch-size must be
the aggregators' values; a batch under --min-batch-size is never released.
Exact counts only (no --epsilon). Idempotent on restart: a day already in
pdd_rounds is never written again.`
