package aggregator

import (
	"testing"

	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// FuzzApplyInnerReport fuzzes what the aggregator parses after it opened
// its HPKE layer: the fuzzed bytes are sealed as a valid aggregator layer
// (the right key, a deliver hop), so every input reaches star.ParseReport
// and, for reports that parse, the group bookkeeping, recovery and AEAD
// open. Nothing may panic; a second copy of the same bytes must not emit
// anything twice.
func FuzzApplyInnerReport(f *testing.F) {
	key, _ := onion.GenerateKeyPair(1)
	s := sealing(f, "x", star.FTa, 1)
	u, _ := star.NewUserSecret()
	r, _ := s.Seal(&u, "x", "x")
	b, _ := r.MarshalBinary()
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Fuzz(func(t *testing.T, inner []byte) {
		l, err := onion.SealLayer(key.PublicKey(), onion.Hop{Kind: onion.HopDeliver}, inner)
		if err != nil {
			t.Skip() // too large for a layer
		}
		p := NewPartition(0, 1, []*onion.KeyPair{key})
		first := len(p.Apply(Message{Value: l}))
		if again := len(p.Apply(Message{Value: l})); again != 0 {
			t.Fatalf("the same report emitted %d items twice (first %d)", again, first)
		}
	})
}
