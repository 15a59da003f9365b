package aggregator

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// controlReplayRun is what one run of the control-replay scenario gave.
type controlReplayRun struct {
	accepted    int64            // attack records applied: written − refused by a control check
	dropped     map[string]int64 // the service's drops by reason
	e1Open      int              // partitions where the operator's e1 is open at the end
	staleOpen   int              // partitions where a replayed expired open opened its epoch
	zeroTimes   int              // attack records read back without a timestamp (written with ≤ 0 ms)
	attackCount int              // attack records written
}

// runControlReplay mounts the attack of TestAttackControlReplayTimestamp
// on a fresh kfake cluster of 2 partitions and a Service that serves
// pipeline p2 under the operator's key opPub; legacy restores the
// version 2 checks (Service.legacyControl).
func runControlReplay(t *testing.T, legacy bool, opPub ed25519.PublicKey, opKey ed25519.PrivateKey, p1, p2 [32]byte) controlReplayRun {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const partitions = 2
	kb, brokers := startBroker(ctx, t, t.TempDir(), partitions)
	now := time.Now()
	rec := func(p int, at time.Time, b []byte) kafkago.Message {
		return kafkago.Message{Value: b, Time: at, Headers: []kafkago.Header{
			{Key: protocol.ControlHeader, Value: []byte("x")}, {Key: protocol.PartitionHeader, Value: []byte(strconv.Itoa(p))}}}
	}
	signed := func(op, epoch string, pipe [32]byte, p int, issued time.Time) []byte {
		b, err := protocol.SignControl(opKey, op, "query", epoch, protocol.ControlTarget{Pipeline: pipe, Topic: protocol.ReportsTopic, Partition: p, Partitions: partitions},
			issued, protocol.ControlValidity)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// per partition, written before the operator's open of e1 (a fresh
	// pipeline deployment): records the operator signed for p2 three hours
	// ago (expired) replayed with Kafka timestamps ≤ 0 — opens of
	// stale-a and stale-b, closes of e1 —, a valid close of e1 the operator
	// signed for pipeline p1 (a scheduled epoch name recurs across
	// pipelines), and a version 2 close of e1 (no pipeline, no topic)
	// (kafka-go's writer sends a record of time 0 with its write time, as
	// measured on this path; −1 and −3,600,000 ms reach the broker as
	// written and are read back as the zero time)
	zero, minus := time.UnixMilli(-3_600_000), time.UnixMilli(-1)
	var attack []kafkago.Message
	for p := range partitions {
		v2 := signedV2(t, opKey, protocol.ControlCloseEpoch, "e1", p, now, now)
		attack = append(attack,
			rec(p, zero, signed(protocol.ControlOpenEpoch, "stale-a", p2, p, now.Add(-3*time.Hour))),
			rec(p, minus, signed(protocol.ControlOpenEpoch, "stale-b", p2, p, now.Add(-3*time.Hour))),
			rec(p, zero, signed(protocol.ControlCloseEpoch, "e1", p2, p, now.Add(-3*time.Hour))),
			rec(p, minus, signed(protocol.ControlCloseEpoch, "e1", p2, p, now.Add(-3*time.Hour))),
			rec(p, now, signed(protocol.ControlCloseEpoch, "e1", p1, p, now)),
			rec(p, now, v2.Value))
	}
	cw := &kafkago.Writer{Addr: kafkago.TCP(kb.Addr), Topic: protocol.ReportsTopic, Transport: &kafkago.Transport{},
		Balancer: kafkago.BalancerFunc(samePartition), RequiredAcks: kafkago.RequireAll, BatchTimeout: 2 * time.Millisecond}
	defer cw.Close()
	if err := cw.WriteMessages(ctx, attack...); err != nil {
		t.Fatal(err)
	}
	if err := OpenEpoch(ctx, brokers, &ControlSigner{Key: opKey, Pipeline: p2}, "query", "e1"); err != nil {
		t.Fatal(err)
	}
	out := controlReplayRun{attackCount: len(attack)}
	// what the broker kept: kafka-go reads a timestamp ≤ 0 as the zero time
	for p := range partitions {
		r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: brokers, Topic: protocol.ReportsTopic, Partition: p, MaxWait: 50 * time.Millisecond})
		for range len(attack) / partitions {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m.Time.IsZero() {
				out.zeroTimes++
			}
		}
		r.Close()
	}

	onionKey, _ := onion.GenerateKeyPair(1)
	// a Schedule without apps writes nothing; the Service then records
	// each partition's open epochs after every batch (openIn)
	s := &Service{Brokers: brokers, Keys: []*onion.KeyPair{onionKey}, Logger: slog.New(slog.DiscardHandler),
		GroupID: "control-replay", MaxWait: 20 * time.Millisecond, SessionTimeout: 6 * time.Second,
		ControlKey: opPub, Pipelines: map[[32]byte]bool{p2: true}, legacyControl: legacy,
		Schedule: &Schedule{Length: time.Hour, Every: time.Hour}}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	defer func() {
		stop()
		<-done
	}()
	// the operator's open is each partition's last record: it is applied
	// (e1 open) or refused (open-after-close) in both
	for deadline := time.Now().Add(60 * time.Second); openIn(s, "e1")+int(s.DroppedByReason()["open-after-close"]) < partitions; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("in 60 s the operator's open of e1 was not applied in every partition: e1 open in %d, drops %v", openIn(s, "e1"), s.DroppedByReason())
		}
	}
	out.dropped = s.DroppedByReason()
	refused := out.dropped[DropUnsignedControl] + out.dropped[DropBadControlSignature] + out.dropped[DropUnboundControl] + out.dropped[DropReplayedControl]
	out.accepted = int64(len(attack)) - refused
	out.e1Open = openIn(s, "e1")
	out.staleOpen = openIn(s, "stale-a") + openIn(s, "stale-b")
	return out
}

// TestAttackControlReplayTimestamp (docs/threat-model.md, forged epoch
// control): an attacker who may write to topic reports and captured
// operator-signed control records replays them on the real kfake broker
// where the validity window used to be skipped: records signed three
// hours ago (expired) with Kafka timestamps −1 and −3,600,000 ms, which
// kafka-go reads as "no timestamp" (as any ≤ 0); a valid close the operator signed for another
// pipeline (p1) whose scheduled epoch names recur; and a version 2 close,
// which binds no pipeline. With the checks every one is refused and the
// operator's open of e1 applies in both partitions. The control, the
// version 2 rules (the unexported legacyControl hook): every replayed
// record is applied, the stale epochs open and e1 is closed before its
// open, which is then refused.
//
// kfake accepts the topic config message.timestamp.type=LogAppendTime
// (EnsureLogAppendTime) but does not rewrite the timestamps of records
// produced with CreateTime: on kfake the refusal of records without a
// timestamp is what stops the replay, on Kafka the broker's append time
// lies outside an expired record's window as well.
func TestAttackControlReplayTimestamp(t *testing.T) {
	opPub, opKey, _ := ed25519.GenerateKey(nil)
	p1, p2 := [32]byte{1}, [32]byte{2}
	fixed := runControlReplay(t, false, opPub, opKey, p1, p2)
	legacy := runControlReplay(t, true, opPub, opKey, p1, p2)
	js, _ := json.Marshal(map[string]int64{"replayed": fixed.dropped[DropReplayedControl], "unbound": fixed.dropped[DropUnboundControl]})
	fmt.Printf("ATTACK control-replay-timestamp: %d of %d replayed operator-signed control records accepted (per partition of 2: 4 expired at Kafka timestamp -1 or -3600000 ms, %d of %d read back without a timestamp; 1 signed for another pipeline digest; 1 version 2 without binding; refused %s), e1 open in %d of 2 partitions, %d stale epochs opened; control with the version 2 checks: %d of %d accepted, %d stale epochs opened, e1 closed before its open (open refused in %d of 2 partitions)\n",
		fixed.accepted, fixed.attackCount, fixed.zeroTimes, fixed.attackCount*4/6, js, fixed.e1Open, fixed.staleOpen,
		legacy.accepted, legacy.attackCount, legacy.staleOpen, legacy.dropped["open-after-close"])
	if fixed.zeroTimes != fixed.attackCount*4/6 {
		t.Errorf("%d records read back without a timestamp, want %d (the attack needs them)", fixed.zeroTimes, fixed.attackCount*4/6)
	}
	if fixed.accepted != 0 || fixed.dropped[DropReplayedControl] != 10 || fixed.dropped[DropUnboundControl] != 2 || fixed.e1Open != 2 || fixed.staleOpen != 0 {
		t.Errorf("with the checks: %d replayed records accepted, drops %v, e1 open in %d partitions, %d stale opens; want 0, 10 replayed-control, 2 unbound-control, 2, 0",
			fixed.accepted, fixed.dropped, fixed.e1Open, fixed.staleOpen)
	}
	if legacy.accepted != int64(legacy.attackCount) || legacy.staleOpen != 4 || legacy.dropped["open-after-close"] != 2 {
		t.Errorf("control (version 2 checks): %d of %d accepted, %d stale opens, drops %v: the replay should succeed there", legacy.accepted, legacy.attackCount, legacy.staleOpen, legacy.dropped)
	}
}
