package prio3

// Help is the long help of `crowdlog aggregate-prio3`.
const Help = `aggregate-prio3 runs one of the two aggregators of PDD's Prio3 mode
(draft-ietf-ppm-dap with a one-round Prio3, draft-irtf-cfrg-vdaf-14): the
leader or the helper, run by two operators that must not collude. Each
client uploads once per day per campaign through the onion relays; only
the sum of both aggregators' shares of a batch (campaign, day) is ever
revealed, and only to the collector (crowdlog release-pdd --mode prio3).

--role leader reads the uploads from Kafka topic "prio3-uploads" (the
partition its campaign's key hashes to, and the one it moves to when the
topic grows, found within --partition-refresh; offsets kept in its
snapshot, past skipped records too), skips unopened every record keyed for
another campaign (relay b keys each upload with its campaign; counted in
crowdlog_prio3_uploads_skipped_total), opens each with its HPKE key
(KEYS/prio3-leader.key), runs its half of the proof check and sends the
reports, in requests of at most --max-request-bytes, to the helper over
NATS request/reply on "crowdlog.prio3.helper" (retried; the helper answers
a retry idempotently). It refuses uploads of another campaign, of a closed
day (late), of a day after tomorrow by its clock (future) and report ids it
has seen (replay). Once its clock passes a day's end + --grace it asks the
helper for the batch's aggregate share with its report count and checksum
and writes both shares, sealed to the collector, to Kafka topic
"prio3-shares" (key CAMPAIGN/DAY).

--role helper answers on "crowdlog.prio3.helper": it opens its input share
(KEYS/prio3-helper.key), completes the proof check, commits the report
and answers with the prep message or the reason it rejected the report
(the leader counts it as helper_REASON). It hands a batch's share only when
the batch is closed by its own clock, the leader's count and checksum equal
its own and the batch holds at least --min-batch-size reports.

Every request to the helper is signed by the leader operator's Ed25519 key
(--sign-key, default KEYS/prio3-leader-sign.key, made by 'crowdlog keys
generate --role prio3-leader') over a fresh request id, its issue time and
the whole request (campaign, day, reports or count and checksum). Before
it changes any state the helper checks the reply subject (a requester
inbox only), the signature under --leader-pub (default
KEYS/prio3-leader-sign.key.pub, from the leader's public bundle), the
issue time (within 5 minutes of its wall clock) and the id (not seen
before); anything else is refused without an answer and counted in
crowdlog_prio3_requests_refused_total{reason}.

Both read the verify key file (--verify-key, written by 'crowdlog keys
prio3-verify'; the same file at both operators only) and snapshot their
state to --state-dir (one append-only log per batch and a small snapshot;
the helper before every answer, the leader before every request and after
every step): a restarted aggregator resumes without losing or
double-counting a report. --retain drops a collected batch's state that
long after it closes (default 720h; an uncollected batch is never
dropped). Run one process per role and campaign.

--epsilon ε (default 1) adds integer Laplace noise of scale S/ε to each
keyword's entry of this aggregator's aggregate share (S = --l1 for sumvec,
default 20, the bound an honest client keeps its daily sum of counts
within; --max-weight for presence), drawn once per batch and kept in the
snapshot, so a re-collection or a restart resends the same noisy share.
Either aggregator's noise alone makes each person's whole day ε-DP, so the
release stays private if the other aggregator skips its noise, colludes
with the collector, or (the leader) pads a batch with reports of its own
to isolate one client: --min-batch-size does not protect against that,
the noise does. The released totals carry both draws (variance 4(S/ε)²).
Give both aggregators and release-pdd --mode prio3 the same ε and --l1:
each share carries its ε authenticated, and the collector releases only
shares with its own. Exact shares (--epsilon 0) need --exact-shares,
which gives that protection up.
--delete-applied-uploads (leader) deletes, every --delete-applied-every
(default 30s), the records of "prio3-uploads" its snapshots have passed
(Kafka DeleteRecords below the offset no restart needs again), never past
the first record of another campaign or without a key on a partition: the
brokers keep about the leader's lag of sealed uploads instead of the
topic's retention. Its Kafka user needs Delete on the topic ('crowdlog
topics --acl prio3-delete=USER'); a failed request is logged and counted
(crowdlog_prio3_uploads_delete_failures_total), never stops the leader.

The leader decides each day's status (released, or withheld below
min_batch_size) from a noisy count, once per day: released iff the report
count n ≥ --min-batch-size and n + Laplace(1/ε_c) ≥ --min-batch-size +
⌈ln(1/(2δ))/ε_c⌉ (ε_c = --status-epsilon, default 0.1 × --epsilon; δ =
--status-delta, default 1e-6; at the defaults the margin is 132), and it
writes a withheld notice for every closed day of the campaign without
reports too (from --campaign-start, default the earliest day it could take
a report for when it first ran). So the status is (ε_c, δ)-DP: a reader
cannot tell from it whether one person took part, at 0 against 1 report
nor at min − 1 against min. --status-epsilon 0 is the exact DAP rule.
--clock-file replaces the wall clock for log replays and tests:
the file holds the current time as RFC 3339 and is re-read every step.

Metrics (--metrics): crowdlog_prio3_uploads_total (leader),
crowdlog_prio3_prepared_total, crowdlog_prio3_rejected_total{reason},
crowdlog_prio3_collect_refused_total{reason},
crowdlog_prio3_collected_total, each with role="leader" or "helper";
crowdlog_prio3_uploads_skipped_total, crowdlog_prio3_uploads_deleted_total
and crowdlog_prio3_uploads_delete_failures_total (leader);
crowdlog_prio3_requests_refused_total{reason} (helper: reply_subject,
unsigned, bad_signature, stale, request_replay).`
