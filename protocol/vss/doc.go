// Package vss is verifiable secret sharing over ristretto255: Shamir shares
// of a polynomial derived from ω (DerivePolynomial; Recover errors with
// ErrThreshold below k distinct shares), Lagrange interpolation, Feldman
// commitments C_i = a_i·G with single, batched (random linear combination)
// and whole-polynomial verification, and the multi-scalar multiplication
// behind them. CrowdLogging (Feild et al., SIGIR 2011) §3.1; Feldman, FOCS
// 1987.
package vss
