package vectors

// Help is the long help of `crowdlog aggregate-vectors`.
const Help = `aggregate-vectors joins Kafka consumer group crowdlog-vectors on topic
"vectors" (more processes = more partitions served), sums each group's
blinded vectors, asks the coordinator (NATS, signed with --sign-key) to
unmask each group once every member submitted or the delay passed (double
masking: survivors' self masks, dropped members' pair masks), verifies every
revealed share against its dealer's commitments, and writes each group's
outcome to "group-sums". Rosters, day ticks and commitments are applied
only when signed by the coordinator's key (--coordinator-pub) for this
topic, partition and campaign, within their validity; unsigned, foreign and
replayed ones are dropped and counted
(crowdlog_vectors_control_refused_total{reason}).
State is rebuilt by replaying a partition on assignment (restart-safe).`
