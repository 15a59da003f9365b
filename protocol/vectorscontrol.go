package protocol

import (
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"time"
)

// VectorsControlVersion is the first byte of a signed control record on
// VectorsTopic (VectorsControl). Its high bit is set, so it is never the
// version byte of an unsigned PDD message (protocol/blind, version 2).
const VectorsControlVersion byte = 0x83

// VectorsControlContext opens the bytes a VectorsControl signature covers
// (VectorsControlSignedBytes), followed by one 0x00 byte: a signature made
// for any other crowdlog message (an epoch control record on ReportsTopic,
// a PDD request over NATS) never verifies as a vectors control record.
const VectorsControlContext = "crowdlog-v1 pdd vectors control"

// MaxVectorsControl bounds a signed control record on VectorsTopic: 4 MiB
// (a dealer's commitments for a group of n members take 32·n bytes).
const MaxVectorsControl = 4 << 20

// VectorsControl is one signed control record of VectorsTopic: a PDD
// coordinator message (Body: a roster, a day tick or a dealer's
// commitments, in protocol/blind's wire format) for one campaign, written
// to one partition of one topic, valid from Issued to NotAfter, signed by
// the coordinator's Ed25519 key (RFC 8032). Wire format (docs/wire.md),
// integers big-endian:
//
//	u8 VectorsControlVersion ‖ u8 len ‖ topic ‖ u32 partition ‖
//	u8 len ‖ campaign ‖ u64 issued ‖ u64 not_after ‖ u32 len ‖ body ‖
//	signature (64 bytes)
//
// Topic is 1 to 255 bytes; Campaign 1 to 64 bytes (the campaign names of
// protocol/blind); Issued and NotAfter are Unix seconds with 0 ≤ Issued ≤
// NotAfter; Body is 2 to MaxVectorsControl bytes. The signature is
// Ed25519 over VectorsControlSignedBytes: the context and every byte
// before the signature.
type VectorsControl struct {
	Topic     string
	Partition int
	Campaign  string
	Issued    int64 // Unix seconds
	NotAfter  int64 // Unix seconds
	Body      []byte
	Sig       []byte // 64 bytes
}

// VectorsTarget is where a signed vectors control record applies: the
// topic and partition it is written to and the campaign it belongs to.
type VectorsTarget struct {
	Topic     string
	Partition int
	Campaign  string
}

func (c *VectorsControl) head() []byte {
	b := make([]byte, 0, 32+len(c.Topic)+len(c.Campaign)+len(c.Body))
	b = append(b, VectorsControlVersion, byte(len(c.Topic)))
	b = append(b, c.Topic...)
	b = binary.BigEndian.AppendUint32(b, uint32(c.Partition))
	b = append(append(b, byte(len(c.Campaign))), c.Campaign...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Issued))
	b = binary.BigEndian.AppendUint64(b, uint64(c.NotAfter))
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Body)))
	return append(b, c.Body...)
}

// VectorsControlSignedBytes returns the bytes a VectorsControl signature
// covers: VectorsControlContext ‖ 0x00 ‖ the record up to, not including,
// its signature. Fields must be within ParseVectorsControl's limits.
func VectorsControlSignedBytes(c *VectorsControl) []byte {
	h := c.head()
	return append(append([]byte(VectorsControlContext), 0), h...)
}

// SignVectorsControl returns the signed control record (VectorsControl) of
// body for to, issued at issued and valid until issued + validity (whole
// seconds), signed with key (Ed25519, RFC 8032). Errors: a field
// ParseVectorsControl would refuse, a key that is not an Ed25519 private
// key.
func SignVectorsControl(key ed25519.PrivateKey, body []byte, to VectorsTarget, issued time.Time, validity time.Duration) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("protocol: vectors control signing key of %d bytes, not an Ed25519 private key", len(key))
	}
	c := &VectorsControl{Topic: to.Topic, Partition: to.Partition, Campaign: to.Campaign, Issued: issued.Unix(),
		NotAfter: issued.Add(validity).Unix(), Body: body}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("protocol: sign vectors control record: %w", err)
	}
	h := c.head()
	return append(h, ed25519.Sign(key, append(append([]byte(VectorsControlContext), 0), h...))...), nil
}

func (c *VectorsControl) check() error {
	switch {
	case c.Topic == "" || len(c.Topic) > 255:
		return Malformed("vectors control record: topic of %d bytes (want 1 to 255)", len(c.Topic))
	case c.Partition < 0 || c.Partition >= MaxControlPartitions:
		return Malformed("vectors control record: partition %d (want 0 to %d)", c.Partition, MaxControlPartitions-1)
	case !validCampaign(c.Campaign):
		return Malformed("vectors control record: campaign %q (want 1 to 64 of [A-Za-z0-9._-])", c.Campaign)
	case c.Issued < 0 || c.NotAfter < c.Issued:
		return Malformed("vectors control record: issued %d, not after %d", c.Issued, c.NotAfter)
	case len(c.Body) < 2 || len(c.Body) > MaxVectorsControl:
		return Malformed("vectors control record: body of %d bytes (want 2 to %d)", len(c.Body), MaxVectorsControl)
	}
	return nil
}

// validCampaign is protocol/blind.ValidCampaign: 1–64 bytes of
// [A-Za-z0-9._-].
func validCampaign(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// IsVectorsControl reports whether b starts like a signed vectors control
// record (its first byte is VectorsControlVersion); an unsigned PDD
// message never does.
func IsVectorsControl(b []byte) bool { return len(b) > 0 && b[0] == VectorsControlVersion }

// ParseVectorsControl decodes a signed control record of VectorsTopic (at
// most MaxVectorsControl + 512 bytes). It does not verify the signature
// (VectorsControl.Verify) nor the body. Errors wrap ErrMalformed: another
// first byte than VectorsControlVersion (ErrUnsignedControl is the
// caller's verdict for an unsigned PDD message), a truncated record or
// trailing bytes, a field outside the limits of VectorsControl.
func ParseVectorsControl(b []byte) (*VectorsControl, error) {
	if len(b) > MaxVectorsControl+512 {
		return nil, Malformed("vectors control record of %d bytes (at most %d)", len(b), MaxVectorsControl+512)
	}
	if !IsVectorsControl(b) {
		return nil, Malformed("vectors control record: not version %#x", VectorsControlVersion)
	}
	r := b[1:]
	take := func(n int) []byte {
		if r == nil || n < 0 || n > len(r) {
			r = nil
			return nil
		}
		p := r[:n:n]
		r = r[n:]
		return p
	}
	u8 := func() int {
		if p := take(1); p != nil {
			return int(p[0])
		}
		return -1
	}
	c := &VectorsControl{}
	c.Topic = string(take(u8()))
	if p := take(4); p != nil {
		c.Partition = int(binary.BigEndian.Uint32(p))
	}
	c.Campaign = string(take(u8()))
	if p := take(16); p != nil {
		c.Issued, c.NotAfter = int64(binary.BigEndian.Uint64(p)), int64(binary.BigEndian.Uint64(p[8:]))
	}
	if p := take(4); p != nil {
		n := binary.BigEndian.Uint32(p)
		if n > MaxVectorsControl {
			return nil, Malformed("vectors control record: body of %d bytes (at most %d)", n, MaxVectorsControl)
		}
		c.Body = take(int(n))
	}
	c.Sig = take(ed25519.SignatureSize)
	if r == nil {
		return nil, Malformed("vectors control record: truncated")
	}
	if len(r) != 0 {
		return nil, Malformed("vectors control record: %d trailing bytes", len(r))
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return c, nil
}

// Verify checks c's signature under the coordinator's public key pub
// (Ed25519, RFC 8032, over VectorsControlSignedBytes). Errors:
// ErrControlSignature when it does not verify or pub is not an Ed25519
// public key. It checks nothing else: the topic, partition, campaign,
// validity window and body are the aggregator's to check.
func (c *VectorsControl) Verify(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, VectorsControlSignedBytes(c), c.Sig) {
		return ErrControlSignature
	}
	return nil
}
