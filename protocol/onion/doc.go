// Package onion is crowdlog's onion routing layer: HPKE (RFC 9180,
// DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305) one layer
// per hop, each naming its next hop (Hop), every layer padded inside its
// AEAD to one of fixed size classes (SizeClasses; Peel refuses other
// lengths and non-zero padding);
// key pairs and key files with a one-byte key id; Peel for relays and the
// aggregator (ErrUnknownKey for a key id it does not hold); and relay key
// announcements (RelayKeysRequest/Response) so clients refuse a key id a
// relay would drop.
package onion
