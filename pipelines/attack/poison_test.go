package attack

import (
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// TestAttackPoisonedGroup: a client that knows an artifact (it holds ω like
// every client of it) sends one crafted report before the honest ones, to
// claim the artifact's group and keep it from opening. For each poison kind
// and 40 artifacts, the poisoned report arrives first, then k = 5 honest
// users' reports; every honest report must still open (the group is keyed
// by everything a report's metadata claims, shares are verified against
// the commitment, and a bad ciphertext is dropped alone).
func TestAttackPoisonedGroup(t *testing.T) {
	const artifacts, k = 40, 5
	const app, epoch = "query", "2006-03"
	kinds := []struct {
		name   string
		poison func(s star.Sealing, r *star.Report) *star.Report
	}{
		{"epoch", func(_ star.Sealing, r *star.Report) *star.Report { r.Epoch = "2006-04"; return r }},
		{"app", func(_ star.Sealing, r *star.Report) *star.Report { r.App = "click"; return r }},
		{"policy", func(_ star.Sealing, r *star.Report) *star.Report { r.Policy = star.FTa; return r }},
		{"commitment", func(s star.Sealing, r *star.Report) *star.Report {
			other := make([]byte, 64)
			rand.Read(other)
			o, _ := star.DeriveSealing(other, app, epoch, star.FTu, k)
			o = o.WithTag(s.Tag) // a consistent polynomial of its own under the artifact's tag
			u, _ := star.NewUserSecret()
			p, _ := o.Seal(&u, "poison", "")
			return p
		}},
		{"share", func(_ star.Sealing, r *star.Report) *star.Report {
			r.Share = vss.Share{X: r.Share.X, Y: r.Share.X} // y off the polynomial
			return r
		}},
		{"ciphertext", func(_ star.Sealing, r *star.Report) *star.Report {
			rand.Read(r.Ciphertext[24:])
			return r
		}},
		{"replay", func(_ star.Sealing, r *star.Report) *star.Report { return r }},
	}
	key, _ := onion.GenerateKeyPair(1)
	failed := 0
	var line string
	for _, kind := range kinds {
		p := aggregator.NewPartition(0, 1, []*onion.KeyPair{key})
		opened := 0
		for i := 0; i < artifacts; i++ {
			omega := make([]byte, 64)
			rand.Read(omega)
			s, err := star.DeriveSealing(omega, app, epoch, star.FTu, k)
			if err != nil {
				t.Fatal(err)
			}
			var honest []*star.Report
			for u := 0; u < k; u++ {
				sec, _ := star.NewUserSecret()
				r, _ := s.Seal(&sec, fmt.Sprint("artifact ", i), "")
				honest = append(honest, r)
			}
			var poison *star.Report
			if kind.name == "replay" {
				poison = honest[0] // the same report twice, before the rest
				p.ApplyReport(poison)
			} else {
				sec, _ := star.NewUserSecret()
				r, _ := s.Seal(&sec, fmt.Sprint("artifact ", i), "")
				poison = kind.poison(s, r)
				p.ApplyReport(poison)
			}
			n := 0
			for _, r := range honest {
				for _, d := range p.ApplyReport(r) {
					if d.Item == fmt.Sprint("artifact ", i) && d.Variant == "" {
						n++
					}
				}
			}
			if kind.name == "replay" { // honest[0] opened with the group, its replay did not count twice
				if n == k || n == k-1 {
					opened++
				}
			} else if n >= k {
				opened++
			}
		}
		if opened != artifacts {
			failed++
		}
		line += fmt.Sprintf(" %s %d/%d;", kind.name, opened, artifacts)
	}
	fmt.Printf("ATTACK poisoned-group: honest artifacts opened after one poisoned report first, per kind:%s %d kinds blocked\n", line, failed)
	if failed != 0 {
		t.Fatalf("%d poison kinds kept honest artifacts from opening:%s", failed, line)
	}
}
