// Package vss is verifiable secret sharing over ristretto255: Shamir shares
// of a polynomial derived from ω (DerivePolynomial; Recover errors with
// ErrThreshold below k distinct shares), Lagrange interpolation, Feldman
// commitments C_i = a_i·G with single, batched (random linear combination)
// and whole-polynomial verification, recovery of the committed polynomial
// from verified shares (Commitment.RecoverVerified) or, unverified, by a
// search over k-subsets (SearchSubsets), and the multi-scalar
// multiplication behind the checks. CrowdLogging (Feild et al., SIGIR 2011)
// §3.1; Feldman, FOCS 1987.
package vss
