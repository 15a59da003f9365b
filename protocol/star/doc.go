// Package star seals artifacts so that one opens only once k distinct
// shares are sent: from the OPRF output ω and the release context (app,
// epoch, policy, k) it derives the tag, the AEAD key, the Shamir polynomial
// and its Feldman commitment (DeriveSealing); a report is tag + one share +
// commitment + AEAD ciphertext of the payload (Seal, Report, Payload). The
// share's x is random under FT_a and derived from the user's secret and the
// tag under FT_u. After STAR (Davidson et al., CCS 2022) §4 and CrowdLogging
// (Feild et al., SIGIR 2011) §3.1–3.2.
package star
