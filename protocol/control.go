package protocol

import (
	"crypto/ed25519"
	"encoding/binary"
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
	// ControlSigned (2) is SignedControl: signed by the pipeline
	// operator's Ed25519 key (RFC 8032) over ControlSignedBytes.
	ControlSigned = 2
)

// ControlContext opens the bytes a signed control message's signature
// covers (ControlSignedBytes), followed by one 0x00 byte: a signature made
// for any other crowdlog message never verifies as a control message.
const ControlContext = "crowdlog-v1 epoch control"

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

// SignedControl is a control message of version ControlSigned: an
// EpochOpen or EpochClose for one partition, valid from Issued to
// NotAfter, signed by the pipeline operator. JSON (docs/wire.md):
//
//	{"v":2,"op":OP,"app":APP,"epoch":EPOCH,"partitions":N,"partition":P,
//	 "issued":UNIX_S,"not_after":UNIX_S,"sig":BASE64}
//
// Partition is the reports partition the message is written to (0 ≤ P <
// N); Issued and NotAfter are Unix times in seconds (0 ≤ Issued ≤
// NotAfter); Sig is Ed25519(operator key, ControlSignedBytes) (64 bytes,
// standard base64 with padding).
type SignedControl struct {
	V          int    `json:"v"` // ControlSigned
	Op         string `json:"op"`
	App        string `json:"app"`
	Epoch      string `json:"epoch"`
	Partitions int    `json:"partitions"`
	Partition  int    `json:"partition"`
	Issued     int64  `json:"issued"`
	NotAfter   int64  `json:"not_after"`
	Sig        []byte `json:"sig"`
}

// Control is one decoded control message of ReportsTopic: Op is
// ControlOpenEpoch or ControlCloseEpoch; App and Epoch are non-empty and at
// most 255 bytes each (the limits of a report's header). Version is
// ControlUnsigned or ControlSigned; the fields below it are set only for a
// signed message (SignedControl).
type Control struct {
	Op         string
	App        string
	Epoch      string
	Partitions int

	Version   int
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
// not_after, a signature that is not 64 bytes.
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
	switch m.V {
	case 0, ControlUnsigned:
		if m.Sig != nil || m.Issued != 0 || m.NotAfter != 0 || m.Partition != 0 {
			return nil, Malformed("unsigned control message with fields of a signed one (version 2)")
		}
		c.Version = ControlUnsigned
		return c, nil
	case ControlSigned:
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
	c.Version, c.Partition, c.Issued, c.NotAfter, c.Sig = ControlSigned, m.Partition, m.Issued, m.NotAfter, m.Sig
	return c, nil
}

// ControlSignedBytes returns the bytes a signed control message's
// signature covers (docs/wire.md):
//
//	ControlContext ‖ 0x00 ‖ u8 len ‖ op ‖ u8 len ‖ app ‖ u8 len ‖ epoch ‖
//	u32 partitions ‖ u32 partition ‖ u64 issued ‖ u64 not_after
//
// integers big-endian, times in Unix seconds. Op, app and epoch must be
// at most 255 bytes (ParseControl's limits); a longer one is cut.
func ControlSignedBytes(c *Control) []byte {
	b := make([]byte, 0, len(ControlContext)+1+3+len(c.Op)+len(c.App)+len(c.Epoch)+24)
	b = append(append(b, ControlContext...), 0)
	for _, s := range []string{c.Op, c.App, c.Epoch} {
		s = s[:min(len(s), 255)]
		b = append(append(b, byte(len(s))), s...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(c.Partitions))
	b = binary.BigEndian.AppendUint32(b, uint32(c.Partition))
	b = binary.BigEndian.AppendUint64(b, uint64(c.Issued))
	return binary.BigEndian.AppendUint64(b, uint64(c.NotAfter))
}

// SignControl returns the signed control message (SignedControl JSON,
// version ControlSigned) of op for (app, epoch), written to partition of
// partitions, issued at issued and valid until issued + validity (whole
// seconds), signed with key (Ed25519, RFC 8032). Errors: a field
// ParseControl would refuse, a key that is not an Ed25519 private key.
func SignControl(key ed25519.PrivateKey, op, app, epoch string, partition, partitions int, issued time.Time, validity time.Duration) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("protocol: control signing key of %d bytes, not an Ed25519 private key", len(key))
	}
	c := &Control{Version: ControlSigned, Op: op, App: app, Epoch: epoch, Partitions: partitions, Partition: partition,
		Issued: issued.Unix(), NotAfter: issued.Add(validity).Unix()}
	c.Sig = ed25519.Sign(key, ControlSignedBytes(c))
	b, err := json.Marshal(SignedControl{V: ControlSigned, Op: c.Op, App: c.App, Epoch: c.Epoch, Partitions: c.Partitions,
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
// (Ed25519, RFC 8032, over ControlSignedBytes). Errors: ErrUnsignedControl
// for a version-1 message, ErrControlSignature when the signature does not
// verify or pub is not an Ed25519 public key. It checks nothing else:
// the partition and the validity window are the aggregator's to check.
func (c *Control) Verify(pub ed25519.PublicKey) error {
	if c.Version != ControlSigned {
		return ErrUnsignedControl
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, ControlSignedBytes(c), c.Sig) {
		return ErrControlSignature
	}
	return nil
}
