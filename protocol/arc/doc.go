// Package arc implements Anonymous Rate-Limited Credentials (ARC),
// draft-ietf-privacypass-arc-crypto (editor's copy at
// ietf-wg-privacypass/draft-arc commit 3268903, 2026-03-02), suite
// ARCV1-P256: keyed-verification anonymous credentials over the algebraic
// MAC MAC_GGM of Chase, Meiklejohn and Zaverucha ("Algebraic MACs and
// Keyed-Verification Anonymous Credentials", CCS 2014; CMZ14), with
// presentations limited to L per presentation context.
//
// Flow (shapes in bytes, P-256: Ne = 33, Ns = 32):
//
//	server: sk, _ := GenerateKey(rand.Reader); pk := sk.Public()            // PublicKeySize = 99
//	client: secrets, req, _ := NewCredentialRequest(rand.Reader)             // CredentialRequestSize = 226
//	server: resp, _ := sk.Issue(rand.Reader, req)                           // CredentialResponseSize = 454
//	client: cred, _ := secrets.Finalize(pk, req, resp)                      // CredentialSize = 131 (secret)
//	client: p, _ := cred.Present(rand.Reader, ctx, nonce, limit)             // PresentationSize(limit) = 357 + 129·k
//	server: err := sk.VerifyPresentation(p, ctx, limit); then refuse a repeated p.Tag() per ctx
//
// The issuer learns nothing of the credential's secret m1 (blind
// issuance); presentations are unlinkable to each other and to issuance;
// each carries tag = (m1+nonce)^−1 · HashToGroup(ctx, "Tag"), deterministic
// per (credential, ctx, nonce), so with nonce ∈ [0, limit) proven in zero
// knowledge a credential yields at most limit distinct tags per ctx. The
// verifier holds the private key (keyed verification); it must store the
// tags it accepted per context.
//
// Proofs are the draft's: Schnorr proofs for linear relations
// (draft-irtf-cfrg-sigma-protocols), made non-interactive with the SHAKE128
// duplex sponge (draft-irtf-cfrg-fiat-shamir), and the draft's range proof
// over ComputeBases(limit).
//
// Conformance: every field of the draft's ARCV1-P256 test vectors
// (testdata/allVectors.json: server key, request incl. proof, response incl.
// proof, credential, two presentations incl. proofs) is reproduced byte for
// byte by TestVectors. Those vectors were produced with the Fiat–Shamir
// initialisation of the sigma-protocols reference code before its commit
// 1d243b4 (sponge IV = protocol id, then absorb u32be len ‖ session ‖ u32be
// len ‖ instance label); the newer text (session hashed into a 64-byte
// session id, label absorbed without length) gives different challenges.
// This package follows the vectors; sigma.go's transcript is the one place
// to change when the draft regenerates them.
//
// Two crowdlog choices beyond the draft:
//   - limit 1 (crowdlog's FT_u: one presentation per artifact context): the
//     draft's ComputeBases(1) yields the base 0, which has no inverse. Here
//     limit 1 has no bit commitments (k = 0) and the range proof is the one
//     equation nonceCommit = nonceBlinding·H, which with nonceCommit =
//     nonce·G + nonceBlinding·H proves nonce = 0.
//   - the request context is DefaultRequestContext unless the ...WithContext
//     functions are used: crowdlog keys are per epoch, so m2 binds nothing
//     more.
//
// The group (group.go) is filippo.io/nistec's projective P-256 with
// scalars mod the order in filippo.io/bigmod, both constant time, and
// hash-to-curve (RFC 9380 SSWU) over the package's own Montgomery field
// arithmetic. Everything that touches a secret (the client's m1, r1, r2
// and presentation blinds, the issuer's key and b, every prover nonce)
// uses the constant-time multiplications: nistec's ScalarMult and
// ScalarBaseMult, and for points multiplied many times (H, the issuer
// key's X1, a credential's U and U') constant-time comb tables of signed
// five-bit windows (comb.go; ≈ 21 µs against ≈ 45 µs). Proof verification, whose
// inputs are all public (elements, challenge, responses), recomputes each
// sigma commitment as one variable-time multi-scalar multiplication
// (Straus, wNAF), as do the bit commitments' sum and hash-to-curve of
// public contexts. Secret-dependent branches are limited to the range
// proof's bit decomposition of the nonce (which the draft also asks to
// make constant-time; the nonce is small and at most limit values).
package arc
