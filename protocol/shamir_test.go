package protocol

import (
	"crypto/rand"
	"testing"

	"github.com/cloudflare/circl/oprf"
)

func BenchmarkRecoverK5(b *testing.B) {
	key, _ := oprf.GenerateKey(OPRFSuite, rand.Reader)
	s, _ := DeriveSealing(omegaFor(b, key, "query", "e", "weather"), "query", "e", FTa, 5)
	var shares []Share
	for i := 0; i < 5; i++ {
		shares = append(shares, s.poly.Eval(G.RandomNonZeroScalar(rand.Reader)))
	}
	for b.Loop() {
		Recover(shares, 5)
	}
}
