package attack

import (
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// TestAttackCrossPolicyShares: an aggregator holds, for one artifact of one
// (app, epoch), reports sealed under several release contexts — FT_a and
// FT_u with the same k, or FT_u with k = 3 and k = 5 — each group below its
// own threshold, or one of them opened. It pools the shares across the
// groups (Lagrange interpolation over every share it has) and tries the
// result, and the secret of any opened group, as the key of the others.
// Binding the polynomial to the whole release context (star.DeriveSealing)
// makes every try fail: no group opens below its own k.
func TestAttackCrossPolicyShares(t *testing.T) {
	const artifacts = 200
	const app, epoch = "query", "2006-03"
	pooled, reused, options, control := 0, 0, 0, 0
	for i := 0; i < artifacts; i++ {
		omega := make([]byte, 64) // an OPRF output: the attacker does not need it
		rand.Read(omega)
		seal := func(p star.Policy, k, users int) (*star.Sealing, []*star.Report) {
			s, err := star.DeriveSealing(omega, app, epoch, p, k)
			if err != nil {
				t.Fatal(err)
			}
			var out []*star.Report
			for u := 0; u < users; u++ {
				sec, _ := star.NewUserSecret()
				r, err := s.Seal(&sec, fmt.Sprint("artifact ", i), "")
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, r)
			}
			return &s, out
		}
		// 1. FT_a (3 reports) + FT_u (2 users), both k = 5: pool 5 shares
		_, a := seal(star.FTa, 5, 3)
		_, u := seal(star.FTu, 5, 2)
		var shares []vss.Share
		for _, r := range append(append([]*star.Report{}, a...), u...) {
			shares = append(shares, r.Share)
		}
		if f, err := vss.Interpolate(shares); err == nil {
			if _, err := star.OpenPayload(star.KeyFromSecret(u[0].Tag, f.Secret()), u[0]); err == nil {
				pooled++
			}
		}

		// 2. FT_u k = 3 opened by 3 users; its secret tried on the k = 5 group of 2
		_, three := seal(star.FTu, 3, 3)
		_, five := seal(star.FTu, 5, 2)
		var s3 []vss.Share
		for _, r := range three {
			s3 = append(s3, r.Share)
		}
		if f, err := vss.Interpolate(s3); err == nil {
			if _, err := star.OpenPayload(star.KeyFromSecret(five[0].Tag, f.Secret()), five[0]); err == nil {
				reused++
			}
		}
	}
	// 3. click clients with --url-level full (3) and domain (2) mining one
	// artifact string: their shares must not pool (star.Context.Meaning);
	// control: without the options bound, the 5 shares open.
	for i := 0; i < artifacts; i++ {
		omega := make([]byte, 64)
		rand.Read(omega)
		pool := func(m1, m2 string) bool {
			var shares []vss.Share
			var last *star.Report
			for u, m := range []string{m1, m1, m1, m2, m2} {
				s, err := star.DeriveSealingIn(omega, star.Context{App: "click", Meaning: m, Epoch: epoch, Policy: star.FTu, K: 5})
				if err != nil {
					t.Fatal(err)
				}
				sec, _ := star.NewUserSecret()
				r, _ := s.Seal(&sec, fmt.Sprint("q → site ", i, u), "")
				shares = append(shares, r.Share)
				last = r
			}
			f, err := vss.Interpolate(shares)
			if err != nil {
				return false
			}
			_, err = star.OpenPayload(star.KeyFromSecret(last.Tag, f.Secret()), last)
			return err == nil
		}
		if pool("url-level=full", "url-level=domain") {
			options++
		}
		if pool("", "") {
			control++
		}
	}
	if control != artifacts {
		t.Fatalf("control: only %d of %d groups of 5 same-context shares opened", control, artifacts)
	}
	fmt.Printf("ATTACK cross-policy-shares: %d of %d artifacts opened below k by pooling FT_a+FT_u shares; %d of %d k=5 groups opened with an opened k=3 group's secret; %d of %d opened by pooling click shares mined with different --url-level (control, same options: %d of %d)\n",
		pooled, artifacts, reused, artifacts, options, artifacts, control, artifacts)
	if pooled != 0 || reused != 0 || options != 0 {
		t.Fatalf("groups opened below their threshold: %d by pooling across policies, %d by reusing a smaller k's secret", pooled, reused)
	}
}
