package onion

import (
	"fmt"
	"slices"

	"github.com/crowdlog/crowdlog/protocol"
)

// Relay key announcement ("a client gets a clear error when a relay
// key id is unknown"). A relay answers RelayKeysRequest with the HPKE key
// ids and public keys it currently holds, so a client can refuse to seal
// onions for a key id the relay would drop as "unknown_key" — a drop the
// client never hears of otherwise.

// MaxRelayName is the longest relay name in a key announcement, in bytes
// (relay names are one NATS subject token of at most 64 characters).
const MaxRelayName = 64

// RelayKeysRequest asks the relay named Relay which key ids it holds.
type RelayKeysRequest struct {
	Relay string // 1..MaxRelayName bytes
}

// MarshalBinary encodes: version ‖ u8 len ‖ relay name.
func (q *RelayKeysRequest) MarshalBinary() ([]byte, error) {
	if len(q.Relay) == 0 || len(q.Relay) > MaxRelayName {
		return nil, fmt.Errorf("protocol: relay name of %d bytes (want 1..%d)", len(q.Relay), MaxRelayName)
	}
	w := protocol.Writer{}
	w.U8(protocol.Version)
	w.Bytes8([]byte(q.Relay))
	return w.B, nil
}

// ParseRelayKeysRequest decodes a request; errors wrap ErrMalformed.
func ParseRelayKeysRequest(b []byte) (*RelayKeysRequest, error) {
	r := protocol.Reader{B: b}
	r.ReadVersion("relay keys request")
	q := &RelayKeysRequest{Relay: string(r.Bytes8("relay name"))}
	if err := r.Done("relay keys request"); err != nil {
		return nil, err
	}
	if len(q.Relay) == 0 || len(q.Relay) > MaxRelayName {
		return nil, protocol.Malformed("relay name of %d bytes (want 1..%d)", len(q.Relay), MaxRelayName)
	}
	return q, nil
}

// RelayKey is one key a relay holds: the key id carried in each layer
// header and the encoded X25519 public key (RFC 9180 SerializePublicKey,
// 32 bytes).
type RelayKey struct {
	ID     byte
	Public []byte
}

// RelayKeysResponse is a relay's key announcement: its name and the keys it
// holds, ids ascending and distinct; or a refusal (Error).
type RelayKeysResponse struct {
	Error string
	Relay string
	Keys  []RelayKey
}

// relayPublicKeySize is the encoded size of an X25519 public key.
const relayPublicKeySize = 32

// RelayKeysOf builds the announcement of relay name holding keys (sorted by
// id). Errors for a bad name, no keys, duplicate ids or more than 255 keys.
func RelayKeysOf(name string, keys []*KeyPair) (*RelayKeysResponse, error) {
	p := &RelayKeysResponse{Relay: name}
	for _, k := range keys {
		raw, err := k.Public.MarshalBinary()
		if err != nil {
			return nil, err
		}
		p.Keys = append(p.Keys, RelayKey{ID: k.ID, Public: raw})
	}
	slices.SortFunc(p.Keys, func(a, b RelayKey) int { return int(a.ID) - int(b.ID) })
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("protocol: relay %s key announcement: %w", name, err)
	}
	return p, nil
}

// check validates an OK announcement: name length, 1..255 keys with
// ascending distinct ids and 32-byte public keys.
func (p *RelayKeysResponse) check() error {
	if len(p.Relay) == 0 || len(p.Relay) > MaxRelayName {
		return protocol.Malformed("relay name of %d bytes (want 1..%d)", len(p.Relay), MaxRelayName)
	}
	if len(p.Keys) == 0 || len(p.Keys) > 255 {
		return protocol.Malformed("%d relay keys (want 1..255)", len(p.Keys))
	}
	for i, k := range p.Keys {
		if i > 0 && k.ID <= p.Keys[i-1].ID {
			return protocol.Malformed("relay key ids not ascending and distinct (%d after %d)", k.ID, p.Keys[i-1].ID)
		}
		if len(k.Public) != relayPublicKeySize {
			return protocol.Malformed("relay public key of %d bytes, want %d", len(k.Public), relayPublicKeySize)
		}
	}
	return nil
}

// IDs returns the key ids the relay holds, ascending.
func (p *RelayKeysResponse) IDs() []byte {
	ids := make([]byte, len(p.Keys))
	for i, k := range p.Keys {
		ids[i] = k.ID
	}
	return ids
}

// Lookup returns the relay's public key with id, and whether it holds one.
func (p *RelayKeysResponse) Lookup(id byte) ([]byte, bool) {
	for _, k := range p.Keys {
		if k.ID == id {
			return k.Public, true
		}
	}
	return nil, false
}

// MarshalBinary encodes: version ‖ status (0 ok, 1 error) ‖ (u8 len ‖ relay
// name ‖ u8 count ‖ count × (u8 key id ‖ u8 len ‖ public key) | u16 len ‖
// message). Keys must be ascending by id, distinct, 32 bytes each.
func (p *RelayKeysResponse) MarshalBinary() ([]byte, error) {
	w := protocol.Writer{B: make([]byte, 0, 4+len(p.Relay)+len(p.Keys)*(2+relayPublicKeySize))}
	w.U8(protocol.Version)
	if protocol.WriteStatus(&w, protocol.Refusal{Error: p.Error}) {
		return w.B, nil
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	w.Bytes8([]byte(p.Relay))
	w.U8(byte(len(p.Keys)))
	for _, k := range p.Keys {
		w.U8(k.ID)
		w.Bytes8(k.Public)
	}
	return w.B, nil
}

// ParseRelayKeysResponse decodes an announcement; errors wrap ErrMalformed.
// Public key bytes are length-checked only: compare them, or decode them
// with the HPKE suite before use.
func ParseRelayKeysResponse(b []byte) (*RelayKeysResponse, error) {
	r := protocol.Reader{B: b}
	r.ReadVersion("relay keys response")
	p := &RelayKeysResponse{}
	ok, f := protocol.ReadStatus(&r)
	if r.Err == nil && !ok && (f.Closed || f.Expired || f.Future) {
		r.Err = protocol.Malformed("epoch status in a relay keys response")
	}
	if ok {
		p.Relay = string(r.Bytes8("relay name"))
		n := int(r.U8("key count"))
		for i := 0; i < n && r.Err == nil; i++ {
			k := RelayKey{ID: r.U8("key id")}
			k.Public = r.Bytes8("public key")
			p.Keys = append(p.Keys, k)
		}
	} else {
		p.Error = f.Error
	}
	if err := r.Done("relay keys response"); err != nil {
		return nil, err
	}
	if ok {
		if err := p.check(); err != nil {
			return nil, err
		}
	}
	return p, nil
}
