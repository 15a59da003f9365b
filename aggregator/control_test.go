package aggregator

import (
	"crypto/ed25519"
	"reflect"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// signedMsg is a control message signed by key for partition of 2, issued
// at issued, with the Kafka timestamp at.
func signedMsg(t testing.TB, key ed25519.PrivateKey, op, epoch string, partition int, issued, at time.Time) Message {
	t.Helper()
	b, err := protocol.SignControl(key, op, "query", epoch, partition, 2, issued, protocol.ControlValidity)
	if err != nil {
		t.Fatal(err)
	}
	return Message{Control: true, Value: b, Time: at}
}

// TestControlVerification: with ControlKey, a partition applies only the
// control messages the operator signed for it, within their validity; the
// others are dropped by reason and change nothing. The newest accepted
// issue time survives a snapshot, and Prepare + ApplyPrepared is Apply.
func TestControlVerification(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	okey, _ := onion.GenerateKeyPair(1)
	now := time.Unix(1767225600, 0)
	p := NewPartition(1, 2, []*onion.KeyPair{okey})
	p.RequireOpen, p.ControlKey = true, pub
	var log []Message
	apply := func(m Message) {
		log = append(log, m)
		p.Apply(m)
	}
	for i, c := range []struct {
		m      Message
		reason string // "" : applied
	}{
		{controlMsg(t, protocol.EpochOpen{Op: protocol.ControlOpenEpoch, App: "query", Epoch: "u", Partitions: 2}), DropUnsignedControl},
		{signedMsg(t, other, protocol.ControlOpenEpoch, "f", 1, now, now), DropBadControlSignature},
		{signedMsg(t, key, protocol.ControlOpenEpoch, "p0", 0, now, now), DropReplayedControl},                             // another partition's
		{signedMsg(t, key, protocol.ControlOpenEpoch, "old", 1, now.Add(-3*time.Hour), now), DropReplayedControl},          // expired at its timestamp
		{signedMsg(t, key, protocol.ControlOpenEpoch, "ahead", 1, now.Add(10*time.Minute), now), DropReplayedControl},      // issued after its timestamp + skew
		{signedMsg(t, key, protocol.ControlOpenEpoch, "e1", 1, now, now.Add(time.Minute)), ""},                             // applied
		{signedMsg(t, key, protocol.ControlOpenEpoch, "old2", 1, now.Add(-2*time.Hour), time.Time{}), DropReplayedControl}, // expired before e1's issue time
		{signedMsg(t, key, protocol.ControlOpenEpoch, "skew", 1, now.Add(-4*time.Minute), time.Time{}), ""},                // another signer's clock, within validity
	} {
		before := p.Stats.Dropped[c.reason]
		apply(c.m)
		if c.reason != "" && p.Stats.Dropped[c.reason] != before+1 {
			t.Errorf("message %d: not dropped as %s (%v)", i, c.reason, p.Stats.Dropped)
		}
	}
	if got := p.OpenEpochs("query"); got != 2 || p.epochs[epochKey{"query", "e1"}] == nil || p.epochs[epochKey{"query", "skew"}] == nil {
		t.Fatalf("open epochs %d (%v), want e1 and skew", got, p.epochs)
	}
	apply(signedMsg(t, other, protocol.ControlCloseEpoch, "e1", 1, now, now))
	apply(controlMsg(t, protocol.EpochClose{App: "query", Epoch: "e1", Partitions: 2}))
	if p.closed[epochKey{"query", "e1"}] {
		t.Fatal("a forged or unsigned close closed e1")
	}

	// the snapshot keeps the newest issue time: old2 is refused after a restore too
	b, _, err := p.encodeState()
	if err != nil {
		t.Fatal(err)
	}
	q := NewPartition(1, 2, []*onion.KeyPair{okey})
	q.RequireOpen, q.ControlKey = true, pub
	if err := q.decodeState(b, nil); err != nil {
		t.Fatal(err)
	}
	if q.controlIssued != now.Unix() {
		t.Fatalf("restored control issue time %d, want %d", q.controlIssued, now.Unix())
	}
	q.Apply(signedMsg(t, key, protocol.ControlOpenEpoch, "old2", 1, now.Add(-2*time.Hour), time.Time{}))
	if q.Stats.Dropped[DropReplayedControl] != p.Stats.Dropped[DropReplayedControl]+1 {
		t.Error("restored partition applied an expired open")
	}

	// replay by Prepare + ApplyPrepared gives the same state
	r := NewPartition(1, 2, []*onion.KeyPair{okey})
	r.RequireOpen, r.ControlKey = true, pub
	for _, m := range log {
		pm := r.Prepare(m)
		r.ApplyPrepared(&pm)
	}
	if !reflect.DeepEqual(r.Stats, p.Stats) || r.controlIssued != p.controlIssued || r.OpenEpochs("query") != p.OpenEpochs("query") {
		t.Fatalf("replay differs: %v vs %v", r.Stats, p.Stats)
	}

	// ControlVerifier (readers of the topic other than the aggregator) gives
	// the partition's verdicts
	v := ControlVerifier{Key: pub, Partition: 1}
	refused := map[string]int64{}
	for _, m := range log {
		if _, reason := v.Check(m.Value, m.Time); reason != "" {
			refused[reason]++
		}
	}
	for _, r := range []string{DropUnsignedControl, DropBadControlSignature, DropReplayedControl} {
		if refused[r] != p.Stats.Dropped[r] {
			t.Errorf("ControlVerifier refused %d as %s, the partition %d", refused[r], r, p.Stats.Dropped[r])
		}
	}

	// without a key every control message that parses applies (unchanged)
	n := NewPartition(1, 2, []*onion.KeyPair{okey})
	n.RequireOpen = true
	n.Apply(controlMsg(t, protocol.EpochOpen{Op: protocol.ControlOpenEpoch, App: "query", Epoch: "u", Partitions: 2}))
	n.Apply(signedMsg(t, other, protocol.ControlOpenEpoch, "f", 1, now, now))
	if n.OpenEpochs("query") != 2 || len(n.Stats.Dropped) != 0 {
		t.Errorf("without ControlKey: %d open, dropped %v", n.OpenEpochs("query"), n.Stats.Dropped)
	}
}
