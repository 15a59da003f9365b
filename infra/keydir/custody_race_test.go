package keydir

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// TestCustodyMarkerRace: the randomness-token issuer marks its volume
// (MarkIssuerRole) while the randomness verifier on the same volume reads
// the marker (DirRole), both starting together, many times: on a fresh
// volume and on one already marked. A reader may see no marker yet, never
// a partial or empty one (the marker is written to a temporary file and
// renamed: infra/atomicfile), and a marker already right is not rewritten.
func TestCustodyMarkerRace(t *testing.T) {
	iterations := 400
	if testing.Short() {
		iterations = 100
	}
	root := t.TempDir()
	var reads, partial, none atomic.Int64
	var firstErr atomic.Value
	for i := range iterations {
		dir := filepath.Join(root, "vol", string(rune('a'+i%26)), filepath.Base(t.Name())+"-"+strconv.Itoa(i))
		if i%2 == 1 { // an already-marked volume: the issuer's restart
			if err := MarkIssuerRole(dir, RoleRandomness); err != nil {
				t.Fatal(err)
			}
		} else if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var done atomic.Bool
		start := make(chan struct{})
		for range 2 { // the issuer and a second replica of it
			wg.Go(func() {
				<-start
				if err := MarkIssuerRole(dir, RoleRandomness); err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
			})
		}
		var rg sync.WaitGroup
		for range 2 { // the verifier's loaders
			rg.Go(func() {
				<-start
				for n := 0; !done.Load() || n < 50; n++ {
					role, err := DirRole(dir)
					reads.Add(1)
					switch {
					case err != nil:
						partial.Add(1)
						firstErr.CompareAndSwap(nil, err)
					case role == "":
						none.Add(1)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		done.Store(true)
		rg.Wait()
	}
	t.Logf("custody marker race: %d iterations, %d reads, %d partial or empty markers read, %d reads before any marker", iterations, reads.Load(), partial.Load(), none.Load())
	if partial.Load() > 0 {
		t.Fatalf("%d of %d reads saw a partial or empty custody marker: %v", partial.Load(), reads.Load(), firstErr.Load())
	}
	if err, _ := firstErr.Load().(error); err != nil {
		t.Fatal(err)
	}
}
