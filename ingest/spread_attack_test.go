package ingest

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	circloprf "github.com/cloudflare/circl/oprf"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// TestAttackClientBurst: an observer of relay a's inbox (or of the client's
// network) links one user's artifacts when they leave as one burst. The
// observer takes the largest number of the user's reports inside any
// 100 ms window. With Spread = 2 s the user's 20 reports must not leave as
// a burst (at most 8 in any 100 ms); the same client with Spread = 0 (the
// behaviour before the window existed, still used by log replays) sends
// all 20 within 100 ms, which shows the measure can fail.
func TestAttackClientBurst(t *testing.T) {
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	_, route := newHops(t)
	t0 := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	var recs []aol.Record
	for i := 0; i < 20; i++ {
		recs = append(recs, aol.Record{AnonID: "1", Query: fmt.Sprintf("query %d", i), QueryTime: t0.Add(time.Duration(i) * time.Second)})
	}
	burst := func(spread time.Duration) (int, time.Duration) {
		var mu sync.Mutex
		var at []time.Time
		c := &Client{App: apps.QueryApp{}, Epoch: "e", Policy: star.FTu, K: 2, Spread: spread,
			Randomness: newLocalRandomness(key), Route: route,
			Publish: func(_ context.Context, _ []byte) error {
				mu.Lock()
				at = append(at, time.Now())
				mu.Unlock()
				return nil
			}}
		u, _ := star.NewUserSecret()
		if n, err := c.SubmitUser(context.Background(), &u, recs); err != nil || n != len(recs) {
			t.Fatalf("spread %v: %d reports, %v", spread, n, err)
		}
		most := 0
		for i := range at {
			n := 0
			for j := range at {
				if d := at[j].Sub(at[i]); d >= 0 && d < 100*time.Millisecond {
					n++
				}
			}
			most = max(most, n)
		}
		return most, at[len(at)-1].Sub(at[0])
	}
	control, _ := burst(0)
	most, span := burst(2 * time.Second)
	fmt.Printf("ATTACK client-burst: at most %d of 20 reports of one user in any 100 ms with a 2 s spread window (span %s); control without the window: %d of 20\n",
		most, span.Round(time.Millisecond), control)
	if control != len(recs) {
		t.Fatalf("control: back-to-back sending put only %d of 20 reports in 100 ms", control)
	}
	if most > 8 {
		t.Fatalf("with a 2 s window, %d of 20 reports left within 100 ms", most)
	}
}
