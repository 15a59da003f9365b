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
Idempotent on restart: a day already in pdd_rounds is never written again.

Noise in prio3 mode is the aggregators' (aggregate-prio3 --epsilon ε: each
adds integer Laplace noise of scale Δ/ε per keyword to its share, Δ =
2^bits − 1 or 1 for presence). Give release-pdd the same --epsilon: each
share carries its ε authenticated and a share with another ε is dropped
(epsilon_mismatch), so a mismatch releases nothing. A noisy day is written
as released (negative counts possible, zero ones left out) with epsilon
and max_count = Δ in pdd_rounds, and spends k·ε (δ = 0) from the privacy
ledger of --dataset for that day, once: k = L keywords for sumvec (no
per-client bound on a dense vector's sum), k = --max-weight for presence.
A day over --budget-epsilon is refused. --max-count does not apply.`
