package runner

// RunHelp is the help of `crowdlog run`.
const RunHelp = `run replays a search log as one client per AnonID, through the randomness
service, relays a and b, the Kafka aggregator and the release stage, into
ClickHouse, and prints a summary.

Input: tab-separated, plain or .gz, in AOL columns (AnonID Query QueryTime
[ItemRank ClickURL], header optional) or Excite columns (AnonID QueryTime
Query). QueryTime as 2006-01-02 15:04:05, RFC 3339, Unix seconds or the
Excite logs' yymmddHHMMSS (970916105432 = 1997-09-16 10:54:32) is detected
from the first good line and then required on every line; --time-format
names one of them (aol, rfc3339, unix, excite) or gives any other layout in
Go's reference time (e.g. "02/Jan/2006:15:04:05"). Bad lines are skipped and
counted; a log without a single valid record stops run at once, before any
server starts, with an error naming its first bad lines. --input - reads
stdin: run reads its input more than once, so it first spools it to the file
input.tsv in --state (removed afterwards); a --time-format input is spooled
there the same way, converted to AOL TSV.

Epochs: by default the whole input is one epoch (--epoch, "all"). With
--epoch-length 168h the input is replayed in scheduled epochs: each record
goes to the epoch its QueryTime falls in, named START-LENGTH as the
randomness schedule names them (e.g. 20060227T000000Z-168h, aligned to the
Unix epoch, UTC); each epoch is opened, replayed, closed and released on its
own, so the analyst sees one histogram per week and its trends.

Services: with no --nats/--kafka/--clickhouse, run starts an embedded NATS
server, a Kafka-protocol broker (kfake, data in --state) and a local
ClickHouse server (needs 'apt-get install -y clickhouse-server
clickhouse-client'). Given addresses, it uses them with the same code path a
cluster uses. With --external, the roles (randomness, relay, aggregate,
release) already run elsewhere with the keys in --keys; run then only ingests,
closes the epoch and waits for the release.

Policies: ft-u releases artifacts sent by at least k distinct users, ft-a
those with at least k reports; impressions and users are exact counts. dp-a,
dp-u, zealous, dp-su and dp-gsu (--epsilon and --users required; --delta,
--d, ... default as in a pipeline file) limit every client's artifacts, add
noise, release the normalized items with noisy counts (no variant) and record
the spent (ε, δ) in the ClickHouse table privacy_ledger (docs/policies.md).
U (--users) is public configuration, never counted from --input.

Tokens (on by default): run starts an issuer, gives every AnonID its
own enrolled identity, and each client spends one randomness token per OPRF
element (at most --randomness-tokens per identity and epoch), one report token
per report (at most --report-tokens) and, under ft-u, one ARC credential whose
presentation per artifact makes FT_u count identities, not self-chosen
secrets. The defaults keep the release exact. --tokens off is for comparison
only: it gives up the probe and Sybil protection (logged). With --external,
run enrolls the identities in --keys and uses tokens when an issuer answers
for the epoch within 5 s, else replays without them (logged).

Waits: every wait is bounded and its error names the stage and the counts
reached: --start-timeout for each start-up step, --ingest-timeout for the
replay (default 10 min + 10 ms per record + --spread per round of --workers
clients), --timeout for each wait after it (relays draining, the release
appearing in ClickHouse).

Pipeline: --pipeline FILE (-f) takes the app, policy, parameters, budget,
epoch, tokens and partitions from a pipeline file ('crowdlog pipeline
--help') instead of their flags, which then must not be given.

Examples:
  crowdlog run --input testdata/aol-top1000.tsv.gz --app query --policy ft-u --k 5 --export out.tsv
  crowdlog run -f testdata/pipelines/query-ftu-k5.yaml --input testdata/aol-top1000.tsv.gz --export out.tsv
  zcat excite.log.gz | crowdlog run --input - --app query --policy ft-u --k 5`

// IngestHelp is the help of `crowdlog ingest`.
const IngestHelp = `ingest is the client side. Every AnonID of the log becomes a device (the
embeddable client, ingest.Device) with its own user secret of the epoch, kept
in memory, or on disk under --state DIR/users so that ingest restarted on the
same log and epoch sends nothing twice. A device mines artifacts (--app),
obtains OPRF randomness per artifact from the randomness service (RFC 9497 VOPRF, batched, the service never sees the
artifact; every batch's proof is checked against the epoch's public key, which
is pinned on first use in --keys/randomness.pins and must not change), seals one report per artifact instance, wraps it in three HPKE
layers [relay a, relay b, aggregator] using the public keys in --keys
(relay-a.key.pub, relay-b.key.pub, aggregator.key.pub) and publishes to relay
a. When relays fall behind, publishing waits: nothing is dropped. Before
sending, ingest asks relays a and b which key ids they hold and stops with an
error when one does not hold the id of its key file (its reports would be
dropped); a relay that does not answer is a warning.

Tokens (on by default): every AnonID has its own Ed25519 identity
(under --state DIR/users when given, else in memory) and fetches from the
issuer one randomness token per OPRF element, one report token per report and,
under ft-u, one ARC credential per epoch. The identities must be enrolled at
the issuer; --enroll adds them to the enrollment list in --keys (for an issuer
reading that directory). When no issuer answers for the epoch within 5 s,
or with --tokens off, ingest sends without tokens, which only a deployment that
does not require them accepts.

The epoch must be open before clients send: 'crowdlog randomness open-epoch'
(else randomness requests are refused) and 'crowdlog aggregate open-epoch'
(else the aggregator drops the reports as unknown-epoch). ingest does not
close the epoch: run 'crowdlog aggregate close-epoch' when all clients of the
epoch have sent.`

// PDDHelp is the help of `crowdlog pdd`.
const PDDHelp = `pdd replays an AOL log day by day as Private Data Donor clients (Primault et
al., WWW 2019), one per AnonID: each registers an X25519 key with the
coordinator, pings it on the days it is active (--online active) or every day
(--online all), and for each round it owes sends its keyword counts of that
day, blinded for its group, through relays a and b to Kafka topic "vectors".
The aggregator sums each group once every member submitted; after --delay
days a group with missing members is recovered from the survivors' shares
(t = n/2+1 of them), so the sum of the members who did submit is still
released — never one member's vector alone. The release stage writes
per-day counts and PDD's confidence (clients decrypted / clients active) to
ClickHouse (view keyword_daily).

Monitored keywords: the google-10000-english list (--keywords FILE for
another); --blacklist words are never counted by any client (PDD §6.1).
A day's count of a keyword is the number of query instances that day
containing it: an instance is a run of one user's identical queries that
ends at midnight (UTC, or --timezone ZONE's); a keyword is contained when it
starts and ends at Unicode word boundaries (UAX #29): a whole word where
words are spaced, any substring of a run of ideographs (Chinese, Japanese).
--dropout P takes each client offline on each day with probability P: it
does not ping that day, so it is not grouped for the day, and what it owes
(vectors, recovery answers) waits for its next ping; with --epsilon > 0
each client clips each keyword's daily count at --max-count (default 10)
before blinding, and without noise counts are exact and unclipped.

--mode prio3 counts the same campaign with two aggregators instead of groups
(draft-irtf-cfrg-vdaf-14 Prio3, in DAP's layout): each active client uploads
once per day, through relays a and b to Kafka topic "prio3-uploads", its
counts clipped to 2^--bits − 1 (or, with --measurement presence, at most
--max-weight keywords set), split between a leader and a helper with a
proof that they are in range. The two prepare each report together, sum a
day's shares and hand both sums to the release stage, which writes the day
with confidence 1 once it holds at least --min-batch-size reports: no
server learns of a client that never uploaded, so confidence counts only
reports received. A client that does not upload (--dropout P: it skips a
day's upload with probability P) costs only its own counts; no recovery
round exists. The summary prints each day's coverage, reports released /
clients active in the log, which only the replay knows.
The replay runs both aggregators on one clock: every day's batch stays
open while the clients upload, then closes at once. Each client keeps its
day's counts within --l1 S (default 20, its most searched keywords) and
each aggregator adds Laplace noise of scale S/--epsilon (default ε = 1 per
person-day; exact counts need --epsilon 0 --exact-shares); noisy days do
not publish their report count, and the ledger (printed at the end)
charges ε per person-day, plus the status's --status-epsilon (default
0.1 × ε; δ = --status-delta), against --budget-epsilon (0: 1.1 per day).
The leader releases a day only when its noisy count passes
--min-batch-size + ⌈ln(1/(2δ))/ε_c⌉ (132 at the defaults) and withholds
every other day of the log, so a day's status does not tell whether one
person took part (--status-epsilon 0: the exact minimum). --pipeline FILE gives
the mode and measurement from a pipeline file's pdd section.

--export FILE writes one line per (released day, keyword), zeros included
(--export-nonzero leaves them out), and one line per withheld day with its
reason: lost (every group lost), budget (over the privacy budget; the run
then fails at the end, naming those days) or below_min_batch (prio3). With
--state DIR the run's ClickHouse stays in DIR/clickhouse: 'crowdlog
clickhouse --dir DIR/clickhouse' serves it again and 'crowdlog report'
plots its campaigns (docs/pdd.md, "Export, withheld days and the report").

Examples:
  crowdlog pdd --input testdata/aol-top1000.tsv.gz --group-size 50 --delay 2 --max-days 14 --export pdd.tsv
  crowdlog pdd --mode prio3 --input testdata/aol-top1000.tsv.gz --max-days 7 --export pdd.tsv`

// ReleaseHelp is the help of `crowdlog release`.
const ReleaseHelp = `release reads topic "decrypted", drops duplicate reports (at-least-once
delivery), and when every partition has closed an epoch writes its histogram
(released_items), the counts-only undecrypted summary and a releases row to
ClickHouse. Writes are idempotent per (app, epoch, policy, k); a ClickHouse
outage is retried. Only items sealed for the pipeline are released: every
report carries the digest of the pipeline definition its client sealed for
(application and options, policy and parameters), and this stage computes
its own from --pipeline FILE or the flags (--app, its options, --policy,
--k or the DP parameters); items of any other digest, policy or k are
counted and logged naming both digests, never released. With --policy dp-a, dp-u, zealous, dp-su or dp-gsu (and
--users U) the items are released with noise and the spend is recorded in
privacy_ledger; a release over --budget-epsilon/--budget-delta is refused and
logged.`
