package vss

import (
	"errors"
	"fmt"
)

// ErrNoSubset is returned by SearchSubsets when none of the k-subsets it
// tried was accepted.
var ErrNoSubset = errors.New("protocol: no k-subset of the shares was accepted")

// Recovery is what Commitment.RecoverVerified found. Poly is meaningful only
// when RecoverVerified returned a nil error.
type Recovery struct {
	// Poly is the committed polynomial f (k coefficients; Poly.Secret() is
	// f(0), the shared secret). Later shares of the same commitment are
	// checked against it with Poly.Contains.
	Poly Polynomial
	// BatchFailed is true when the batch check of the first k shares
	// failed; every share was then checked alone. From then on the caller
	// should check each new share alone (VerifyShare) before it joins a
	// recovery, and pass checked = true.
	BatchFailed bool
	// Bad holds the indexes into the shares given to RecoverVerified, in
	// ascending order, of the shares that failed VerifyShare. Non-empty only
	// when BatchFailed. The caller discards them (and whatever carried
	// them): they are not on the committed polynomial.
	Bad []int
	// Failed counts the recovery attempts that did not yield the committed
	// polynomial: a failed batch check and a failed interpolation count one
	// each (0, 1 or 2).
	Failed int
}

// RecoverVerified recovers the committed polynomial f from shares, using
// only shares that satisfy Feldman's equation (Feldman, FOCS 1987) against
// c. shares must have distinct, non-zero X (one share per X: deduplicate
// first) and hold at least k of them; only the first k take part in a
// recovery unless some are found bad.
//
// With checked false, the first k shares are verified in one batch: their
// interpolated polynomial (Interpolate) against the commitment
// (VerifyPolynomial; soundness error 2^−128, see VerifyShares). k shares
// with distinct X are all valid iff the polynomial through them is the
// committed one, so when the batch passes that polynomial is f. When it
// fails (BatchFailed), every share is checked alone (VerifyShare, exact),
// the failing ones are reported in Bad, and f is interpolated from the
// first k that pass, if at least k pass. With checked true, the caller
// vouches that every share already passed VerifyShare, and f is
// interpolated from the first k without a check.
//
// Threshold recovery with verifiable shares as in STAR (Davidson et al.,
// CCS 2022) §4 and CrowdLogging (Feild et al., SIGIR 2011) §3.1.
//
// Errors: ErrThreshold (wrapped) when fewer than k shares are given, or
// when fewer than k remain after the bad ones are set aside (Bad then says
// which to discard; recovery needs more shares); ErrMalformed (wrapped)
// when a commitment point is not a valid encoding (no share can be
// verified against c); an interpolation error (wrapped) when two shares
// have the same X. The returned Recovery's BatchFailed, Bad and Failed are
// set on every return, errors included.
func (c *Commitment) RecoverVerified(shares []Share, checked bool) (Recovery, error) {
	var rec Recovery
	if len(shares) < c.k {
		return rec, fmt.Errorf("%w: have %d shares, need %d", ErrThreshold, len(shares), c.k)
	}
	f, err := Interpolate(shares[:c.k])
	if err != nil {
		rec.Failed++
		return rec, fmt.Errorf("protocol: recover: %w", err)
	}
	if !checked {
		ok, err := c.VerifyPolynomial(f)
		if err != nil {
			return rec, fmt.Errorf("protocol: recover: %w", err)
		}
		if !ok {
			rec.Failed++
			rec.BatchFailed = true
			kept, bad, err := c.badShares(shares)
			rec.Bad = bad
			if err != nil {
				return rec, fmt.Errorf("protocol: recover: %w", err)
			}
			if len(kept) < c.k {
				return rec, fmt.Errorf("%w: %d of %d shares failed the Feldman check, %d remain, need %d",
					ErrThreshold, len(bad), len(shares), len(kept), c.k)
			}
			if f, err = Interpolate(kept[:c.k]); err != nil { // every share now verified alone
				rec.Failed++
				return rec, fmt.Errorf("protocol: recover: %w", err)
			}
		}
	}
	rec.Poly = f
	return rec, nil
}

// badShares checks every share alone (VerifyShare) and returns the passing
// shares in their order and the indexes of the failing ones. Errors when
// the commitment does not decode.
func (c *Commitment) badShares(shares []Share) (kept []Share, bad []int, err error) {
	kept = make([]Share, 0, len(shares))
	for i, s := range shares {
		ok, err := c.VerifyShare(s)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			kept = append(kept, s)
		} else {
			bad = append(bad, i)
		}
	}
	return kept, bad, nil
}

// SearchSubsets is threshold recovery without share verification: it tries
// k-subsets of shares that contain the last share, the other k−1 taken from
// shares[:len(shares)−1] in lexicographic order of their indexes (subsets
// without the last share are assumed to have been tried when their own
// last share arrived), at most maxAttempts of them. For each it
// interpolates the polynomial through the k shares (Interpolate) and calls
// accept, which tells whether the polynomial is the right one by some
// outside check (e.g. STAR (Davidson et al., CCS 2022) §4: f(0) yields the
// AEAD key that opens a ciphertext). It returns the first accepted
// polynomial and the number of subsets tried and not accepted (failed
// interpolations included).
//
// Cost grows with the binomial coefficient C(len(shares)−1, k−1), hence the
// bound: with bad shares among the first ones, the right subset may come
// after maxAttempts and is then never found. Commitment.RecoverVerified
// has no such limit.
//
// Errors: ErrThreshold (wrapped) when fewer than k shares are given or
// k < 1; ErrNoSubset when no tried subset was accepted.
func SearchSubsets(shares []Share, k, maxAttempts int, accept func(Polynomial) bool) (Polynomial, int, error) {
	n := len(shares)
	if k < 1 || n < k {
		return Polynomial{}, 0, fmt.Errorf("%w: have %d shares, need k=%d ≥ 1", ErrThreshold, n, k)
	}
	newest := shares[n-1]
	idx := make([]int, k-1) // combination of k−1 among the first n−1
	for i := range idx {
		idx[i] = i
	}
	sub := make([]Share, k)
	failed := 0
	for attempt := 0; attempt < maxAttempts; attempt++ {
		for i, j := range idx {
			sub[i] = shares[j]
		}
		sub[k-1] = newest
		if f, err := Interpolate(sub); err == nil && accept(f) {
			return f, failed, nil
		}
		failed++
		if !nextCombination(idx, n-1) {
			break
		}
	}
	return Polynomial{}, failed, ErrNoSubset
}

// nextCombination advances idx to the next k-combination of 0..n-1 in
// lexicographic order; false when idx was the last.
func nextCombination(idx []int, n int) bool {
	k := len(idx)
	for i := k - 1; i >= 0; i-- {
		if idx[i] < n-k+i {
			idx[i]++
			for j := i + 1; j < k; j++ {
				idx[j] = idx[j-1] + 1
			}
			return true
		}
	}
	return false
}
