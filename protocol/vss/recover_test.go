package vss

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
)

// flipBit returns s with bit `bit` of its X (onX) or Y encoding flipped: a
// share one bit away from a valid one. Low bits keep the scalar canonical
// (below ℓ) except with negligible probability.
func flipBit(t testing.TB, s Share, onX bool, bit int) Share {
	t.Helper()
	v := s.Y
	if onX {
		v = s.X
	}
	b, err := v.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	b[bit/8] ^= 1 << (bit % 8)
	w := protocol.G.NewScalar()
	if err := w.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if onX {
		return Share{X: w, Y: s.Y.Copy()}
	}
	return Share{X: s.X.Copy(), Y: w}
}

// junkCommitment has k points that are not ristretto255 encodings.
func junkCommitment(k int) *Commitment {
	junk := make([]byte, CommitmentSize(k))
	for i := range junk {
		junk[i] = 0xff
	}
	c, _ := NewCommitment(junk, k)
	return c
}

// TestRecoverVerified: k honest shares (more given: only the first k count)
// recover the committed polynomial with or without the batch check, on both
// sides of DirectCheckMaxK; the result has the committed f(0) and accepts
// later shares of f only.
func TestRecoverVerified(t *testing.T) {
	for _, k := range []int{1, 2, DirectCheckMaxK, DirectCheckMaxK + 1, 10} {
		for _, n := range []int{k, k + 2} {
			for _, checked := range []bool{false, true} {
				t.Run(fmt.Sprintf("k=%d/n=%d/checked=%v", k, n, checked), func(t *testing.T) {
					p := randomPoly(k)
					c, _ := NewCommitment(CommitPolynomial(p), k)
					rec, err := c.RecoverVerified(randomShares(p, n), checked)
					if err != nil {
						t.Fatal(err)
					}
					if rec.BatchFailed || rec.Bad != nil || rec.Failed != 0 {
						t.Fatalf("honest shares: %+v", rec)
					}
					if !rec.Poly.Secret().IsEqual(p.Secret()) {
						t.Fatal("recovered f(0) is not the committed secret")
					}
					if ok, err := c.VerifySecret(rec.Poly.Secret()); !ok || err != nil {
						t.Fatalf("recovered f(0) fails VerifySecret (%v)", err)
					}
					if !rec.Poly.Contains(randomShares(p, 1)[0]) || rec.Poly.Contains(randomShares(randomPoly(k), 1)[0]) {
						t.Fatal("recovered polynomial misjudges a later share")
					}
				})
			}
		}
	}
}

// TestRecoverVerifiedBadShare: one share with one flipped bit (of X or of
// Y, at every position among the first k) fails the batch check and is the
// only one reported bad; recovery errors with ErrThreshold until k good
// shares exist, then returns the committed secret, both in the same call
// (k+1 shares given) and in a later call with the bad share discarded and a
// new good one added.
func TestRecoverVerifiedBadShare(t *testing.T) {
	for _, k := range []int{2, DirectCheckMaxK, 5} {
		for m := 0; m < k; m++ {
			for _, onX := range []bool{false, true} {
				t.Run(fmt.Sprintf("k=%d/bad=%d/onX=%v", k, m, onX), func(t *testing.T) {
					p := randomPoly(k)
					raw := CommitPolynomial(p)
					c, _ := NewCommitment(raw, k)
					shares := randomShares(p, k+1)
					shares[m] = flipBit(t, shares[m], onX, 8*m%250)
					if feldmanNaive(t, raw, k, shares[m]) {
						t.Fatal("flipped share satisfies Feldman's equation")
					}

					// exactly k shares, one bad: not enough good ones
					rec, err := c.RecoverVerified(shares[:k], false)
					if !errors.Is(err, ErrThreshold) {
						t.Fatalf("k shares with one bad: err %v, want ErrThreshold", err)
					}
					if !rec.BatchFailed || !slices.Equal(rec.Bad, []int{m}) || rec.Failed != 1 {
						t.Fatalf("k shares with one bad: %+v", rec)
					}

					// the caller discards the bad share, a good one arrives,
					// checked alone on arrival
					good := slices.Delete(slices.Clone(shares), m, m+1)
					if ok, _ := c.VerifyShare(good[k-1]); !ok {
						t.Fatal("honest share rejected")
					}
					rec, err = c.RecoverVerified(good, true)
					if err != nil || rec.BatchFailed || rec.Bad != nil || rec.Failed != 0 {
						t.Fatalf("after discarding the bad share: %+v, %v", rec, err)
					}
					if !rec.Poly.Secret().IsEqual(p.Secret()) {
						t.Fatal("wrong secret after discarding the bad share")
					}

					// k+1 shares, one bad, in one call
					rec, err = c.RecoverVerified(shares, false)
					if err != nil {
						t.Fatal(err)
					}
					if !rec.BatchFailed || !slices.Equal(rec.Bad, []int{m}) || rec.Failed != 1 {
						t.Fatalf("k+1 shares with one bad: %+v", rec)
					}
					if !rec.Poly.Secret().IsEqual(p.Secret()) {
						t.Fatal("wrong secret from k+1 shares with one bad")
					}

					// checked = true trusts the caller: the bad share is used
					rec, err = c.RecoverVerified(shares[:k], true)
					if err != nil || rec.Poly.Secret().IsEqual(p.Secret()) {
						t.Fatalf("checked=true with a bad share: secret right=%v, %v", err == nil && rec.Poly.Secret().IsEqual(p.Secret()), err)
					}
				})
			}
		}
	}
}

// TestRecoverVerifiedErrors: fewer than k shares, an undecodable commitment
// and a duplicate X are errors of their own kinds.
func TestRecoverVerifiedErrors(t *testing.T) {
	const k = 4
	p := randomPoly(k)
	c, _ := NewCommitment(CommitPolynomial(p), k)
	for n := 0; n < k; n++ {
		for _, checked := range []bool{false, true} {
			if _, err := c.RecoverVerified(randomShares(p, n), checked); !errors.Is(err, ErrThreshold) {
				t.Fatalf("%d shares of k=%d: err %v, want ErrThreshold", n, k, err)
			}
		}
	}
	for _, kk := range []int{DirectCheckMaxK, DirectCheckMaxK + 2} {
		rec, err := junkCommitment(kk).RecoverVerified(randomShares(randomPoly(kk), kk), false)
		if !errors.Is(err, protocol.ErrMalformed) || rec.Failed != 0 || rec.BatchFailed {
			t.Fatalf("k=%d junk commitment: %+v, %v", kk, rec, err)
		}
	}
	dup := randomShares(p, k)
	dup[k-1] = dup[0]
	rec, err := c.RecoverVerified(dup, false)
	if err == nil || errors.Is(err, ErrThreshold) || errors.Is(err, protocol.ErrMalformed) || rec.Failed != 1 {
		t.Fatalf("duplicate x: %+v, %v", rec, err)
	}
}

// TestSearchSubsets: with bad shares first, the search finds the subset of
// good ones that contains the last share, after exactly the subsets that
// precede it in lexicographic order; a bound below that finds nothing; an
// acceptor that accepts nothing tries every subset once.
func TestSearchSubsets(t *testing.T) {
	const k = 3
	p := randomPoly(k)
	c, _ := NewCommitment(CommitPolynomial(p), k)
	accept := func(f Polynomial) bool {
		ok, err := c.VerifySecret(f.Secret())
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// shares 0, 1 bad, 2, 3 and the last (4) good: the subsets {i, j, 4}
	// in order (0,1) (0,2) (0,3) (1,2) (1,3) (2,3): the sixth is right
	shares := randomShares(p, 5)
	shares[0] = flipBit(t, shares[0], false, 3)
	shares[1] = flipBit(t, shares[1], true, 17)
	f, failed, err := SearchSubsets(shares, k, 64, accept)
	if err != nil || failed != 5 || !f.Secret().IsEqual(p.Secret()) {
		t.Fatalf("search: failed %d, %v", failed, err)
	}
	if _, failed, err := SearchSubsets(shares, k, 5, accept); !errors.Is(err, ErrNoSubset) || failed != 5 {
		t.Fatalf("search bounded at 5: failed %d, %v", failed, err)
	}
	if _, failed, err := SearchSubsets(shares, k, 64, func(Polynomial) bool { return false }); !errors.Is(err, ErrNoSubset) || failed != 6 {
		t.Fatalf("nothing accepted: failed %d (want C(4,2) = 6), %v", failed, err)
	}
	if _, _, err := SearchSubsets(shares[:k-1], k, 64, accept); !errors.Is(err, ErrThreshold) {
		t.Fatalf("k−1 shares: %v", err)
	}
	if f, failed, err := SearchSubsets(shares[2:3], 1, 64, accept); err == nil || failed != 1 || f.coeffs != nil {
		t.Fatalf("k=1: a share is not the secret, yet accepted (failed %d, %v)", failed, err)
	}
}

// TestNextCombination: the 2-combinations of 0..4 in lexicographic order,
// then false; the empty combination has no successor.
func TestNextCombination(t *testing.T) {
	idx := []int{0, 1}
	var got [][]int
	for {
		got = append(got, slices.Clone(idx))
		if !nextCombination(idx, 5) {
			break
		}
	}
	want := [][]int{{0, 1}, {0, 2}, {0, 3}, {0, 4}, {1, 2}, {1, 3}, {1, 4}, {2, 3}, {2, 4}, {3, 4}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("got %v", got)
	}
	if nextCombination(nil, 5) {
		t.Fatal("empty combination advanced")
	}
}

// ExampleCommitment_RecoverVerified: a threshold-3 sharing with one
// tampered share among the first three. The batch check fails, the bad
// share is named, and the fourth share completes the recovery.
func ExampleCommitment_RecoverVerified() {
	f := DerivePolynomial([]byte("artifact ω"), 3)
	c, _ := NewCommitment(CommitPolynomial(f), 3)
	var shares []Share
	for x := uint64(1); x <= 4; x++ {
		shares = append(shares, f.Eval(protocol.G.NewScalar().SetUint64(x)))
	}
	shares[1].Y.Add(shares[1].Y, protocol.G.NewScalar().SetUint64(1)) // tampered

	rec, err := c.RecoverVerified(shares[:3], false)
	fmt.Println(rec.BatchFailed, rec.Bad, errors.Is(err, ErrThreshold))

	rec, err = c.RecoverVerified(shares, false)
	ok, _ := c.VerifySecret(rec.Poly.Secret())
	fmt.Println(err, rec.Bad, rec.Poly.Secret().IsEqual(f.Secret()), ok)
	// Output:
	// true [1] true
	// <nil> [1] true true
}
