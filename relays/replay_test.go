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
	var seq uint64
	claim := func(key replayKey) bool { seq++; return f.claim(key, seq) == claimNew } // each call: another message
	if !claim(k(1)) || claim(k(1)) {
		t.Fatal("in-flight key not claimed exactly once")
	}
	f.done(k(1), false) // forward failed: redelivery is not a replay
	if !claim(k(1)) {
		t.Fatal("redelivery after a failed forward treated as a replay")
	}
	f.done(k(1), true)
	if claim(k(1)) {
		t.Fatal("forwarded key not remembered")
	}
	now = now.Add(time.Minute) // one rotation: still in prev
	if claim(k(1)) {
		t.Fatal("forwarded key forgotten after one rotation")
	}
	now = now.Add(time.Minute) // two rotations: gone
	if !claim(k(1)) {
		t.Fatal("key still remembered after two windows")
	}
	f.done(k(1), true)
	for i := byte(10); i < 40; i++ { // size-bound rotation
		if !claim(k(i)) {
			t.Fatalf("fresh key %d refused", i)
		}
		f.done(k(i), true)
		if n := len(f.cur) + len(f.prev); n > 2*4 {
			t.Fatalf("filter holds %d keys, bound 8", n)
		}
	}
}

// TestReplayFilterRedelivery: JetStream redelivering the same message (same
// stream sequence) is never a replay — terminating it would also terminate
// the copy in flight, which may still fail; another message with the same
// layer is.
func TestReplayFilterRedelivery(t *testing.T) {
	f := newReplayFilter(time.Minute, 100)
	k := replayKey{7}
	if f.claim(k, 10) != claimNew {
		t.Fatal("first copy not new")
	}
	if got := f.claim(k, 10); got != claimRedeliveryBusy {
		t.Fatalf("redelivery while in flight: %v, want busy (retry later)", got)
	}
	if got := f.claim(k, 11); got != claimRedeliveryBusy {
		t.Fatalf("other message with the same layer while in flight: %v, want busy (decided once the first copy is done)", got)
	}
	f.done(k, false) // the first copy's forward failed
	if f.claim(k, 10) != claimNew {
		t.Fatal("redelivery after a failed forward not processed")
	}
	f.done(k, true)
	if got := f.claim(k, 10); got != claimRedeliveryDone {
		t.Fatalf("redelivery after forwarding: %v, want done (ack)", got)
	}
	if got := f.claim(k, 12); got != claimReplay {
		t.Fatalf("replay after forwarding: %v, want replay", got)
	}
}
