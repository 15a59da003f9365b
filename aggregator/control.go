package aggregator

import (
	"crypto/ed25519"
	"errors"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
)

// Drop reasons of control messages refused under Partition.ControlKey.
const (
	// DropUnsignedControl: a version-1 control message (no signature).
	DropUnsignedControl = "unsigned-control"
	// DropBadControlSignature: a signed control message whose signature
	// does not verify under ControlKey (forged, another key, a changed
	// field).
	DropBadControlSignature = "bad-control-signature"
	// DropUnboundControl: a control message of version 2
	// (protocol.ControlSigned), whose signature binds no pipeline or
	// topic: signed for one pipeline, it would verify in every pipeline
	// of the same key.
	DropUnboundControl = "unbound-control"
	// DropReplayedControl: a validly signed control message used where it
	// was not signed for: read from another topic or partition than the
	// one it names, signed for a pipeline digest not served (Pipelines),
	// without a Kafka timestamp (zero: a timestamp ≤ 0 on the wire) or
	// with one outside [issued − protocol.ControlSkew, not_after], or a
	// not_after before the issue time of a newer control message already
	// accepted in the partition.
	DropReplayedControl = "replayed-control"
)

// prepareControl is Prepare for a control message: it parses it and, with
// ControlKey, verifies its signature (Ed25519, ~50 µs), its version,
// topic, partition and pipeline, and its validity at the record's Kafka
// timestamp (m.Time; zero is refused unless ControlUntimed).
// Deterministic in m.
func (p *Partition) prepareControl(m Message) Prepared {
	c, reason := controlRules{key: p.ControlKey, partition: p.ID, pipelines: p.Pipelines, untimed: p.ControlUntimed, legacy: p.legacyControl}.verify(m)
	if reason != "" {
		return Prepared{drop: reason}
	}
	return Prepared{control: c}
}

// controlRules are the stateless control checks of one partition of
// protocol.ReportsTopic: key (nil: parsing only), the partition, the
// pipeline digests served (nil: any), untimed (no timestamp: the window
// is not checked) and legacy (the version 2 rules: see
// Partition.legacyControl).
type controlRules struct {
	key       ed25519.PublicKey
	partition int
	pipelines map[[32]byte]bool
	untimed   bool
	legacy    bool
}

// verify returns the parsed message, or the drop reason.
func (r controlRules) verify(m Message) (*protocol.Control, string) {
	c, err := protocol.ParseControl(m.Value)
	if err != nil {
		return nil, "malformed-control"
	}
	if r.key == nil {
		return c, ""
	}
	if err := c.Verify(r.key); err != nil {
		if errors.Is(err, protocol.ErrUnsignedControl) {
			return nil, DropUnsignedControl
		}
		return nil, DropBadControlSignature
	}
	if c.Version != protocol.ControlBound && !r.legacy {
		return nil, DropUnboundControl
	}
	if c.Partition != r.partition {
		return nil, DropReplayedControl
	}
	if c.Version == protocol.ControlBound && !r.legacy &&
		(c.Topic != protocol.ReportsTopic || r.pipelines != nil && !r.pipelines[c.Pipeline]) {
		return nil, DropReplayedControl
	}
	if m.Time.IsZero() {
		if r.untimed || r.legacy {
			return c, ""
		}
		return nil, DropReplayedControl
	}
	at := m.Time.Unix()
	if at < c.Issued-int64(protocol.ControlSkew/time.Second) || at > c.NotAfter {
		return nil, DropReplayedControl
	}
	return c, ""
}

// freshControl is the stateful part: a verified message whose not_after is
// before *issued (the newest issue time accepted in the partition) is a
// replay; otherwise *issued moves to its issue time if later.
func freshControl(issued *int64, c *protocol.Control) bool {
	if c.NotAfter < *issued {
		return false
	}
	*issued = max(*issued, c.Issued)
	return true
}

// applyControl is ApplyPrepared for a control message prepared by
// prepareControl. With ControlKey, a message whose not_after is before
// the issue time of the newest control message accepted in the partition
// is a replay; the others move that issue time forward (part of the
// replayed and snapshotted state, so a rebuilt partition gives the same
// verdicts).
func (p *Partition) applyControl(c *protocol.Control) []protocol.Decrypted {
	if p.ControlKey != nil && c.Version != protocol.ControlUnsigned && !freshControl(&p.controlIssued, c) {
		p.drop(DropReplayedControl)
		return nil
	}
	if c.Op == protocol.ControlOpenEpoch {
		p.openEpoch(c.App, c.Epoch)
		return nil
	}
	return p.closeEpoch(protocol.EpochClose{App: c.App, Epoch: c.Epoch, Partitions: c.Partitions})
}

// ControlVerifier judges the control records of one partition of the
// reports topic, in offset order, as a Partition with ControlKey Key,
// Pipelines and ControlUntimed Untimed does (for readers of the topic
// other than the aggregator: aggregator/audit). Key nil: every record
// that parses is accepted. The zero value with a Key and Partition set is
// ready (any pipeline, timestamps required).
type ControlVerifier struct {
	Key       ed25519.PublicKey
	Partition int
	Pipelines map[[32]byte]bool // nil: any
	Untimed   bool              // offline, without Kafka timestamps: the validity window is not checked
	issued    int64
}

// Check returns the control record value (with its Kafka timestamp at;
// zero is refused unless Untimed) as the partition would apply it, or the
// reason it would drop it ("malformed-control", DropUnsignedControl,
// DropBadControlSignature, DropUnboundControl, DropReplayedControl).
func (v *ControlVerifier) Check(value []byte, at time.Time) (*protocol.Control, string) {
	c, reason := controlRules{key: v.Key, partition: v.Partition, pipelines: v.Pipelines, untimed: v.Untimed}.verify(Message{Control: true, Value: value, Time: at})
	if reason != "" {
		return nil, reason
	}
	if v.Key != nil && !freshControl(&v.issued, c) {
		return nil, DropReplayedControl
	}
	return c, ""
}
