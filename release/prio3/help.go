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

Noise in prio3 mode is the aggregators' (aggregate-prio3 --epsilon ε,
default 1: each adds integer Laplace noise of scale S/ε per keyword to its
share, S = --l1 for sumvec, the bound on one client's daily sum of counts,
or --max-weight for presence), so each person's whole day is ε-DP. Give
release-pdd the same --epsilon and --l1: each share carries its ε
authenticated and a share with another ε is dropped (epsilon_mismatch),
so a mismatch releases nothing. A noisy day is written as released
(negative counts possible, zero ones left out) with epsilon and max_count
= 2^bits − 1 in pdd_rounds; its report count is not published (active,
grouped, decrypted = 0), since it would tell whether one person took part.
It spends ε per person-day, plus the leader's status ε_c and δ
(--status-epsilon, default 0.1 × --epsilon; --status-delta, default 1e-6:
the day's released/withheld status is a noisy count's threshold), from the
privacy ledger of --dataset for that day, once. A day over
--budget-epsilon is refused; in prio3 mode 0 means a budget of 1.1 per
day. --max-count does not apply.`
