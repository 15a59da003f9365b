// Package oprf is crowdlog's randomness protocol: RFC 9497 verifiable mode
// (VOPRF, §3.3.2) over ristretto255 through circl's oprf package. A client
// blinds the OPRF input of each artifact (Blind; OPRFInput), the randomness
// service evaluates a batch under the epoch's key and proves it with one
// DLEQ proof (Evaluate), and the client checks the proof against the pinned
// epoch public key and finalizes ω (Finalize; ErrProof when the proof
// fails). The evaluation and the DLEQ proof and its check run in
// protocol/internal/dleq (variable time only over public values, RFC 9497
// §2.2); circl blinds, unblinds and hashes. Wire messages: RandomnessRequest/Response and
// PublicKeyRequest/Response. After STAR (Davidson et al., CCS 2022) §4.
package oprf
