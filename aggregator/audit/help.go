package audit

// Help is the long help of `crowdlog aggregate audit`.
const Help = `audit reads the whole "reports" topic, opens each report's aggregator layer with
--key, and the whole "decrypted" topic, and prints per partition: distinct
reports before the epoch's close marker, duplicate copies (at-least-once
delivery), reports that arrived after the close ("late": dropped by the
aggregator), reports whose tag opened but which were never emitted
("missing"), and emitted reports that are not in Kafka ("orphans"). Late,
missing and orphans are 0 in a healthy run; compare the total with the
clients' "reports sent" to check the relays. It prints counts and offsets
only, never payloads, tags or user ids. It holds every report id of the
topic in memory (~50 bytes each) and peels every report (~60 µs each).
With --control-pub (as given to the aggregator) only a close record the
aggregator applies ends the epoch; refused control records are counted.

Example:
  crowdlog aggregate audit --kafka 127.0.0.1:9092 --key keys/aggregator.key --app query --epoch 2006-03`
