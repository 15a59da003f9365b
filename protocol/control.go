package protocol

import (
	"crypto/ed25519"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
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

// Control message versions: the JSON field "v" (absent: 1).
const (
	// ControlUnsigned (1) is the original control message: anyone who
	// may write to ReportsTopic can forge it.
	ControlUnsigned = 1
	// ControlSigned (2) is signed by the pipeline operator's Ed25519 key
	// (RFC 8032) but binds no pipeline or topic: a record signed for one
	// pipeline verifies in every other served under the same key. It is
	// parsed and its signature checked, but an aggregator with a control
	// key refuses it (aggregator.DropUnboundControl); crowdlog no longer
	// writes it.
	ControlSigned = 2
	// ControlBound (3) is SignedControl: signed by the operator's key
	// over ControlSignedBytes, which bind the pipeline digest and the
	// topic besides the version 2 fields.
	ControlBound = 3
)

// ControlContext opens the bytes a signed control message's signature
// covers (ControlSignedBytes), followed by one 0x00 byte: a signature made
// for any other crowdlog message never verifies as a control message.
const ControlContext = "crowdlog-v1 epoch control"

// ControlBoundContext opens the bytes a version 3 (ControlBound) control
// message's signature covers, followed by one 0x00 byte: a version 2
// signature never verifies as a version 3 message, nor the reverse.
const ControlBoundContext = "crowdlog-v1 epoch control bound"

// ControlValidity is how long after its issue time a control message
// written by crowdlog stays valid (SignedControl.NotAfter − Issued): a
// write retried longer than this is refused and signed again by the next
// attempt. ControlSkew is the tolerated difference between the signer's
// clock and the record's Kafka timestamp, and between the clocks of
// several signers of one topic.
const (
	ControlValidity = time.Hour
	ControlSkew     = 5 * time.Minute
)

// MaxControlPartitions bounds the partitions field of a signed control
// message: 65,536.
const MaxControlPartitions = 1 << 16

// Errors of Control.Verify.
var (
	// ErrUnsignedControl: a version-1 control message, which carries no
	// signature.
	ErrUnsignedControl = errors.New("protocol: unsigned control message")
	// ErrControlSignature: the signature does not verify under the
	// operator's key (forged, signed by another key, or a field changed).
	ErrControlSignature = errors.New("protocol: control message signature does not verify")
)

// EpochOpen is the control message an operator (`crowdlog aggregate
// open-epoch`, or `crowdlog run`) writes to every partition of the reports
// topic, with header ControlHeader, before clients send reports of the
// epoch: the aggregator keeps pending state only for reports of open
// epochs (docs/threat-model.md, resource exhaustion). JSON:
// {"op":"open-epoch","app":APP,"epoch":EPOCH,"partitions":N}. Unsigned
// (version 1): an aggregator with the operator's public key refuses it;
// SignedControl is the signed form.
type EpochOpen struct {
	Op         string `json:"op"` // always ControlOpenEpoch
	App        string `json:"app"`
	Epoch      string `json:"epoch"`
	Partitions int    `json:"partitions"`
}

// SignedControl is a control message of version ControlBound: an
// EpochOpen or EpochClose for one partition of one topic and one pipeline
// definition, valid from Issued to NotAfter, signed by the pipeline
// operator. JSON (docs/wire.md):
//
//	{"v":3,"op":OP,"app":APP,"epoch":EPOCH,"pipeline":HEX64,"topic":TOPIC,
//	 "partitions":N,"partition":P,"issued":UNIX_S,"not_after":UNIX_S,"sig":BASE64}
//
// Pipeline is the pipeline digest (star.Report.Pipeline, 32 bytes as 64
// lower-case hex digits) of the definition the epoch belongs to; Topic the
// topic the record is written to (ReportsTopic, 1 to 255 bytes);
// Partition is the partition it is written to (0 ≤ P < N); Issued and
// NotAfter are Unix times in seconds (0 ≤ Issued ≤ NotAfter); Sig is
// Ed25519(operator key, ControlSignedBytes) (64 bytes, standard base64
// with padding). Version 2 has neither pipeline nor topic.
type SignedControl struct {
	V          int    `json:"v"` // ControlBound (ControlSigned: version 2)
	Op         string `json:"op"`
	App        string `json:"app"`
	Epoch      string `json:"epoch"`
	Pipeline   string `json:"pipeline,omitempty"` // version 3
	Topic      string `json:"topic,omitempty"`    // version 3
	Partitions int    `json:"partitions"`
	Partition  int    `json:"partition"`
	Issued     int64  `json:"issued"`
	NotAfter   int64  `json:"not_after"`
	Sig        []byte `json:"sig"`
}

// Control is one decoded control message of ReportsTopic: Op is
// ControlOpenEpoch or ControlCloseEpoch; App and Epoch are non-empty and at
// most 255 bytes each (the limits of a report's header). Version is
// ControlUnsigned, ControlSigned or ControlBound; the fields below it are
// set only for a signed message (SignedControl), Pipeline and Topic only
// for ControlBound.
type Control struct {
	Op         string
	App        string
	Epoch      string
	Partitions int

	Version   int
	Pipeline  [32]byte // pipeline digest (ControlBound)
	Topic     string   // topic written to (ControlBound)
	Partition int
	Issued    int64 // Unix seconds
	NotAfter  int64 // Unix seconds
	Sig       []byte
}

// ParseControl decodes a control message of ReportsTopic (EpochOpen,
// EpochClose or SignedControl; at most MaxControl bytes). It does not
// verify a signature (Control.Verify). Errors wrap ErrMalformed: bad
// JSON, an unknown version or op, an empty or over-long app or epoch; for
// a signed message also a partition outside [0, partitions), partitions
// outside [1, MaxControlPartitions], times outside 0 ≤ issued ≤
// not_after, a signature that is not 64 bytes; for version 3 a pipeline
// that is not 64 lower-case hex digits, a topic empty or over 255 bytes;
// for versions 1 and 2 a pipeline or topic field.
func ParseControl(b []byte) (*Control, error) {
	if len(b) > MaxControl {
		return nil, Malformed("control message of %d bytes (at most %d)", len(b), MaxControl)
	}
	var m SignedControl
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: control message: %v", ErrMalformed, err)
	}
	switch m.Op {
	case "":
		if m.V == ControlSigned {
			return nil, Malformed("signed control message without op")
		}
		m.Op = ControlCloseEpoch
	case ControlOpenEpoch, ControlCloseEpoch:
	default:
		return nil, Malformed("control message: unknown op %q", m.Op)
	}
	if m.App == "" || m.Epoch == "" || len(m.App) > 255 || len(m.Epoch) > 255 {
		return nil, Malformed("control message: app (%d bytes) and epoch (%d bytes) must be 1 to 255 bytes", len(m.App), len(m.Epoch))
	}
	c := &Control{Op: m.Op, App: m.App, Epoch: m.Epoch, Partitions: m.Partitions}
	if m.V != ControlBound && (m.Pipeline != "" || m.Topic != "") {
		return nil, Malformed("control message of version %d with the pipeline or topic of version %d", m.V, ControlBound)
	}
	switch m.V {
	case 0, ControlUnsigned:
		if m.Sig != nil || m.Issued != 0 || m.NotAfter != 0 || m.Partition != 0 {
			return nil, Malformed("unsigned control message with fields of a signed one (version 2)")
		}
		c.Version = ControlUnsigned
		return c, nil
	case ControlSigned:
	case ControlBound:
		d, err := hex.DecodeString(m.Pipeline)
		if err != nil || len(d) != len(c.Pipeline) || hex.EncodeToString(d) != m.Pipeline {
			return nil, Malformed("signed control message: pipeline %q (want 64 lower-case hex digits)", m.Pipeline)
		}
		copy(c.Pipeline[:], d)
		if m.Topic == "" || len(m.Topic) > 255 {
			return nil, Malformed("signed control message: topic of %d bytes (want 1 to 255)", len(m.Topic))
		}
		c.Topic = m.Topic
	default:
		return nil, Malformed("control message: unknown version %d", m.V)
	}
	if m.Partitions < 1 || m.Partitions > MaxControlPartitions || m.Partition < 0 || m.Partition >= m.Partitions {
		return nil, Malformed("signed control message: partition %d of %d", m.Partition, m.Partitions)
	}
	if m.Issued < 0 || m.NotAfter < m.Issued {
		return nil, Malformed("signed control message: issued %d, not after %d", m.Issued, m.NotAfter)
	}
	if len(m.Sig) != ed25519.SignatureSize {
		return nil, Malformed("signed control message: signature of %d bytes (want %d)", len(m.Sig), ed25519.SignatureSize)
	}
	c.Version, c.Partition, c.Issued, c.NotAfter, c.Sig = m.V, m.Partition, m.Issued, m.NotAfter, m.Sig
	return c, nil
}

// ControlSignedBytes returns the bytes a signed control message's
// signature covers (docs/wire.md). Version 3 (ControlBound):
//
//	ControlBoundContext ‖ 0x00 ‖ u8 len ‖ op ‖ u8 len ‖ app ‖ u8 len ‖ epoch ‖
//	pipeline (32 bytes) ‖ u8 len ‖ topic ‖
//	u32 partitions ‖ u32 partition ‖ u64 issued ‖ u64 not_after
//
// version 2 (ControlSigned):
//
//	ControlContext ‖ 0x00 ‖ u8 len ‖ op ‖ u8 len ‖ app ‖ u8 len ‖ epoch ‖
//	u32 partitions ‖ u32 partition ‖ u64 issued ‖ u64 not_after
//
// integers big-endian, times in Unix seconds. Op, app, epoch and topic
// must be at most 255 bytes (ParseControl's limits); a longer one is cut.
func ControlSignedBytes(c *Control) []byte {
	str8 := func(b []byte, s string) []byte {
		s = s[:min(len(s), 255)]
		return append(append(b, byte(len(s))), s...)
	}
	b := make([]byte, 0, len(ControlBoundContext)+1+4+len(c.Op)+len(c.App)+len(c.Epoch)+32+len(c.Topic)+24)
	if c.Version == ControlSigned {
		b = append(append(b, ControlContext...), 0)
	} else {
		b = append(append(b, ControlBoundContext...), 0)
	}
	for _, s := range []string{c.Op, c.App, c.Epoch} {
		b = str8(b, s)
	}
	if c.Version != ControlSigned {
		b = str8(append(b, c.Pipeline[:]...), c.Topic)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(c.Partitions))
	b = binary.BigEndian.AppendUint32(b, uint32(c.Partition))
	b = binary.BigEndian.AppendUint64(b, uint64(c.Issued))
	return binary.BigEndian.AppendUint64(b, uint64(c.NotAfter))
}

// ControlTarget is where a signed control message applies: the pipeline
// digest of the definition whose epoch it opens or closes
// (pipeline.Digest, star.Report.Pipeline) and the topic and partition it
// is written to, of Partitions.
type ControlTarget struct {
	Pipeline   [32]byte
	Topic      string
	Partition  int
	Partitions int
}

// SignControl returns the signed control message (SignedControl JSON,
// version ControlBound) of op for (app, epoch) at to, issued at issued
// and valid until issued + validity (whole seconds), signed with key
// (Ed25519, RFC 8032). Errors: a field ParseControl would refuse, a key
// that is not an Ed25519 private key.
func SignControl(key ed25519.PrivateKey, op, app, epoch string, to ControlTarget, issued time.Time, validity time.Duration) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("protocol: control signing key of %d bytes, not an Ed25519 private key", len(key))
	}
	c := &Control{Version: ControlBound, Op: op, App: app, Epoch: epoch, Pipeline: to.Pipeline, Topic: to.Topic,
		Partitions: to.Partitions, Partition: to.Partition, Issued: issued.Unix(), NotAfter: issued.Add(validity).Unix()}
	c.Sig = ed25519.Sign(key, ControlSignedBytes(c))
	b, err := json.Marshal(SignedControl{V: ControlBound, Op: c.Op, App: c.App, Epoch: c.Epoch,
		Pipeline: hex.EncodeToString(c.Pipeline[:]), Topic: c.Topic, Partitions: c.Partitions,
		Partition: c.Partition, Issued: c.Issued, NotAfter: c.NotAfter, Sig: c.Sig})
	if err != nil {
		return nil, err
	}
	if _, err := ParseControl(b); err != nil {
		return nil, fmt.Errorf("protocol: sign control message: %w", err)
	}
	return b, nil
}

// Verify checks c's signature under the operator's public key pub
// (Ed25519, RFC 8032, over ControlSignedBytes; versions 2 and 3). Errors:
// ErrUnsignedControl for a version-1 message, ErrControlSignature when the
// signature does not verify or pub is not an Ed25519 public key. It
// checks nothing else: the version, pipeline, topic, partition and
// validity window are the aggregator's to check.
func (c *Control) Verify(pub ed25519.PublicKey) error {
	if c.Version != ControlSigned && c.Version != ControlBound {
		return ErrUnsignedControl
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, ControlSignedBytes(c), c.Sig) {
		return ErrControlSignature
	}
	return nil
}
