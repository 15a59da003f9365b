package blind

import (
	"crypto/ed25519"
	"encoding/binary"
	"errors"
)

// TaskDomain opens the bytes a task signature covers (TaskSignedBytes),
// keeping it apart from every other signature of the coordinator's key
// (the signed control records of topic "vectors").
const TaskDomain = "crowdlog pdd task v1\x00"

// ErrTaskSignature is returned by VerifyTask when a task is unsigned or
// its signature does not verify under the pinned coordinator key.
var ErrTaskSignature = errors.New("blind: task not signed by the pinned coordinator key")

// TaskSignedBytes is what the coordinator signs of t for campaign:
// TaskDomain ‖ campaign(len8) ‖ round(i32) ‖ group(u32) ‖ member(u32) ‖
// t(u32) ‖ deadline(i32) ‖ n(u32) ‖ n × key(len16), big-endian: the
// whole roster the client blinds for and deals its seeds to (a
// RecoveryTask's Dropped list is not covered: a request that names
// members dropped is checked by Request.Check and answered once).
func TaskSignedBytes(campaign string, t *Task) []byte {
	b := append([]byte(TaskDomain), byte(len(campaign)))
	b = append(b, campaign...)
	b = binary.BigEndian.AppendUint32(b, uint32(t.Round))
	b = binary.BigEndian.AppendUint32(b, t.Group)
	b = binary.BigEndian.AppendUint32(b, uint32(t.Member))
	b = binary.BigEndian.AppendUint32(b, uint32(t.T))
	b = binary.BigEndian.AppendUint32(b, uint32(t.Deadline))
	b = binary.BigEndian.AppendUint32(b, uint32(len(t.Members)))
	for _, m := range t.Members {
		b = binary.BigEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	return b
}

// SignTask sets t.Sig: the coordinator's Ed25519 signature (RFC 8032,
// keydir.CoordinatorSignKey) over TaskSignedBytes(campaign, t).
func SignTask(key ed25519.PrivateKey, campaign string, t *Task) {
	t.Sig = ed25519.Sign(key, TaskSignedBytes(campaign, t))
}

// VerifyTask checks t.Sig under pub, the coordinator's public key the
// client pinned; errors wrap ErrTaskSignature.
func VerifyTask(pub ed25519.PublicKey, campaign string, t *Task) error {
	if len(pub) != ed25519.PublicKeySize || len(t.Sig) != ed25519.SignatureSize || !ed25519.Verify(pub, TaskSignedBytes(campaign, t), t.Sig) {
		return ErrTaskSignature
	}
	return nil
}
