// Package protocol holds crowdlog's wire formats and crypto suite, shared by
// clients (ingest), relays and the aggregator. It is small and versioned:
// every message starts with a version byte (Version) and every variable-length
// field carries an explicit length.
//
// The suite:
//   - OPRF randomness: RFC 9497 verifiable mode (VOPRF, §3.3.2) over
//     ristretto255 (oprf.go), one server key per epoch whose public key
//     clients pin; every batch answer carries a DLEQ proof. After STAR
//     (Davidson et al., CCS 2022) §4.
//   - Artifact sealing: tag, AEAD key and Shamir polynomial derived from the
//     OPRF output ω (seal.go, shamir.go), after CrowdLogging (Feild et al.,
//     SIGIR 2011) §3.1 and STAR §4. Each report carries a Feldman commitment
//     to its polynomial (feldman.go) so the aggregator can check shares.
//   - Onion layers: HPKE (RFC 9180) with DHKEM(X25519, HKDF-SHA256),
//     HKDF-SHA256 and ChaCha20-Poly1305, one layer per hop, padded to fixed
//     size classes (onion.go).
//   - Relay key announcements: the key ids and public keys a relay holds,
//     so clients refuse a key id the relay would drop (relaykeys.go).
package protocol

// Version is the wire-format version byte that starts every message.
// Version 2: reports carry a Feldman commitment, randomness responses a DLEQ
// proof, and the randomness service publishes epoch public keys.
// Version 1 messages are refused as malformed.
const Version byte = 2
