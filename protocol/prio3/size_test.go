package prio3

import (
	"fmt"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/onion"
)

// TestUploadSizeOptions measures the upload (public share, leader input
// share, sealed helper share, id, metadata, the outer HPKE seal) of one
// client at L = 10,000 keywords for the measurements circl v1.6.5 offers
// (SumVec and MultihotCountVec are Field128 only: 16 B per encoded entry)
// and chunk lengths around √(L·b). It prints one UPLOADSIZE line per
// option; docs/decisions.md ("Prio3 upload size") records the choice.
func TestUploadSizeOptions(t *testing.T) {
	if testing.Short() {
		t.Skip("shards one L = 10,000 report per option")
	}
	lk, _ := onion.GenerateKeyPair(1)
	hk, _ := onion.GenerateKeyPair(2)
	const length = 10000
	type option struct {
		c    Config
		name string
	}
	var opts []option
	for _, b := range []int{1, 2, 3, 4} {
		c := Config{Kind: KindSumVec, Length: length, Bits: b}
		d := DefaultChunk(c)
		for _, ch := range []int{d / 2, d, 2 * d} {
			c.Chunk = ch
			opts = append(opts, option{c, fmt.Sprintf("sumvec b=%d chunk=%d", b, ch)})
		}
	}
	opts = append(opts, option{Config{Kind: KindPresence, Length: length, MaxWeight: 100}, "presence w=100 chunk=default"})
	base := 0
	for _, o := range opts {
		v, err := New("size", o.c)
		if err != nil {
			t.Fatal(err)
		}
		counts := make([]uint64, length)
		for i := range 20 {
			counts[i*37] = 1
		}
		up, _, _, err := v.Shard("size", 20000, counts, lk.PublicKey(), hk.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		if o.c.Kind == KindSumVec && o.c.Bits == 4 && o.c.Chunk == DefaultChunk(o.c) {
			base = len(up)
		}
		fmt.Printf("UPLOADSIZE %s bytes=%d per_entry=%.1f\n", o.name, len(up), float64(len(up))/length)
	}
	if base == 0 {
		t.Fatal("no default option measured")
	}
}
