package relays

import (
	"testing"
	"time"
)

// TestReplayFilterWindow: a forwarded key is remembered across one rotation
// and forgotten after two; a failed forward is forgotten at once; memory
// stays within two generations of entries.
func TestReplayFilterWindow(t *testing.T) {
	now := time.Unix(0, 0)
	f := newReplayFilter(time.Minute, 4)
	f.now = func() time.Time { return now }
	k := func(i byte) replayKey { return replayKey{i} }
	if !f.claim(k(1)) || f.claim(k(1)) {
		t.Fatal("in-flight key not claimed exactly once")
	}
	f.done(k(1), false) // forward failed: redelivery is not a replay
	if !f.claim(k(1)) {
		t.Fatal("redelivery after a failed forward treated as a replay")
	}
	f.done(k(1), true)
	if f.claim(k(1)) {
		t.Fatal("forwarded key not remembered")
	}
	now = now.Add(time.Minute) // one rotation: still in prev
	if f.claim(k(1)) {
		t.Fatal("forwarded key forgotten after one rotation")
	}
	now = now.Add(time.Minute) // two rotations: gone
	if !f.claim(k(1)) {
		t.Fatal("key still remembered after two windows")
	}
	f.done(k(1), true)
	for i := byte(10); i < 40; i++ { // size-bound rotation
		if !f.claim(k(i)) {
			t.Fatalf("fresh key %d refused", i)
		}
		f.done(k(i), true)
		if n := len(f.cur) + len(f.prev); n > 2*4 {
			t.Fatalf("filter holds %d keys, bound 8", n)
		}
	}
}
