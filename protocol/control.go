package protocol

import (
	"encoding/json"
	"fmt"
)

// Control operations on ReportsTopic: the JSON field "op" of a control
// message, and the value of its ControlHeader.
const (
	// ControlOpenEpoch opens an (app, epoch) at the aggregator (EpochOpen):
	// only reports of open epochs take up aggregator memory.
	ControlOpenEpoch = "open-epoch"
	// ControlCloseEpoch closes it (EpochClose). A control message without
	// "op" is a close: closes written before EpochOpen existed carry none.
	ControlCloseEpoch = "close-epoch"
)

// MaxControl bounds a control message on ReportsTopic: 4 KiB.
const MaxControl = 4 << 10

// EpochOpen is the control message an operator (`crowdlog aggregate
// open-epoch`, or `crowdlog run`) writes to every partition of the reports
// topic, with header ControlHeader, before clients send reports of the
// epoch: the aggregator keeps pending state only for reports of open
// epochs (docs/threat-model.md, resource exhaustion). JSON:
// {"op":"open-epoch","app":APP,"epoch":EPOCH,"partitions":N}.
type EpochOpen struct {
	Op         string `json:"op"` // always ControlOpenEpoch
	App        string `json:"app"`
	Epoch      string `json:"epoch"`
	Partitions int    `json:"partitions"`
}

// Control is one decoded control message of ReportsTopic: Op is
// ControlOpenEpoch or ControlCloseEpoch; App and Epoch are non-empty and at
// most 255 bytes each (the limits of a report's header).
type Control struct {
	Op         string
	App        string
	Epoch      string
	Partitions int
}

// ParseControl decodes a control message of ReportsTopic (EpochOpen or
// EpochClose; at most MaxControl bytes). Errors wrap ErrMalformed: bad
// JSON, an unknown op, an empty or over-long app or epoch.
func ParseControl(b []byte) (*Control, error) {
	if len(b) > MaxControl {
		return nil, Malformed("control message of %d bytes (at most %d)", len(b), MaxControl)
	}
	var m struct {
		Op         string `json:"op"`
		App        string `json:"app"`
		Epoch      string `json:"epoch"`
		Partitions int    `json:"partitions"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: control message: %v", ErrMalformed, err)
	}
	switch m.Op {
	case "":
		m.Op = ControlCloseEpoch
	case ControlOpenEpoch, ControlCloseEpoch:
	default:
		return nil, Malformed("control message: unknown op %q", m.Op)
	}
	if m.App == "" || m.Epoch == "" || len(m.App) > 255 || len(m.Epoch) > 255 {
		return nil, Malformed("control message: app (%d bytes) and epoch (%d bytes) must be 1 to 255 bytes", len(m.App), len(m.Epoch))
	}
	return &Control{Op: m.Op, App: m.App, Epoch: m.Epoch, Partitions: m.Partitions}, nil
}
