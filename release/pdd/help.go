package pdd

// Help is the help of `crowdlog release-pdd`.
const Help = `release-pdd reads Kafka topic "group-sums", and once every group of a round
has an outcome writes that day's counts (optionally with Laplace noise,
--epsilon) and confidence to ClickHouse (tables pdd_keyword_counts,
pdd_rounds; view keyword_daily). Idempotent on restart. A noisy day spends
L·ε (δ = 0) from the privacy ledger of --dataset for that day, once; a day
over --budget-epsilon is refused and nothing of it is released.`
