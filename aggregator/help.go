package aggregator

import "github.com/crowdlog/crowdlog/infra/keydir"

// Help is the long help of `crowdlog aggregate`: what it does and what its
// flags mean together.
const Help = `aggregate joins Kafka consumer group --group on topic "reports" (more processes =
partitions spread over them). Per (app, epoch, tag) it keeps the distinct
shares and the reports; at k distinct shares it recovers the artifact key,
decrypts every report of the tag (and later ones on arrival) and writes the
items to topic "decrypted". A share that makes the AEAD fail does not block
the tag. State is rebuilt by replaying a partition up to its committed offset,
so kill -9 loses nothing and counts nothing twice.

Only reports of open epochs are kept: run 'crowdlog aggregate open-epoch'
before clients send. Reports of epochs that are not open are dropped
(unknown-epoch), and so are reports beyond --max-pending-reports or
--max-pending-bytes held below threshold per (app, epoch) and partition
(epoch-full). Every process of a group must use the same bounds.

Memory holds ≈ 140 B per pending report (its id, its share's x, its group);
the rest (share y, ciphertext: ≈ 350 B) goes to a spill file in --spill-dir,
one per partition and open epoch, unlinked at creation (nothing stays on disk
after the process ends) and sealed under a key that exists only in memory.

--snapshot-dir DIR: every --snapshot-every messages (or one per 25 pending
reports, if more: a snapshot's cost grows with the state) a partition's state
is written to DIR (sealed under a key derived from the aggregator key), with
its spill in segment files there instead of --spill-dir. A process that
receives a partition (a rebalance, a restart) restores the newest snapshot
and replays only the messages after it: a partition of a million pending
reports moves in under 2 s on 2 cores instead of a replay of the whole epoch.
Share DIR between the processes of a group (a network volume) for moves
between hosts.

--keys DIR (Privacy Pass): a report is kept only with an unspent report
token bound to it, and an FT_u report only with an ARC presentation whose tag
gives its share's x, under DIR/` + keydir.IssuerKeys + `/EPOCH.report.key and EPOCH.arc.key
(created by 'crowdlog issuer --epoch' on the same DIR: with separate
operators the aggregator's operator runs the issuer of report tokens and
ARC credentials, 'keys generate --role aggregator'); others are dropped (no-token,
bad-token, spent-token, bad-presentation). Every process of a group must
use the same setting.

--pipeline FILE (repeatable): the pipeline definitions this aggregator
serves; a report sealed for any other (its pipeline digest differs: another
application option, policy or parameter) is dropped (pipeline-mismatch) and
logged once naming both digests. Without it reports of every definition
are aggregated, each in groups of their own. A pipeline with a schedule
(epoch.length) makes the aggregator open each scheduled epoch of its app
(named START-LENGTH) on its own clock and close it epoch.close_delay after
its end, without any control record from an operator; named epochs still
need open-epoch and close-epoch.

--nats URL: every process answers clients on ` + "`crowdlog.pipeline`" + ` with the
--pipeline definitions it serves (their canonical text) and, for the
(pipeline, app, epoch) a client names, how many reports it admitted and
refused by reason. A client library device (ingest.Config.App) checks its
k, policy and digest against it before sending and fails naming the value
that disagrees. --nats-nkey etc.: the aggregator's NATS credential.

--control-pub FILE: the pipeline operator's Ed25519 public key
(keys/` + keydir.ControlSignKey + `.pub). Epoch open and close records must be
signed by its private half (version 3) for the partition they are in, a
--pipeline served (without --pipeline: any) and "reports", with a Kafka
timestamp within their validity; unsigned, forged, version 2 and replayed
ones are dropped and counted (unsigned-control, bad-control-signature,
unbound-control, replayed-control). Without it
anyone who can write to "reports" opens and closes epochs (logged at start).
--control-key FILE signs the records the schedule writes (then this process
holds the operator's key).`

// ControlShort is the short help of `crowdlog aggregate open-epoch` and
// `close-epoch`, by verb ("open", "close").
var ControlShort = map[string]string{
	"open":  "Open an epoch: the aggregator keeps reports only of open epochs",
	"close": "Close an epoch: summarize undecrypted tags (counts only) and delete pending shares",
}

// ControlHelp is the long help of open-epoch and close-epoch, by verb.
var ControlHelp = map[string]string{
	"open": `open-epoch writes a control marker into every partition of "reports". Run it
before clients send reports of the epoch: an aggregator drops reports of an
(app, epoch) that is not open (unknown-epoch) or already closed (late). An
aggregator refuses the open, and logs it, when the app already has
--max-open-epochs open epochs (close one first) or the epoch was closed.` + controlSignerHelp,
	"close": `close-epoch writes a control marker into every partition of "reports". When an
aggregator reaches it, after every earlier report, it emits a counts-only
summary of the epoch's undecrypted tags, deletes their shares and drops later
reports of the epoch. The release stage writes the epoch once every partition
has closed it.` + controlSignerHelp,
}

// controlSignerHelp ends ControlHelp: what --control-key signs for.
const controlSignerHelp = `

With --control-key the record is signed (version 3, docs/wire.md) for one
pipeline: --pipeline FILE (or --pipeline-digest HEX) names it, and an
aggregator serving other pipelines refuses the record. Run it with the
Kafka "operator" credential (Write on "reports" only), not the admin.`
