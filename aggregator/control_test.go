package aggregator

import (
	"crypto/ed25519"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// testControlPipeline is the pipeline digest the control tests serve.
var testControlPipeline = [32]byte{7}

// signedMsg is a control message signed by key for partition of 2 of the
// reports topic and testControlPipeline, issued at issued, with the Kafka
// timestamp at.
func signedMsg(t testing.TB, key ed25519.PrivateKey, op, epoch string, partition int, issued, at time.Time) Message {
	return signedFor(t, key, op, epoch, protocol.ControlTarget{Pipeline: testControlPipeline, Topic: protocol.ReportsTopic, Partition: partition, Partitions: 2}, issued, at)
}

// signedFor is a control message signed by key for to.
func signedFor(t testing.TB, key ed25519.PrivateKey, op, epoch string, to protocol.ControlTarget, issued, at time.Time) Message {
	t.Helper()
	b, err := protocol.SignControl(key, op, "query", epoch, to, issued, protocol.ControlValidity)
	if err != nil {
		t.Fatal(err)
	}
	return Message{Control: true, Value: b, Time: at}
}

// signedV2 is a version 2 control message (no pipeline, no topic) signed
// by key for partition of 2, as crowdlog wrote it before version 3.
func signedV2(t testing.TB, key ed25519.PrivateKey, op, epoch string, partition int, issued, at time.Time) Message {
	t.Helper()
	c := &protocol.Control{Version: protocol.ControlSigned, Op: op, App: "query", Epoch: epoch, Partitions: 2, Partition: partition,
		Issued: issued.Unix(), NotAfter: issued.Add(protocol.ControlValidity).Unix()}
	c.Sig = ed25519.Sign(key, protocol.ControlSignedBytes(c))
	b, err := json.Marshal(protocol.SignedControl{V: protocol.ControlSigned, Op: op, App: "query", Epoch: epoch, Partitions: 2,
		Partition: partition, Issued: c.Issued, NotAfter: c.NotAfter, Sig: c.Sig})
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
	p.Pipelines = map[[32]byte]bool{testControlPipeline: true}
	other1 := protocol.ControlTarget{Pipeline: [32]byte{8}, Topic: protocol.ReportsTopic, Partition: 1, Partitions: 2}
	otherTopic := protocol.ControlTarget{Pipeline: testControlPipeline, Topic: protocol.DecryptedTopic, Partition: 1, Partitions: 2}
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
		{signedMsg(t, key, protocol.ControlOpenEpoch, "p0", 0, now, now), DropReplayedControl},                                          // another partition's
		{signedMsg(t, key, protocol.ControlOpenEpoch, "old", 1, now.Add(-3*time.Hour), now), DropReplayedControl},                       // expired at its timestamp
		{signedMsg(t, key, protocol.ControlOpenEpoch, "ahead", 1, now.Add(10*time.Minute), now), DropReplayedControl},                   // issued after its timestamp + skew
		{signedMsg(t, key, protocol.ControlOpenEpoch, "zero", 1, now.Add(-3*time.Hour), time.Time{}), DropReplayedControl},              // no timestamp (≤ 0 on the wire)
		{signedFor(t, key, protocol.ControlOpenEpoch, "p2", other1, now, now), DropReplayedControl},                                     // another pipeline's
		{signedFor(t, key, protocol.ControlOpenEpoch, "t2", otherTopic, now, now), DropReplayedControl},                                 // another topic's
		{signedV2(t, key, protocol.ControlOpenEpoch, "v2", 1, now, now), DropUnboundControl},                                            // version 2: binds no pipeline
		{signedMsg(t, key, protocol.ControlOpenEpoch, "e1", 1, now, now.Add(time.Minute)), ""},                                          // applied
		{signedMsg(t, key, protocol.ControlOpenEpoch, "old2", 1, now.Add(-2*time.Hour), now.Add(-90*time.Minute)), DropReplayedControl}, // expired before e1's issue time
		{signedMsg(t, key, protocol.ControlOpenEpoch, "skew", 1, now.Add(-4*time.Minute), now), ""},                                     // another signer's clock, within validity
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
	q.RequireOpen, q.ControlKey, q.Pipelines = true, pub, p.Pipelines
	if err := q.decodeState(b, nil); err != nil {
		t.Fatal(err)
	}
	if q.controlIssued != now.Unix() {
		t.Fatalf("restored control issue time %d, want %d", q.controlIssued, now.Unix())
	}
	q.Apply(signedMsg(t, key, protocol.ControlOpenEpoch, "old2", 1, now.Add(-2*time.Hour), now.Add(-90*time.Minute)))
	if q.Stats.Dropped[DropReplayedControl] != p.Stats.Dropped[DropReplayedControl]+1 {
		t.Error("restored partition applied an expired open")
	}

	// replay by Prepare + ApplyPrepared gives the same state
	r := NewPartition(1, 2, []*onion.KeyPair{okey})
	r.RequireOpen, r.ControlKey, r.Pipelines = true, pub, p.Pipelines
	for _, m := range log {
		pm := r.Prepare(m)
		r.ApplyPrepared(&pm)
	}
	if !reflect.DeepEqual(r.Stats, p.Stats) || r.controlIssued != p.controlIssued || r.OpenEpochs("query") != p.OpenEpochs("query") {
		t.Fatalf("replay differs: %v vs %v", r.Stats, p.Stats)
	}

	// ControlVerifier (readers of the topic other than the aggregator) gives
	// the partition's verdicts
	v := ControlVerifier{Key: pub, Partition: 1, Pipelines: p.Pipelines}
	refused := map[string]int64{}
	for _, m := range log {
		if _, reason := v.Check(m.Value, m.Time); reason != "" {
			refused[reason]++
		}
	}
	for _, r := range []string{DropUnsignedControl, DropBadControlSignature, DropUnboundControl, DropReplayedControl} {
		if refused[r] != p.Stats.Dropped[r] {
			t.Errorf("ControlVerifier refused %d as %s, the partition %d", refused[r], r, p.Stats.Dropped[r])
		}
	}

	// offline, without timestamps, only by an explicit ControlUntimed
	u := NewPartition(1, 2, []*onion.KeyPair{okey})
	u.RequireOpen, u.ControlKey, u.ControlUntimed = true, pub, true
	u.Apply(signedMsg(t, key, protocol.ControlOpenEpoch, "e1", 1, now, time.Time{}))
	if uv := (ControlVerifier{Key: pub, Partition: 1, Untimed: true}); u.OpenEpochs("query") != 1 || func() bool {
		_, r := uv.Check(signedMsg(t, key, protocol.ControlOpenEpoch, "e1", 1, now, time.Time{}).Value, time.Time{})
		return r != ""
	}() {
		t.Errorf("untimed: %d open, dropped %v", u.OpenEpochs("query"), u.Stats.Dropped)
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
