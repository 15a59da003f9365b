package attack

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	circloprf "github.com/cloudflare/circl/oprf"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/randomness"
)

// Omega computes ω for an artifact the way an attacker can: LocalOmegaFunc
// (the paper's hash mode, no secret) or KeyOmega (with the randomness
// service's epoch key: aggregator + randomness collusion).
type Omega func(app, epoch, artifact string) ([]byte, error)

// LocalOmegaFunc is star.LocalOmega as an Omega: what anyone can compute.
func LocalOmegaFunc(app, epoch, artifact string) ([]byte, error) {
	return star.LocalOmega(app, epoch, artifact), nil
}

// KeyOmega evaluates the OPRF directly under the epoch keys derived from a
// randomness seed (RFC 9497 FullEvaluate = what clients obtain through
// Blind/Finalize): the randomness service colluding with the aggregator, or
// a thief of keys/randomness.seed (the older layout, where every epoch key
// was derived from one seed).
func KeyOmega(seed []byte) Omega {
	servers := map[string]circloprf.VerifiableServer{}
	return func(app, epoch, artifact string) ([]byte, error) {
		s, ok := servers[epoch]
		if !ok {
			sk, err := oprf.DeriveOPRFKey(seed, epoch)
			if err != nil {
				return nil, err
			}
			s = circloprf.NewVerifiableServer(oprf.OPRFSuite, sk)
			servers[epoch] = s
		}
		return s.FullEvaluate(oprf.OPRFInput(app, epoch, artifact))
	}
}

// KeyDirOmega evaluates the OPRF directly under the epoch key files of a
// randomness key directory (randomness.KeyFile): the randomness service
// colluding with the aggregator, or a thief of keys/randomness.keys. An
// epoch whose key was destroyed (closed + grace) fails: there is nothing
// left to probe with.
func KeyDirOmega(dir string) Omega {
	servers := map[string]circloprf.VerifiableServer{}
	return func(app, epoch, artifact string) ([]byte, error) {
		s, ok := servers[epoch]
		if !ok {
			sk, err := randomness.ReadKeyFile(randomness.KeyFile(dir, epoch))
			if err != nil {
				return nil, fmt.Errorf("attack: no usable key for epoch %s in %s (destroyed or never created): %w", epoch, dir, err)
			}
			s = circloprf.NewVerifiableServer(oprf.OPRFSuite, sk)
			servers[epoch] = s
		}
		return s.FullEvaluate(oprf.OPRFInput(app, epoch, artifact))
	}
}

// SeedOmega returns the Omega of stolen randomness keys at path: a
// randomness key directory (KeyDirOmega; a keys directory holding
// randomness.keys works too) or a 32-byte seed file of the older layout
// (KeyOmega).
func SeedOmega(path string) (Omega, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		if sub := filepath.Join(path, "randomness.keys"); isDir(sub) {
			path = sub
		}
		return KeyDirOmega(path), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("attack: read randomness seed: %w", err)
	}
	if len(b) != 32 {
		return nil, fmt.Errorf("attack: randomness seed %s has %d bytes, want 32", path, len(b))
	}
	return KeyOmega(b), nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// ProbeResult counts what an offline probe found. Found[i] is the number
// of pending groups whose artifact was identified from the candidates;
// the identified artifacts themselves are in Artifacts (tag hex →
// artifact), for the caller to count, never to print from real logs.
type ProbeResult struct {
	Candidates int
	Pending    int
	Found      int
	Artifacts  map[string]string
}

// Probe is the offline probe of CrowdLogging §5.4: for every candidate
// artifact and every (app, epoch, policy, k) present in the pending
// groups, compute ω with omega, then the tag (star.TagFromOmega), and
// look it up among the pending tags. In hash mode (LocalOmegaFunc on
// reports sealed with star.LocalOmega) it finds every pending
// candidate; against VOPRF reports without the epoch key it finds none.
func Probe(groups []aggregator.PendingGroup, candidates []string, omega Omega) (ProbeResult, error) {
	type params struct {
		app, epoch string
		policy     star.Policy
		k          int
	}
	pending := map[string]bool{}
	ps := map[params]bool{}
	for _, g := range groups {
		pending[g.Tag] = true
		pol, err := star.ParsePolicy(g.Policy)
		if err != nil {
			return ProbeResult{}, err
		}
		ps[params{g.App, g.Epoch, pol, g.K}] = true
	}
	res := ProbeResult{Candidates: len(candidates), Pending: len(pending), Artifacts: map[string]string{}}
	for p := range ps {
		for _, c := range candidates {
			w, err := omega(p.app, p.epoch, c)
			if err != nil {
				return res, err
			}
			tag := star.TagFromOmega(w, p.app, p.epoch, p.policy, p.k)
			h := hex.EncodeToString(tag[:])
			if pending[h] {
				if _, dup := res.Artifacts[h]; !dup {
					res.Found++
				}
				res.Artifacts[h] = c
			}
		}
	}
	return res, nil
}
