package star

import (
	"crypto/rand"
	"testing"

	circloprf "github.com/cloudflare/circl/oprf"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/internal/oprftest"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

func BenchmarkRecoverK5(b *testing.B) {
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	s, _ := DeriveSealing(oprftest.OmegaFor(b, key, "query", "e", "weather"), "query", "e", FTa, 5)
	var shares []vss.Share
	for i := 0; i < 5; i++ {
		shares = append(shares, s.poly.Eval(protocol.G.RandomNonZeroScalar(rand.Reader)))
	}
	for b.Loop() {
		vss.Recover(shares, 5)
	}
}
