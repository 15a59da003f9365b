// Package token is crowdlog's Privacy Pass one-time tokens (RFC 9576
// architecture, RFC 9577 token and TokenChallenge, RFC 9578 §5 privately
// verifiable issuance): an issuer that authenticated a client blindly
// evaluates a VOPRF (RFC 9497, verifiable mode, circl's oprf) on token
// inputs it never sees; the client unblinds them into tokens that the key's
// holder later verifies without learning which issuance they came from.
//
// crowdlog issues them over ristretto255-SHA512 as the private token type
// TypeRistretto (0xC1D0): 32-byte elements and scalars, a 64-byte
// authenticator, a 162-byte token. The same code run with P384-SHA384 as
// RFC 9578's type 0x0001 reproduces RFC 9578 Appendix A.1
// (testdata/rfc9578-voprf-p384.json). Issuance is batched: one request of n
// blinded elements gets n evaluated elements and one DLEQ proof (RFC 9497
// §2.2.1 batched proof). For TypeRistretto the evaluation, the proof and
// its check run in protocol/internal/dleq, which computes the proof's sums
// over public elements in variable time and keeps everything that touches
// the key constant time; circl blinds, unblinds and hashes.
//
// Each Kind has its own key per epoch: KindRandomness tokens pay for OPRF
// elements at the randomness service, KindReport tokens for reports at the
// aggregator (nonce = ReportNonce of the report). The challenge digest of a
// token names its kind and epoch (TokenChallenge), so a token of one kind
// or epoch never verifies under another key.
//
// messages.go holds the issuer's wire messages (IssueRequest, signed by the
// client's Ed25519 identity key, and IssueResponse).
package token
