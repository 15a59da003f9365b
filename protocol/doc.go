// Package protocol is the ground of crowdlog's wire contract, shared by
// clients (ingest) and every role. It holds the codec every message uses
// (Writer, Reader: a version byte first, explicit lengths, errors wrapping
// ErrMalformed), the group constants of the suite (ristretto255), refusals
// a service sends instead of an answer (Refusal), every Kafka topic, header
// and NATS subject two roles agree on (names.go), and the messages that
// belong to no single primitive (Decrypted, EpochClose).
//
// One package per primitive sits below it:
//   - oprf: RFC 9497 VOPRF randomness (STAR, Davidson et al., CCS 2022, §4);
//   - vss: Shamir shares, interpolation, Feldman commitments;
//   - onion: HPKE (RFC 9180) onion layers and relay key announcements;
//   - star: artifact sealing and reports (CrowdLogging §3.1, STAR §4);
//   - blind: Private Data Donor blinded vectors and coordinator messages.
package protocol

// Version is the wire-format version byte that starts every message.
// Version 2: reports carry a Feldman commitment, randomness responses a DLEQ
// proof, and the randomness service publishes epoch public keys.
// Version 1 messages are refused as malformed.
const Version byte = 2
