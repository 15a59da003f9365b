package vectors

import (
	"errors"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

// Drop reasons of control records (Kafka header protocol.ControlHeader)
// refused under Partition.ControlKey: the names the threshold aggregator
// gives its epoch control records on the reports topic.
const (
	// DropUnsignedControl: a bare roster, tick or commit, not wrapped in
	// a signed record (protocol.VectorsControl).
	DropUnsignedControl = "unsigned-control"
	// DropBadControlSignature: a signed record whose signature does not
	// verify under ControlKey (forged, another key, a changed field).
	DropBadControlSignature = "bad-control-signature"
	// DropReplayedControl: a validly signed record used where it was not
	// signed for: another topic or partition than the one it names, a
	// campaign not served (Campaigns), a body of another campaign than
	// the record's, no Kafka timestamp or one outside [issued −
	// protocol.ControlSkew, not_after], or a not_after before the issue
	// time of a newer control record already accepted in the partition.
	DropReplayedControl = "replayed-control"
	// DropMalformedControl: neither a signed record nor a PDD message.
	DropMalformedControl = "malformed-control"
)

// ControlDropReasons lists the drop reasons of refused control records,
// in a fixed order (metrics, logs).
var ControlDropReasons = []string{DropUnsignedControl, DropBadControlSignature, DropReplayedControl, DropMalformedControl}

// ApplyControl processes one control record of the partition, read with
// Kafka timestamp at (zero: a timestamp ≤ 0 on the wire). With ControlKey
// the record must be a protocol.VectorsControl signed by it for
// protocol.VectorsTopic, partition ID and a served campaign (Campaigns;
// nil: any) whose body (a roster or commitments) names the same campaign,
// read at a time in [issued − protocol.ControlSkew, not_after], with a
// not_after not before the issue time of the newest control record
// accepted in the partition; the body is then applied as Apply(body,
// true) (and a dealer's commitments signed before its stored ones are
// refused as replayed). Anything else is dropped and counted (DropUnsignedControl,
// DropBadControlSignature, DropReplayedControl, DropMalformedControl),
// never applied. Without ControlKey a signed record's body is applied
// unverified, and a bare PDD message as before signing existed.
// Deterministic in (b, at) and the partition's state, so a replayed
// partition gives the same verdicts.
func (p *Partition) ApplyControl(b []byte, at time.Time) Result {
	if !protocol.IsVectorsControl(b) {
		if p.ControlKey != nil {
			p.drop(DropUnsignedControl)
			return Result{}
		}
		return p.Apply(b, true)
	}
	c, err := protocol.ParseVectorsControl(b)
	if err != nil {
		p.drop(DropMalformedControl)
		return Result{}
	}
	if p.ControlKey == nil {
		return p.Apply(c.Body, true)
	}
	if reason := p.verifyControl(c, at); reason != "" {
		p.drop(reason)
		return Result{}
	}
	p.issued = c.Issued
	return p.Apply(c.Body, true)
}

// verifyControl is ApplyControl's check of a parsed record: "" when it
// is to be applied (moving the partition's newest issue time), else the
// drop reason.
func (p *Partition) verifyControl(c *protocol.VectorsControl, at time.Time) string {
	if err := c.Verify(p.ControlKey); err != nil {
		if errors.Is(err, protocol.ErrControlSignature) {
			return DropBadControlSignature
		}
		return DropMalformedControl
	}
	if c.Topic != protocol.VectorsTopic || c.Partition != p.ID || p.Campaigns != nil && !p.Campaigns[c.Campaign] {
		return DropReplayedControl
	}
	if m, err := blind.Parse(c.Body); err == nil {
		switch {
		case m.Roster != nil && m.Roster.Instance.Campaign != c.Campaign,
			m.Commit != nil && m.Commit.Instance.Campaign != c.Campaign:
			return DropReplayedControl
		}
	}
	if at.IsZero() {
		return DropReplayedControl
	}
	if t := at.Unix(); t < c.Issued-int64(protocol.ControlSkew/time.Second) || t > c.NotAfter {
		return DropReplayedControl
	}
	if c.NotAfter < p.controlIssued {
		return DropReplayedControl
	}
	p.controlIssued = max(p.controlIssued, c.Issued)
	return ""
}
