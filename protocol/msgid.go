package protocol

import (
	"crypto/sha256"
	"encoding/base64"
)

// MsgID is the JetStream deduplication id (Nats-Msg-Id header) of a layer:
// base64url of the first 16 bytes of its SHA-256. Layers are HPKE
// ciphertexts with fresh randomness, so equal ids mean a re-publication of
// the same layer, and the id reveals nothing the layer itself does not.
func LayerMsgID(layer []byte) string {
	h := sha256.Sum256(layer)
	return base64.RawURLEncoding.EncodeToString(h[:16])
}
