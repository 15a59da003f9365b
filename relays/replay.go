package relays

import (
	"sync"
	"time"
)

// Replay protection defaults (docs/threat-model.md).
const (
	// DefaultReplayWindow is how long a generation of the replay filter
	// lives before it rotates.
	DefaultReplayWindow = time.Hour
	// DefaultReplayEntries is the most layers one generation holds; a full
	// generation rotates early. Two generations are kept: at 16-byte keys
	// and Go map overhead (~48 B per entry) the filter stays under ~100 MB.
	DefaultReplayEntries = 1 << 20
)

// replayKey identifies a peeled layer: the first 16 bytes of its HPKE
// encapsulated key (RFC 9180 enc, an ephemeral X25519 public key the
// sender draws fresh for every layer). The enc is bound to the ciphertext
// (it keys the AEAD), so a layer with a copied enc and other bytes does not
// peel and never reaches the filter. Two honest layers collide with
// probability about n²/2^129 for n remembered layers: at 2^21 entries
// ~2^-87, i.e. no false positives in practice.
type replayKey [16]byte

// replayFilter remembers the layers a relay process has forwarded, in two
// rotating generations (current and previous), so memory is bounded by
// 2×entries keys. A layer counts as forwarded only after its forward
// succeeded: a message redelivered by JetStream because its forward failed
// is not in the filter and is processed again. A copy arriving while
// another is being forwarded ("in flight") is retried later (Nak with
// delay), never terminated: the first copy may still fail, and terminating
// a JetStream redelivery would terminate the very message in flight.
//
// Window: a forwarded layer is remembered for at least min(window, the
// time to forward entries layers) and at most twice that. A replay after
// that passes this relay; the aggregator still drops its report id within
// the epoch (aggregator.Partition). The filter is per process: relays
// sharing a name do not share it, but JetStream's duplicate window
// (DuplicateWindow, keyed by MsgID) already stops identical re-publications
// within 2 minutes across processes.
type replayFilter struct {
	mu       sync.Mutex
	window   time.Duration
	entries  int
	started  time.Time
	cur      map[replayKey]uint64 // key → JetStream stream sequence of the forwarded copy
	prev     map[replayKey]uint64
	inflight map[replayKey]uint64
	now      func() time.Time
}

func newReplayFilter(window time.Duration, entries int) *replayFilter {
	return &replayFilter{window: window, entries: entries, now: time.Now,
		cur: map[replayKey]uint64{}, prev: map[replayKey]uint64{}, inflight: map[replayKey]uint64{}}
}

// keyOf returns the replay key of a layer that peeled (it is at least
// 2+32+16 bytes long, checked by onion.Peel).
func keyOf(layer []byte) replayKey {
	var k replayKey
	copy(k[:], layer[2:2+len(k)])
	return k
}

// claimResult is what the filter says of a peeled layer.
type claimResult int

const (
	claimNew            claimResult = iota // first copy: now in flight
	claimReplay                            // another message with a layer already forwarded: drop
	claimRedeliveryBusy                    // a copy (redelivery or replay) of a layer in flight: retry later
	claimRedeliveryDone                    // JetStream redelivered this very message after it was forwarded: ack
)

// claim classifies a layer with stream sequence seq (0 when unknown). A
// replay is another message carrying the same layer; a redelivery of the
// same message (same sequence) is never dropped, since terminating it would
// also terminate the in-flight copy, which may still fail and need it.
func (f *replayFilter) claim(k replayKey, seq uint64) claimResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rotate()
	for _, m := range []map[replayKey]uint64{f.cur, f.prev} {
		if s, ok := m[k]; ok {
			if seq != 0 && s == seq {
				return claimRedeliveryDone
			}
			return claimReplay
		}
	}
	if _, ok := f.inflight[k]; ok {
		// a copy is being forwarded right now and may still fail: retry this
		// one later rather than terminate it (it becomes a replay, and is
		// dropped, only once the first copy was forwarded)
		return claimRedeliveryBusy
	}
	f.inflight[k] = seq
	return claimNew
}

// done ends a claim: forwarded layers are remembered, failed ones
// forgotten (their redelivery is not a replay).
func (f *replayFilter) done(k replayKey, forwarded bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := f.inflight[k]
	delete(f.inflight, k)
	if forwarded {
		f.rotate()
		f.cur[k] = seq
	}
}

func (f *replayFilter) rotate() {
	now := f.now()
	if f.started.IsZero() {
		f.started = now
	}
	if len(f.cur) >= f.entries || now.Sub(f.started) >= f.window {
		f.prev, f.cur, f.started = f.cur, make(map[replayKey]uint64, len(f.cur)), now
	}
}
