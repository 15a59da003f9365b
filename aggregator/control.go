package aggregator

import (
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
	// DropReplayedControl: a validly signed control message used where it
	// was not signed for: read from another partition than the one it
	// names, a Kafka timestamp outside [issued − protocol.ControlSkew,
	// not_after], or a not_after before the issue time of a newer control
	// message already accepted in the partition.
	DropReplayedControl = "replayed-control"
)

// prepareControl is Prepare for a control message: it parses it and, with
// ControlKey, verifies its signature (Ed25519, ~50 µs), its partition and
// its validity at the record's Kafka timestamp (m.Time; not checked when
// zero: offline tools without timestamps). Deterministic in m.
func (p *Partition) prepareControl(m Message) Prepared {
	c, err := protocol.ParseControl(m.Value)
	if err != nil {
		return Prepared{drop: "malformed-control"}
	}
	if p.ControlKey == nil {
		return Prepared{control: c}
	}
	if err := c.Verify(p.ControlKey); err != nil {
		if errors.Is(err, protocol.ErrUnsignedControl) {
			return Prepared{drop: DropUnsignedControl}
		}
		return Prepared{drop: DropBadControlSignature}
	}
	if c.Partition != p.ID {
		return Prepared{drop: DropReplayedControl}
	}
	if !m.Time.IsZero() {
		at := m.Time.Unix()
		if at < c.Issued-int64(protocol.ControlSkew/time.Second) || at > c.NotAfter {
			return Prepared{drop: DropReplayedControl}
		}
	}
	return Prepared{control: c}
}

// applyControl is ApplyPrepared for a control message prepared by
// prepareControl. With ControlKey, a message whose not_after is before
// the issue time of the newest control message accepted in the partition
// is a replay; the others move that issue time forward (part of the
// replayed and snapshotted state, so a rebuilt partition gives the same
// verdicts).
func (p *Partition) applyControl(c *protocol.Control) []protocol.Decrypted {
	if p.ControlKey != nil && c.Version == protocol.ControlSigned {
		if c.NotAfter < p.controlIssued {
			p.drop(DropReplayedControl)
			return nil
		}
		p.controlIssued = max(p.controlIssued, c.Issued)
	}
	if c.Op == protocol.ControlOpenEpoch {
		p.openEpoch(c.App, c.Epoch)
		return nil
	}
	return p.closeEpoch(protocol.EpochClose{App: c.App, Epoch: c.Epoch, Partitions: c.Partitions})
}
